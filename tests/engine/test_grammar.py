"""A custom tool's grammar over the JSON the model writes: ``{"input": "…"}`` is allowed exactly when the
decoded input is (Python's ``re`` for regexes, lark's own parser for lark grammars), whatever JSON escapes
the text needs, for any text (hypothesis)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark import Lark
from lark.exceptions import LarkError

from harmony_responses.grammar import input_grammar

from .ebnf import accepts

REGEXES = [
    r"^[A-Z]{2,4}-\d+$",
    r"(?i)yes|no(pe)?",
    r"[^\n]*\n\S+",
    r'a"b\\c/d\te',
    r"(.|\n){0,12}",
    r"(?s).{2,5}x",
    r"[\w.-]+@[a-z]+\.(com|org)",
    r"\W?[^a-f\d]{1,3}",
    r"\s*[\x00-\x1f]+",
    r"(ab|cd)*?e+?",
]
# Text that meets the regexes' edges: quotes, backslashes, controls, newlines, non-ASCII letters and digits.
ALPHABET = st.sampled_from(list('aAbBcdefxyzXYZ-_.@/"\\\n\t\r\x00\x1f \u00a0é٣ßK𝟘') + ["com", "org", "yes", "NO"])
TEXT = st.lists(ALPHABET, max_size=12).map("".join) | st.text(max_size=10)


@pytest.mark.parametrize("pattern", REGEXES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_regex_allows_exactly_the_json_of_what_it_matches(pattern: str, data: st.DataObject) -> None:
    grammar = input_grammar("regex", pattern)
    assert grammar is not None
    text = data.draw(TEXT | st.from_regex(pattern, fullmatch=True))
    matches = re.fullmatch(pattern, text) is not None
    assert accepts(grammar, json.dumps({"input": text}, ensure_ascii=False)) is matches
    assert accepts(grammar, json.dumps({"input": text}, ensure_ascii=False, separators=(",", ":"))) is matches


LARK = r"""
start: item ("," item)* ";"?
item: NUMBER | WORD | "nil"i | quoted | "(" WORD (" " WORD)* ")"
quoted: /"[^"\n]*"/
%import common.NUMBER
%import common.WORD
"""
LARK_TEXT = st.lists(st.sampled_from(["1", "2.5", "e3", "abc", "NIL", "nil", ",", ";", "(", ")", '"', "x y", "\n"]))


@settings(max_examples=300, deadline=None)
@given(parts=LARK_TEXT)
def test_a_lark_grammar_allows_exactly_the_json_of_what_lark_parses(parts: list[str]) -> None:
    grammar = input_grammar("lark", LARK)
    assert grammar is not None
    text = "".join(parts)
    try:
        Lark(LARK, parser="earley", lexer="dynamic").parse(text)
        parses = True
    except LarkError:
        parses = False
    assert accepts(grammar, json.dumps({"input": text})) is parses


@pytest.mark.parametrize(
    ("syntax", "definition"),
    [
        ("regex", r"(a)\1"),
        ("regex", r"a(?=b)"),
        ("regex", r"\bword\b"),
        ("regex", r"a^b"),
        ("regex", r"(unclosed"),
        ("lark", 'start: WORD+\n%import common.WORD\n%ignore " "'),
        ("lark", 'start: a\na: b "x"\nb: a | "y"'),
        ("lark", "start: UNDEFINED"),
        ("lark", "start: ("),
        ("ebnf", 'root ::= "a"'),
    ],
)
def test_what_cannot_be_constrained_is_none(syntax: str, definition: str) -> None:
    assert input_grammar(syntax, definition) is None
