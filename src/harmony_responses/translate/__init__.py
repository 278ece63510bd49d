"""translate — the heart: generated Harmony token ids in, OpenAI Responses stream events out.

Sans-I/O (no sockets, no asyncio, no clock, no random ids): see ``_translator.Translator``. The token-level
protocol is the table in ``_state.py``; header reading is ``_header.py``; which item a tool call becomes is
``_recipients.py``.
"""

# Everything in __all__ is the translate package's public API.
from ._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from ._recipients import ItemKind, RecipientMap, Target
from ._response import response_skeleton, usage_object
from ._state import State
from ._translator import AWAIT_TOOL, DONE, NEED_TOKENS, ToolCall, Translator, describe_text_run

__all__ = [
    "AWAIT_TOOL",
    "DONE",
    "NEED_TOKENS",
    "ItemKind",
    "LocalProtocolError",
    "ProtocolError",
    "RecipientMap",
    "RemoteProtocolError",
    "State",
    "Target",
    "ToolCall",
    "Translator",
    "describe_text_run",
    "response_skeleton",
    "usage_object",
]
