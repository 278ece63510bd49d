"""run — a response's life, from a ``ResponseRequest`` to its last event.

``server.Server`` is what the HTTP layer calls. ``start.py`` builds a response's run (tool sessions,
prompt fitted to the context window by ``fit.py``, translator); ``loop.ResponseRun`` pumps engine calls
through the translator and runs built-in tools between them (the tool loop); ``stored.py`` keeps stored
responses (live in this process through ``live.py``, background work, leases, ``recovery.py`` after a
crash) and ``conversations.py`` the Conversations API's objects; ``turns.py`` shares the event loop's
time between streams (first tokens first); ``errors.py`` maps what the layers below raise to ``APIError``.
"""

from .conversations import Conversations, conversation_object
from .errors import REFUSALS, api_error
from .live import TERMINAL_EVENTS, StoredRun
from .loop import ResponseRun
from .server import Server
from .start import Prompting
from .stored import Background, StoredResponses

__all__ = [
    "REFUSALS",
    "TERMINAL_EVENTS",
    "Background",
    "Conversations",
    "Prompting",
    "ResponseRun",
    "Server",
    "StoredResponses",
    "StoredRun",
    "api_error",
    "conversation_object",
]
