r"""Text → token ids as openai-harmony encodes it, in time linear in the text, and messages rendered so.

harmony's BPE (tiktoken's, in Rust, holding the GIL) takes time in the square of each pre-token's length. Text
splits into short pre-tokens (words, numbers, punctuation), but a run of one letter, space or punctuation
character is one pre-token however long: 300 kB of ``a`` took 34 s to render, 60,000 ``é`` 3.9 s, and for all
that time no other request of the process moved (``/health`` answered after 30 s). A request body may be 32 MB.

Here a text with a run of ``LONG_RUN`` characters (``has_long_run``) is cut into its pre-tokens (tiktoken's
o200k pattern, by bpe-openai's Rust pre-tokenizer, or ``regex`` as a fallback): the short ones go to harmony as
they are, joined, the long ones to bpe-openai's Rust encoder, which is linear and gives the same tokens for a
pre-token (the vocabulary's BPE; tests check the result against harmony's). Cutting between pre-tokens changes
nothing (BPE never merges across them, and the pattern looks at no text before a match) as long as what is cut
off does not end in whitespace (``\s+(?!\S)`` looks at the character after it): such whitespace is encoded a
pre-token at a time. Texts without a long run, nearly all, go to harmony unchanged.

A message is rendered the same way when one of its strings has a long run (``render``): harmony renders it with
each long pre-token cut to its first and last few characters (still one pre-token of its kind, with the same
neighbours), the body's text is decoded, the strings put back, and the body encoded here. That is harmony's
render when harmony puts each string in the body as it is and encodes the body as one text, which is checked on
the shortened render each time: each shortened string is in the body once, and the body encodes back to
itself (harmony encodes a message's contents one by one; a pre-token spanning two would show there). A
message that fails either is refused (``LongRunError``, a 400) rather than rendered in quadratic time; so is one
with a long run in its header (a recipient).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from openai_harmony import HarmonyEncoding, Message, RenderOptions, TextContent

from .vocab import FIRST_SPECIAL, load_encoding

__all__ = ["LONG_RUN", "LongRunError", "encode_text", "has_long_run", "render"]

# A run this long costs harmony about as much per character as ordinary text (~0.3 µs); a longer one, more
# in proportion to its length.
LONG_RUN = 256
_LONG_SPACE = re.compile(rf"\s{{{LONG_RUN}}}")
# Python's whitespace is the pre-tokenizer's (Unicode's White_Space) and these four separators.
_PUNCTUATION_HERE = dict.fromkeys(range(0x1C, 0x20), "-")

# tiktoken's o200k_base pre-tokenizer (openai_public.py), which o200k_harmony uses.
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

# What a long pre-token keeps at each end in the message harmony renders for its header and its body's shape.
_KEPT = 4
_MESSAGE = 200008  # <|message|>


class LongRunError(ValueError):
    """A message with a long run of one character that cannot be rendered here in linear time."""


def has_long_run(text: str) -> bool:
    """Whether ``text`` has a run of ``LONG_RUN`` whitespace or ``LONG_RUN`` other characters: a pre-token
    longer than twice that has one (only punctuation followed by line ends mixes the two), and a shorter one
    costs harmony at most a few times what ordinary text does per character."""
    if "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text:
        # Whitespace to Python, punctuation to the pre-tokenizer: "\x1c----" repeated is one pre-token there
        # (0.5 s for 40,000 characters) that str.split() would cut into short pieces.
        text = text.translate(_PUNCTUATION_HERE)
    # The longest of what str.split() leaves, in C: half what a regular expression for such a run costs (a
    # tenth of harmony's encoding of ordinary text, both together).
    return _LONG_SPACE.search(text) is not None or max(map(len, text.split()), default=0) >= LONG_RUN


@functools.cache
def _pre_tokens() -> Any:
    import regex  # only for texts with a long run

    return regex.compile(O200K_PATTERN)


@functools.cache
def _linear_encoder() -> Any:
    # bpe-openai's Rust tokenizer, loaded from its extension module directly (typed in its _bindings.pyi):
    # importing the package runs its tiktoken-style wrapper's set-up, which reads every shipped vocabulary into
    # Python (a second or more, through a deprecated importlib.resources call) for nothing used here.
    import importlib.machinery
    import importlib.util

    package = importlib.util.find_spec("bpe_openai")
    assert package is not None and package.submodule_search_locations, "bpe-openai is a dependency"
    folder = next(iter(package.submodule_search_locations))
    finder = importlib.machinery.FileFinder(
        folder, (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
    )
    spec = finder.find_spec("bpe_openai._bindings")
    assert spec is not None and spec.loader is not None, "bpe-openai ships its Rust tokenizer"
    bindings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bindings)
    return bindings.tokenizer_for_encoding("o200k_base")  # ~0.8 s, once: at the first long run


def _pre_tokens_of(text: str) -> list[str]:
    """The pre-tokens of ``text``, in order.

    bpe-openai's Rust pre-tokenizer cuts the text (minified JSON: 2.8 ms for 112 kB, where iterating ``regex``'s
    matches in Python took 24); the pattern with ``regex`` is the fallback should its pieces ever not make up the
    text. Either is checked against harmony's own tokens by the tests."""
    pieces: list[str] = _linear_encoder().pretokenize(text)
    if sum(map(len, pieces)) == len(text):
        return pieces
    return [match.group() for match in _pre_tokens().finditer(text)]


def encode_text(text: str, encoding: HarmonyEncoding | None = None) -> list[int]:
    """``encoding.encode(text, disallowed_special=())`` (special tokens' text as ordinary text, as harmony
    renders a message's text), in time linear in ``text``."""
    encoding = encoding or load_encoding()
    if not has_long_run(text):
        return encoding.encode(text, disallowed_special=())
    pieces = _pre_tokens_of(text)
    longs = [number for number, piece in enumerate(pieces) if len(piece) >= LONG_RUN]
    if not longs:  # a long run of short pre-tokens (minified JSON, say)
        return encoding.encode(text, disallowed_special=())
    linear = _linear_encoder()
    tokens: list[int] = []
    done = 0  # pieces encoded
    for number in longs:
        # The short ones before, in one call, except the whitespace they end with: at the end of a text,
        # "\s+(?!\S)" takes all of it, where before a long pre-token it leaves the last character to the
        # next one. Each of those pre-tokens is encoded on its own, which is what it is in the text.
        cut = number
        while cut > done and pieces[cut - 1].isspace():
            cut -= 1
        if cut > done:
            tokens += encoding.encode("".join(pieces[done:cut]), disallowed_special=())
        for space in pieces[cut:number]:
            tokens += encoding.encode(space, disallowed_special=())
        tokens += linear.encode(pieces[number])
        done = number + 1
    if done < len(pieces):
        tokens += encoding.encode("".join(pieces[done:]), disallowed_special=())
    return tokens


def render(encoding: HarmonyEncoding, message: Message, options: RenderOptions | None = None) -> list[int]:
    """``encoding.render(message, options)``, in time linear in the message's strings.

    Raises:
        LongRunError: the message cannot be rendered so (a long run in its header, say).
    """
    author = message.author
    if has_long_run(author.name or "") or has_long_run(message.recipient or "") or has_long_run(message.channel or ""):
        raise LongRunError("in the message's header (a recipient, a name)")
    if all(type(content) is TextContent and not has_long_run(content.text) for content in message.content):  # type: ignore[attr-defined]
        return encoding.render(message, options)  # every turn of a conversation, nearly: no walk through fields
    originals: dict[str, str] = {}  # shortened → original

    def shorten(value: Any) -> Any:
        if isinstance(value, str):
            if not has_long_run(value):
                return value
            short = _shortened(value)
            if short == value:  # a long run of short pre-tokens (minified JSON, say): harmony's as it is
                return value
            if short in originals:
                # Two of the message's strings, alike or not: should harmony rewrite one and not the other,
                # the text would hold one copy of the shortened string, as it is, and the other's unseen.
                raise LongRunError("in two of the message's strings that shorten alike")
            originals[short] = value
            return short
        if isinstance(value, dict):
            return {key: shorten(item) for key, item in value.items()}
        if isinstance(value, list):
            return [shorten(item) for item in value]
        return value

    short_message = Message.from_dict(shorten(message.to_dict()))
    if not originals:
        return encoding.render(message, options)
    tokens = encoding.render(short_message, options)
    try:
        begin = tokens.index(_MESSAGE) + 1
    except ValueError:
        raise LongRunError("in a message rendered without a body") from None
    body = tokens[begin:-1]
    if any(token >= FIRST_SPECIAL for token in body):
        raise LongRunError("in a message whose body is not all text")
    text = encoding.decode_utf8(body)
    # Harmony encodes a message's contents one by one: joined, a pre-token may span two. The shortened runs
    # keep their ends and their kind, so such a pre-token would span them here too, and show.
    if encode_text(text, encoding) != body:
        raise LongRunError("in a message whose parts are tokenized apart")
    places: list[tuple[int, str, str]] = []
    for short, original in originals.items():
        at = text.find(short)
        if at < 0 or text.find(short, at + 1) >= 0:
            raise LongRunError("in a string that is not in the message once, as it is")
        places.append((at, short, original))
    places.sort()
    parts: list[str] = []
    done = 0
    for at, short, original in places:
        if at < done:
            raise LongRunError("in two strings that overlap in the message")
        parts += [text[done:at], original]
        done = at + len(short)
    parts.append(text[done:])
    return [*tokens[:begin], *encode_text("".join(parts), encoding), tokens[-1]]


def _shortened(text: str) -> str:
    """``text`` with each long pre-token cut to its first and last few characters: still one pre-token of its
    kind, with the same neighbours."""
    return "".join(piece if len(piece) < LONG_RUN else _cut(piece) for piece in _pre_tokens_of(text))


def _cut(piece: str) -> str:
    # A line end harmony rewrites (it prints a tool namespace's description line by line: "\r\n" becomes
    # "\n") must stay in what is cut, or the shortened string would come back as it is and the original be put
    # back unrewritten. Only a line end can be inside a long pre-token and a CRLF there, where line ends go
    # (punctuation's trailing "[\r\n/]*", whitespace's "\s*[\r\n]+"), so it stays one pre-token of its kind.
    # One inside the middle or across either cut counts.
    middle = "\r\n" if "\r\n" in piece[_KEPT - 1 : 1 - _KEPT] else ""
    return piece[:_KEPT] + middle + piece[-_KEPT:]
