"""serve — the composition root and the command line: options → ``Config`` → the server, on uvicorn.

``options.py`` declares every option once (flag, environment twin, type, default, help); ``config.py`` is
the value class they fill; ``app.create_app`` builds the engine, the store, the tools and the
``run.Server`` from it and hands that to the HTTP layer; ``cli.py`` is ``harmony-responses serve``.
"""

from .app import create_app
from .config import Config

__all__ = ["Config", "create_app"]
