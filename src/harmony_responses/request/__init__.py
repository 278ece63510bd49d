"""request — a ``POST /v1/responses`` body, validated and typed once, its history resolved.

``read_request`` (``resolve.py``) turns the body into a ``ResponseRequest``: ``validate.py`` checks every
parameter in the API's wording (``schema.py`` the JSON schemas), ``items.py`` gives input items their ids
and listing shapes, ``resolve.py`` replaces references and prior responses with their stored items and
reopens sealed reasoning (``sealed.py``), and ``echo.py`` says how the Response echoes the request.
Nothing here does I/O of its own: stored items come through the ``History`` the caller passes.
"""

from .items import is_item_reference, normalize_items
from .resolve import History, ResponseRequest, model_not_found, read_request, resolve_items
from .sealed import ReasoningSealer, configure_reasoning_key, decrypt_reasoning, encrypt_reasoning
from .validate import RequestOptions, check_metadata, conversation_items, validate_request

__all__ = [
    "History",
    "ReasoningSealer",
    "RequestOptions",
    "ResponseRequest",
    "check_metadata",
    "conversation_items",
    "configure_reasoning_key",
    "decrypt_reasoning",
    "encrypt_reasoning",
    "is_item_reference",
    "model_not_found",
    "normalize_items",
    "read_request",
    "resolve_items",
    "validate_request",
]
