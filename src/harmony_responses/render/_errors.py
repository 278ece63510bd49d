"""The one exception the render package raises for a bad request (the api layer turns it into HTTP 400)."""

from __future__ import annotations

__all__ = ["RenderError"]


class RenderError(Exception):
    """A client error in the request: ``param`` names the offending field (``input[2].content[0]``)."""

    def __init__(self, message: str, *, param: str | None, code: str | None = "invalid_value") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def __repr__(self) -> str:
        return f"RenderError({self.message!r}, param={self.param!r}, code={self.code!r})"
