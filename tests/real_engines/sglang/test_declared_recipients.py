"""Declared recipients only (issue 26 item 3) through SGLang 0.5.23's xgrammar: a header's ``to=`` is held to
the declared tools, which is the default (``--constrain-recipients declared``).

The script calls ``functions.get_weather`` where only ``get`` is declared: the matcher SGLang compiled from
our structural tag refuses the id that leaves the declared names (``_weather``, after ``.get``), where a
grammar-following sampler would have been made to write something else (the vLLM tier shows the steering).
Under ``tool_choice: "none"`` no header may name a recipient: the matcher refuses the recipient's `` to``.
"""

from __future__ import annotations

import pytest

from ..grammars import GET, call
from .matching import Stack, matcher, refused_where

pytestmark = pytest.mark.timeout(900)  # the first test waits for SGLang to start (conftest)

WEATHER = {**GET, "name": "get_weather"}
TEXT = call("get_weather", '{"city": "Paris"}')


def test_an_undeclared_recipient_is_refused_where_it_leaves_the_declared_names(stack: Stack) -> None:
    _, grammar = matcher(stack, "recipundeclared", TEXT, [GET])
    refused_where(TEXT, grammar, "to=functions.get", in_header=True)
    # Declared, the same call is accepted whole, its arguments held to one JSON object.
    response, grammar = matcher(stack, "recipdeclared", TEXT, [WEATHER, GET])
    assert grammar["accepted_all"] is True, grammar
    assert (response.output[-1].type, response.output[-1].name) == ("function_call", "get_weather")


def test_tool_choice_none_refuses_any_recipient(stack: Stack) -> None:
    _, grammar = matcher(stack, "recipnone", TEXT, [WEATHER], tool_choice="none")
    refused_where(TEXT, grammar, "<|channel|>commentary", in_header=True)
