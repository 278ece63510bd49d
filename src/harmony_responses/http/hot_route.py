"""``HotRoute``: ``POST /v1/responses`` handed straight to its route, past Starlette's router.

Starlette sends every request through its exception middleware and then its router, which tries the routes
in turn, matches the path's pattern, checks the method and hands over to the route's app: five coroutine
frames and a wrapper around each of the answer's first sends, for the one endpoint every burst is made of,
whose path and method are known at the door. ``HotRoute`` takes the exception middleware's place in the
stack (``install``) and, for that route, sets in the scope what the two would have set (the exception
handlers, the router, the route, its endpoint and path parameters) and calls the route's own app: the same
``request_response`` wrapper with the same handlers around the same endpoint, so the same answers and
errors. Everything else goes through the exception middleware and the router as before.

The exception middleware would only catch what the router itself raises (a 404 or a 405: not for this path
and method) and what the route's wrapper passes on, for which it has the same handlers as that wrapper: none.
"""

from __future__ import annotations

from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import Route, Router, get_route_path
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HotRoute", "install"]


class HotRoute:
    """ASGI app in the exception middleware's place: ``route``'s requests to the route, the rest to ``app``."""

    def __init__(self, app: ExceptionMiddleware, *, route: Route, router: Router) -> None:
        self.app = app
        self.route = route
        self.router = router
        self._methods = frozenset(route.methods or ())
        # What ExceptionMiddleware puts in the scope for the route's wrapper (wrap_app_handling_exceptions).
        self._handlers = (app._exception_handlers, app._status_handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in self._methods and get_route_path(scope) == self.route.path:
            scope["starlette.exception_handlers"] = self._handlers
            if "router" not in scope:
                scope["router"] = self.router
            scope["route"] = self.route
            scope["endpoint"] = self.route.endpoint
            scope["path_params"] = dict(scope.get("path_params", {}))
            await self.route.app(scope, receive, send)
            return
        await self.app(scope, receive, send)


def install(stack: ASGIApp, router: Router, path: str, method: str) -> bool:
    """Put a ``HotRoute`` for the route of ``method path`` (a plain path, no parameters) in place of the
    exception middleware around ``router`` in ``stack`` (Starlette's middleware stack: each layer keeps the
    next as ``.app``). False when the route or that middleware is not found (the stack as Starlette built
    it, slower)."""
    route = next(
        (r for r in router.routes if isinstance(r, Route) and r.path == path and method in (r.methods or ())),
        None,
    )
    if route is None or route.param_convertors:
        return False
    layer = stack
    while (inner := getattr(layer, "app", None)) is not None:
        if isinstance(inner, ExceptionMiddleware) and inner.app is router:
            layer.app = HotRoute(inner, route=route, router=router)
            return True
        layer = inner
    return False
