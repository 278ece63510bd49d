"""Reading the grammars we send back as a Python regex, to check what text they let an engine write.

Our grammars (grammar/_input.py) use a small EBNF subset; a grammar without recursion (Codex's
apply_patch, any regex tool) inlines to one regular expression, which ``re.fullmatch`` then judges.
Recursive grammars are refused (``ValueError``): the tests use none.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r'\s*(?:(?P<lit>"(?:[^"\\]|\\.)*")|(?P<cls>\[(?:[^\]\\]|\\.)*\])|(?P<rep>\{\d+(?:,\d*)?\})'
    r"|(?P<name>[A-Za-z][A-Za-z0-9\-]*)|(?P<op>[()|*+?]))"
)
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|.)")
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}


def _char(escape: str) -> str:
    return chr(int(escape[1:], 16)) if escape[0] in "uUx" and len(escape) > 1 else _SIMPLE[escape]


def _literal(text: str) -> str:
    return re.escape(_ESCAPE.sub(lambda m: _char(m[1]), text[1:-1]))


def _class(text: str) -> str:
    # Both syntaxes share the class syntax but for the escapes: spell each escaped character as \uXXXX.
    def spell(m: re.Match[str]) -> str:
        c = _char(m[1])
        return f"\\U{ord(c):08X}" if ord(c) > 0xFFFF else f"\\u{ord(c):04X}"

    return _ESCAPE.sub(spell, text)


def rules_of(grammar: str) -> dict[str, str]:
    rules: dict[str, str] = {}
    for line in grammar.strip().splitlines():
        name, _, body = line.partition("::=")
        rules[name.strip()] = body.strip()
    return rules


def to_regex(grammar: str, root: str = "root") -> str:
    """The regex equivalent of ``grammar``'s ``root`` rule."""
    rules = rules_of(grammar)
    done: dict[str, str] = {}

    def rule(name: str, seen: tuple[str, ...]) -> str:
        if name in seen:
            raise ValueError(f"recursive rule {name}")
        if name not in done:
            done[name] = "(?:" + expression(rules[name], (*seen, name)) + ")"
        return done[name]

    def expression(body: str, seen: tuple[str, ...]) -> str:
        out = []
        pos = 0
        while pos < len(body):
            m = _TOKEN.match(body, pos)
            if m is None:
                if body[pos:].strip():
                    raise ValueError(f"cannot read {body[pos:]!r}")
                break
            pos = m.end()
            if m["lit"]:
                out.append("(?:" + _literal(m["lit"]) + ")")
            elif m["cls"]:
                out.append(_class(m["cls"]))
            elif m["rep"]:
                out.append(m["rep"])
            elif m["name"]:
                out.append(rule(m["name"], seen))
            else:
                out.append("(?:" if m["op"] == "(" else m["op"])
        return "".join(out)

    return rule(root, ())


def accepts(grammar: str, text: str, root: str = "root") -> bool:
    return re.fullmatch(to_regex(grammar, root), text, re.DOTALL) is not None
