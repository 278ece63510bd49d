from .helpers import docs, servers

__all__ = ["docs", "servers"]
