"""The code interpreter: Harmony's ``python`` tool, run in a bubblewrap sandbox with state kept per container.

``_sandbox`` starts and drives one jailed REPL (``_driver`` is the REPL's own source, run inside);
``_containers`` owns container ids, lifetimes and the per-response ``ToolSession``.
"""

from ._containers import (
    CodeInterpreterSession,
    Container,
    ContainerManager,
    ContainerNotFound,
    code_interpreter_session,
)
from ._sandbox import CellResult, Sandbox, SandboxLimits, SandboxUnavailable, probe_sandbox

__all__ = [
    "CellResult",
    "CodeInterpreterSession",
    "Container",
    "ContainerManager",
    "ContainerNotFound",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "code_interpreter_session",
    "probe_sandbox",
]
