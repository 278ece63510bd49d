"""http — the HTTP transport and endpoints: Starlette-thin (parse, call, map errors in one place).

``app.build_app`` wires the routes: ``responses.py`` (``POST /v1/responses``), ``stored.py`` (stored
responses and conversations), the models and health endpoints. ``streaming.py`` sends a run as SSE or
JSON and watches for the client going away; ``first_tokens.py`` tells the run layer when a request starts
and when its first delta is out; ``auth.py`` checks bearer keys; ``errors.py`` turns every exception into
the API's JSON error; ``observe.py`` gives every request its id and counts it (``/metrics``). Everything
below HTTP is reached through the run layer (``run.Server``).
"""

from .app import build_app

__all__ = ["build_app"]
