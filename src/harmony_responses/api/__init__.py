"""api — the HTTP server: a Starlette app serving the OpenAI Responses API over any engine.

Modules: ``app`` (routes, app factory), ``config`` (the value class), ``responses`` (the endpoint),
``run`` (engine → translator pump), ``streaming`` (SSE/JSON transport with disconnect handling),
``validate`` and ``schema`` (request validation), ``echo`` (request → Response fields), ``fit``
(truncation), ``sealed`` (``reasoning.encrypted_content``), ``auth``, ``errors``, ``cli``.
"""

from .app import create_app
from .config import Config
from .errors import APIError
from .sealed import decrypt_reasoning, encrypt_reasoning

__all__ = ["APIError", "Config", "create_app", "decrypt_reasoning", "encrypt_reasoning"]
