"""Incremental token → UTF-8 text, one token at a time.

A token may end in the middle of a multi-byte character (CJK, emoji): its bytes are held until the
character completes, and invalid sequences become U+FFFD instead of raising, as openai-harmony does
since its PR #83. The common case (no bytes held, a token that is valid UTF-8 on its own) is a table
lookup, so decoding costs O(1) per token whatever the length of the message.
"""

from __future__ import annotations

import codecs

from ..vocab import Vocabulary

__all__ = ["TokenDecoder"]

# Looked up once, not per translator: codecs.getincrementaldecoder goes through the codec registry each
# call.
_UTF8_DECODER = codecs.getincrementaldecoder("utf-8")


class TokenDecoder:
    __slots__ = ("_bytes", "_decoder", "_text", "held")

    def __init__(self, vocab: Vocabulary) -> None:
        self._text = vocab.token_text
        self._bytes = vocab.token_bytes
        self._decoder = _UTF8_DECODER(errors="replace")
        # True while a character's first bytes wait for the rest; read by the translator's inline path, which
        # takes a whole-character token's text straight from the table when nothing is held.
        self.held = False

    def decode(self, token: int) -> str:
        """The text this token completes ("" while a character is still incomplete)."""
        if not self.held:
            text = self._text[token]
            if text is not None:
                return text
        text = self._decoder.decode(self._bytes[token])
        self.held = self._decoder.getstate()[0] != b""
        return text

    def flush(self) -> str:
        """End of the message: what is still held becomes U+FFFD; the decoder is ready for reuse."""
        if not self.held:
            return ""
        self.held = False
        return self._decoder.decode(b"", final=True)
