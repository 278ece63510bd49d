"""Errors of the translator, named for who broke the protocol (as in h11).

    ProtocolError (abstract; carries ``code``, the Responses error code to report)
    ├── RemoteProtocolError   the model emitted Harmony we cannot recover from; the translator has
    │                         already ended the response with ``response.failed`` naming what it saw
    └── LocalProtocolError    the caller misused the translator (a bug in our own code)

Any other exception from the translator is a bug.
"""

from __future__ import annotations

__all__ = ["LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    code: str = "server_error"

    def __init__(self, message: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract; raise Local- or RemoteProtocolError")
        super().__init__(message)
        self.message = message


class LocalProtocolError(ProtocolError):
    """The caller did something the translator's state does not allow."""


class RemoteProtocolError(ProtocolError):
    """The model's output cannot be read as Harmony here; the message says what it emitted."""
