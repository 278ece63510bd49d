"""The translate package's public API is exactly its ``__all__``."""

from __future__ import annotations

import types

import pytest

import harmony_responses.translate as translate


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(translate).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert sorted(translate.__all__) == sorted(public)
    assert len(translate.__all__) == len(set(translate.__all__))


def test_star_import_gives_the_public_api() -> None:
    namespace: dict[str, object] = {}
    exec("from harmony_responses.translate import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(translate.__all__)


def test_public_names_are_defined_in_the_package() -> None:
    for name in translate.__all__:
        value = getattr(translate, name)
        module = getattr(value, "__module__", None) or type(value).__module__
        assert module.startswith("harmony_responses.translate."), (name, module)


def test_expected_api() -> None:
    """What the server, the CLI and the engines are built on: removing any of these is an API change."""
    assert set(translate.__all__) >= {
        "Translator",
        "RecipientMap",
        "ItemKind",
        "Target",
        "ToolCall",
        "State",
        "NEED_TOKENS",
        "AWAIT_TOOL",
        "DONE",
        "ProtocolError",
        "LocalProtocolError",
        "RemoteProtocolError",
        "response_skeleton",
        "usage_object",
    }


def test_protocol_errors() -> None:
    with pytest.raises(TypeError, match="abstract"):
        translate.ProtocolError("x")
    for cls in (translate.LocalProtocolError, translate.RemoteProtocolError):
        error = cls("what happened")
        assert isinstance(error, translate.ProtocolError)
        assert (error.message, error.code, str(error)) == ("what happened", "server_error", "what happened")
