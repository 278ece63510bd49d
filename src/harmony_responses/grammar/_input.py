"""A custom tool's grammar as an engine grammar over what the model writes: ``{"input": "<JSON-escaped input>"}``.

The prompt declares a custom tool as a function of one string (render/_tools.py), so the model does not
write the input itself but a JSON object whose ``input`` string *decodes* to it. A grammar that constrains
the call must therefore describe the escaped text: a newline of the input is the two characters ``\\n``, a
quote ``\\"``. ``input_grammar`` builds that grammar from the tool's ``format``:

- ``regex``: parsed by Python's own regex parser (``re._parser``, the one ``re`` compiles with; lark uses
  it too), then written out node by node, every character set split into what JSON writes raw and what
  it writes escaped;
- ``lark``: loaded and compiled to plain BNF by lark itself (rules expanded, ``%import`` resolved,
  terminals joined into one pattern each), each terminal then written as above. Lark writes ``x+`` as a
  left-recursive rule, which llama.cpp's grammar parser refuses: direct left recursion is rewritten as
  repetition, and a grammar that is left-recursive otherwise is not constrained.

The output is the EBNF subset that xgrammar (vLLM, SGLang) and llama.cpp's GBNF both read: ``name ::=``
rules, double-quoted literals, character classes, ``( )``, ``|``, ``* + ?`` and ``{m,n}``; rule names are
``rN`` (GBNF allows no underscore). Characters escape as ``\\uXXXX``/``\\UXXXXXXXX`` so that both parsers
read them alike.

What JSON may write for a character, and what the grammar allows: any character raw except ``"``, ``\\``
and the controls U+0000-U+001F, which take their short escape (``\\n``, ``\\t``, ...) or ``\\u00XX``; ``/``
raw or ``\\/``. Other characters written as ``\\uXXXX`` (which gpt-oss does not do for text) are not
allowed: the model writes them raw instead.

What is not constrained (``input_grammar`` returns None, logged once): a grammar lark cannot load, one
with ``%ignore`` or ``%declare``, a left-recursive one (beyond ``x+``/``x*``), a regex with lookaround,
backreferences, word boundaries or anchors other than at its ends.

Hand-written rather than a library: no library turns a lark grammar or a regex into a grammar over its
JSON-escaped text; lark and ``re`` do the parsing, this module only writes the result out.
"""

from __future__ import annotations

import array
import functools
import logging
import re
import re._constants as _sre  # the parser's node kinds
import re._parser as _sre_parse  # Python's own regex parser (see the docstring)
from collections.abc import Iterable
from typing import Any

__all__ = ["UnsupportedGrammar", "input_grammar"]

logger = logging.getLogger("harmony_responses.engine")


_MAX_UNICODE = 0x10FFFF
_MAXREPEAT = _sre.MAXREPEAT

Intervals = list[tuple[int, int]]  # sorted, disjoint, inclusive code point ranges


class UnsupportedGrammar(ValueError):
    """A grammar this module cannot turn into an engine grammar (the reason is the message)."""


# ------------------------------------------------------------------ character sets


def _normalise(ranges: Iterable[tuple[int, int]]) -> Intervals:
    out: Intervals = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: Intervals) -> Intervals:
    out: Intervals = []
    start = 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= _MAX_UNICODE:
        out.append((start, _MAX_UNICODE))
    return out


def _minus(ranges: Intervals, remove: Intervals) -> Intervals:
    return _complement(_normalise([*_complement(ranges), *remove]))


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    return _complement(_normalise([*_complement(a), *_complement(b)]))


@functools.cache
def _category(name: str) -> tuple[tuple[int, int], ...]:
    """The code points of ``\\d``, ``\\w`` or ``\\s`` as Python's ``re`` matches them on str: found by ``re``
    itself in a string of every code point (once per process, about 0.2 s for the first)."""
    every = array.array("I", range(_MAX_UNICODE + 1)).tobytes().decode("utf-32-le", "surrogatepass")
    return tuple((m.start(), m.end() - 1) for m in re.finditer(f"\\{name}+", every))


_CATEGORIES: dict[Any, tuple[str, bool]] = {
    _sre.CATEGORY_DIGIT: ("d", False),
    _sre.CATEGORY_NOT_DIGIT: ("d", True),
    _sre.CATEGORY_WORD: ("w", False),
    _sre.CATEGORY_NOT_WORD: ("w", True),
    _sre.CATEGORY_SPACE: ("s", False),
    _sre.CATEGORY_NOT_SPACE: ("s", True),
    _sre.CATEGORY_UNI_DIGIT: ("d", False),
    _sre.CATEGORY_UNI_NOT_DIGIT: ("d", True),
    _sre.CATEGORY_UNI_WORD: ("w", False),
    _sre.CATEGORY_UNI_NOT_WORD: ("w", True),
    _sre.CATEGORY_UNI_SPACE: ("s", False),
    _sre.CATEGORY_UNI_NOT_SPACE: ("s", True),
}


def _casefold(ranges: Intervals) -> Intervals:
    """``ranges`` with each letter's other case (the IGNORECASE flag), for the ASCII and Latin-1 letters
    and any small set; a large set keeps its ranges (it spans both cases already, or nearly)."""
    extra: list[tuple[int, int]] = []
    size = sum(hi - lo + 1 for lo, hi in ranges)
    if size > 4096:
        return ranges
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            for other in {c.lower(), c.upper()}:
                if len(other) == 1 and other != c:
                    extra.append((ord(other), ord(other)))
    return _normalise([*ranges, *extra])


# ------------------------------------------------------------------ JSON-escaped text of a set

_NEEDS_ESCAPE: Intervals = _normalise([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_ESCAPABLE: Intervals = _normalise([*_NEEDS_ESCAPE, (0x2F, 0x2F)])
_UNICODE_ESCAPE = '"\\u005Cu00"'  # the literal text \u00
_SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def _class_char(cp: int) -> str:
    if 0x20 < cp < 0x7F and chr(cp) not in '\\]-^"[':
        return chr(cp)
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _literal(text: str) -> str:
    """``text`` as a double-quoted EBNF literal."""
    out = []
    for c in text:
        cp = ord(c)
        if 0x20 <= cp < 0x7F and c not in '\\"':
            out.append(c)
        else:
            out.append(f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}")
    return '"' + "".join(out) + '"'


def _class(ranges: Intervals) -> str:
    """A character class for ``ranges`` (none of which needs escaping), negated when that is shorter."""
    negated = _minus(_complement(ranges), _NEEDS_ESCAPE)  # what the negated form must list
    listed, prefix = (ranges, "") if len(ranges) <= len(negated) + 3 else (_normalise([*negated, *_NEEDS_ESCAPE]), "^")
    parts = []
    for lo, hi in listed:
        if lo == hi:
            parts.append(_class_char(lo))
        elif hi == lo + 1:
            parts.append(_class_char(lo) + _class_char(hi))
        else:
            parts.append(f"{_class_char(lo)}-{_class_char(hi)}")
    return f"[{prefix}{''.join(parts)}]"


def _json_set(ranges: Intervals) -> str:
    """EBNF for one character of ``ranges`` as JSON writes it inside a string."""
    ranges = _minus(ranges, [(0xD800, 0xDFFF)])  # surrogates are no text
    if not ranges:
        raise UnsupportedGrammar("a character class that matches nothing")
    raw = _minus(ranges, _NEEDS_ESCAPE)
    alternatives = [_class(raw)] if raw else []
    special = [cp for lo, hi in _intersect(ranges, _ESCAPABLE) for cp in range(lo, hi + 1)]
    for cp in special:
        if cp in _SHORT:
            alternatives.append(_literal(_SHORT[cp]))
    if 0x2F in special:
        alternatives.append(_literal("\\/"))
    # Every control also as \u00XX, written per high digit: "\u00" "0" [0-9aAbB...].
    for high in (0, 1):
        lows = [cp & 0xF for cp in special if cp < 0x20 and cp >> 4 == high]
        if lows:
            digits = "".join(sorted({f"{low:x}" for low in lows} | {f"{low:X}" for low in lows}))
            alternatives.append(f'{_UNICODE_ESCAPE} "{high}" [{digits}]')
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def _json_text(text: str, ignore_case: bool = False) -> str:
    """EBNF for ``text`` as JSON writes it inside a string."""
    pieces: list[str] = []
    run = ""
    for c in text:
        cp = ord(c)
        folded = ignore_case and c.lower() != c.upper()
        if cp in _SHORT or cp < 0x20 or cp == 0x2F or folded:
            if run:
                pieces.append(_literal(run))
                run = ""
            pieces.append(_json_set(_casefold([(cp, cp)]) if folded else [(cp, cp)]))
        else:
            run += c
    if run or not pieces:
        pieces.append(_literal(run))
    return " ".join(pieces)


# ------------------------------------------------------------------ regex → EBNF


class _RegexWriter:
    def __init__(self, flags: int) -> None:
        self.flags = flags

    def write(self, pattern: str) -> str:
        try:
            parsed = _sre_parse.parse(pattern, self.flags)
        except re.error as exc:
            raise UnsupportedGrammar(f"the regex does not compile: {exc}") from None
        self.flags = parsed.state.flags
        nodes = list(parsed)
        # Anchors at the very ends say what a whole-input match means anyway.
        while nodes and nodes[0][0] is _sre.AT and nodes[0][1] in (_sre.AT_BEGINNING, _sre.AT_BEGINNING_STRING):
            nodes.pop(0)
        while nodes and nodes[-1][0] is _sre.AT and nodes[-1][1] in (_sre.AT_END, _sre.AT_END_STRING):
            nodes.pop()
        return self.sequence(nodes, self.flags)

    def sequence(self, nodes: Iterable[tuple[Any, Any]], flags: int) -> str:
        parts = [self.node(op, av, flags) for op, av in nodes]
        parts = [p for p in parts if p]
        return " ".join(parts) if parts else '""'

    def node(self, op: Any, av: Any, flags: int) -> str:
        icase = bool(flags & re.IGNORECASE)
        if op is _sre.LITERAL:
            return _json_text(chr(av), icase)
        if op is _sre.NOT_LITERAL:
            ranges = _casefold([(av, av)]) if icase else [(av, av)]
            return _json_set(_complement(ranges))
        if op is _sre.ANY:
            return _json_set([(0, _MAX_UNICODE)] if flags & re.DOTALL else _complement([(0x0A, 0x0A)]))
        if op is _sre.IN:
            return _json_set(self.charset(av, icase))
        if op is _sre.BRANCH:
            return "(" + " | ".join(self.sequence(branch, flags) for branch in av[1]) + ")"
        if op is _sre.SUBPATTERN:
            _group, add, remove, sub = av
            return "(" + self.sequence(sub, (flags | add) & ~remove) + ")"
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)):
            low, high, sub = av
            return "(" + self.sequence(sub, flags) + ")" + _repeat(low, high)
        if op is getattr(_sre, "ATOMIC_GROUP", None):
            return "(" + self.sequence(av, flags) + ")"
        raise UnsupportedGrammar(f"the regex uses {str(op).lower()}, which a grammar cannot express")

    def charset(self, items: list[tuple[Any, Any]], icase: bool) -> Intervals:
        ranges: Intervals = []
        negate = False
        for op, av in items:
            if op is _sre.NEGATE:
                negate = True
            elif op is _sre.LITERAL:
                ranges.append((av, av))
            elif op is _sre.RANGE:
                ranges.append(av)
            elif op is _sre.CATEGORY:
                name, inverted = _CATEGORIES[av]
                members = list(_category(name))
                ranges += _complement(members) if inverted else members
            else:
                raise UnsupportedGrammar(f"the regex has {str(op).lower()} in a character class")
        out = _normalise(ranges)
        if icase:
            out = _casefold(out)
        return _complement(out) if negate else out


def _repeat(low: int, high: int) -> str:
    if high == _MAXREPEAT:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _regex_ebnf(pattern: str, flags: int = 0) -> str:
    return _RegexWriter(flags).write(pattern)


# ------------------------------------------------------------------ lark → EBNF

_LARK_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0, "l": 0}


def _lark_rules(definition: str, prefix: str) -> dict[str, str]:
    """The lark grammar ``definition`` as EBNF rules over its JSON-escaped text; ``start`` is ``{prefix}r0``."""
    from lark.exceptions import LarkError
    from lark.grammar import NonTerminal
    from lark.lexer import PatternStr
    from lark.load_grammar import load_grammar

    try:
        grammar, _ = load_grammar(definition, "<tool grammar>", [], False)
        terminals, rules, ignore = grammar.compile(["start"], set())
    except (LarkError, re.error, KeyError, ValueError) as exc:
        raise UnsupportedGrammar(f"lark cannot load the grammar: {exc}") from None
    if ignore:
        raise UnsupportedGrammar("the grammar has %ignore (tokens allowed anywhere), which is not constrained")
    names: dict[str, str] = {}

    def name(symbol: str) -> str:
        return names.setdefault(symbol, f"{prefix}r{len(names)}")

    out: dict[str, str] = {}
    name("start")
    for terminal in terminals:
        pattern = terminal.pattern
        if isinstance(pattern, PatternStr):
            body = _json_text(pattern.value, "i" in pattern.flags)
        else:
            flags = 0
            for flag in pattern.flags:
                flags |= _LARK_FLAGS.get(flag, 0)
            body = _regex_ebnf(pattern.value, flags)
        out[name(terminal.name)] = body
    alternatives: dict[str, list[list[str]]] = {}
    for rule in rules:
        expansion = [name(s.name) for s in rule.expansion]
        alternatives.setdefault(name(rule.origin.name), []).append(expansion)
        for s in rule.expansion:
            if isinstance(s, NonTerminal):
                alternatives.setdefault(name(s.name), [])
    for rule_name, alts in alternatives.items():
        if not alts:
            raise UnsupportedGrammar("the grammar uses a rule it does not define")
        out[rule_name] = _without_direct_left_recursion(rule_name, alts)
    _check_not_left_recursive(alternatives)
    return out


def _seq(expansion: list[str]) -> str:
    return " ".join(expansion) if expansion else '""'


def _without_direct_left_recursion(rule: str, alts: list[list[str]]) -> str:
    """``A ::= A a | b`` as ``A ::= (b) (a)*``: the same language, no left recursion."""
    recursive = [alt[1:] for alt in alts if alt and alt[0] == rule]
    base = [alt for alt in alts if not alt or alt[0] != rule]
    if not recursive:
        return " | ".join(_seq(alt) for alt in alts)
    if not base:
        raise UnsupportedGrammar(f"the rule behind {rule} never ends")
    head = " | ".join(_seq(alt) for alt in base)
    tail = " | ".join(_seq(alt) for alt in recursive)
    return f"({head}) ({tail})*"


def _check_not_left_recursive(alternatives: dict[str, list[list[str]]]) -> None:
    """Refuse left recursion that survived the rewrite (llama.cpp cannot parse it)."""
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule, alts in alternatives.items():
            if rule not in nullable and any(all(s in nullable for s in alt) for alt in alts):
                nullable.add(rule)
                changed = True
    left: dict[str, set[str]] = {}
    for rule, alts in alternatives.items():
        corner: set[str] = set()
        for alt in alts:
            if alt and alt[0] == rule:
                alt = alt[1:]  # rewritten as repetition
            for s in alt:
                if s in alternatives:
                    corner.add(s)
                if s not in nullable:
                    break
        left[rule] = corner
    state: dict[str, int] = {}

    def visit(rule: str) -> None:
        state[rule] = 1
        for nxt in left[rule]:
            if state.get(nxt) == 1:
                raise UnsupportedGrammar("the grammar is left-recursive")
            if nxt not in state:
                visit(nxt)
        state[rule] = 2

    for rule in alternatives:
        if rule not in state:
            visit(rule)


# ------------------------------------------------------------------ the call's grammar


@functools.lru_cache(maxsize=128)
def input_grammar(syntax: str, definition: str, prefix: str = "") -> str | None:
    """EBNF (rule ``{prefix}root``) for ``{"input": "…"}`` whose string decodes to text of the tool's grammar.

    ``prefix`` starts every rule name, so that several tools' grammars fit in one. None when the grammar
    cannot be constrained (see the module docstring; the reason is logged once).
    """
    try:
        if syntax == "regex":
            rules = {f"{prefix}r0": _regex_ebnf(definition)}
        elif syntax == "lark":
            rules = _lark_rules(definition, prefix)
        else:
            raise UnsupportedGrammar(f"the syntax {syntax!r} is not known")
    except UnsupportedGrammar as exc:
        logger.warning("a custom tool's %s grammar is not constrained: %s", syntax, exc)
        return None
    except RecursionError:
        logger.warning("a custom tool's %s grammar is not constrained: it nests too deeply", syntax)
        return None
    lines = [
        f'{prefix}root ::= "{{" {prefix}ws "\\u0022input\\u0022" {prefix}ws ":" {prefix}ws "\\u0022" {prefix}r0 '
        f'"\\u0022" {prefix}ws "}}"',
        f"{prefix}ws ::= [ \\t\\n\\r]{{0,8}}",
    ]
    lines += [f"{rule} ::= {body}" for rule, body in rules.items()]
    return "\n".join(lines) + "\n"
