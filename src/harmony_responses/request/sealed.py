"""``reasoning.encrypted_content``: the model's reasoning as an opaque, authenticated blob.

A stateless client (``store: false``, ``include: ["reasoning.encrypted_content"]``) gets each reasoning
item's text sealed into ``encrypted_content`` and sends the item back in the next request's ``input``;
the server opens the blob and the renderer sees the reasoning text again (Harmony keeps the chain of
thought within a tool-calling turn). A blob that does not open (another server's key, tampered with, a
restart with a random key) is ignored, never an error: the reasoning is just not there, as with a client
that drops it.

Format: with the ``cryptography`` package installed (the normal case), a Fernet token (AES-128-CBC +
HMAC-SHA256) of the JSON ``{"v": 1, "kind": …, "text": …}``: encrypted and authenticated. Without it,
``hrr1.<base64url payload>.<base64url HMAC-SHA256>``: authenticated and merely encoded, not encrypted;
the reasoning is also streamed in clear as ``reasoning_text`` so nothing secret is exposed, but the blob
is only "opaque" by convention then. ``open`` reads both forms.

The same key seals ``compaction`` items' summaries (``run/compact.py``), with ``kind: "compaction"`` inside
the authenticated payload: ``open`` is told which kind it expects, so a reasoning blob cannot be passed off as
a compaction, nor the other way round. (Blobs without a kind, sealed before compaction existed, are
reasoning.)

The key is derived from ``Config.secret_key`` (``--secret-key`` / ``HARMONY_RESPONSES_SECRET_KEY``);
without one the server uses a secret generated once and kept in its store (``use_secret`` at start), so
every process sharing the store opens every blob, also after a restart. Until then (and for a sealer made
without a secret) the key is random, per process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

import orjson

__all__ = [
    "COMPACTION",
    "REASONING",
    "ReasoningSealer",
    "configure_reasoning_key",
    "decrypt_reasoning",
    "encrypt_reasoning",
]

try:
    from cryptography.fernet import Fernet, InvalidToken
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    Fernet = None  # type: ignore[assignment,misc]
    InvalidToken = Exception  # type: ignore[assignment,misc]

_HMAC_PREFIX = "hrr1."
_KEY_CONTEXT = b"harmony-responses reasoning.encrypted_content v1\x00"
# What a blob holds (its payload's "kind"): a reasoning item's text, or a compaction item's summary.
REASONING = "reasoning"
COMPACTION = "compaction"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ReasoningSealer:
    """Seals reasoning text into blobs and opens them again, with one key."""

    def __init__(self, secret: str | bytes | None = None, *, use_fernet: bool | None = None) -> None:
        self.configured = secret is not None  # the operator gave the key; False: random until use_secret()
        self._use_fernet = Fernet is not None and use_fernet is not False
        self._set_key(os.urandom(32) if secret is None else self._derive(secret))

    @staticmethod
    def _derive(secret: str | bytes) -> bytes:
        raw = secret.encode() if isinstance(secret, str) else secret
        return hashlib.sha256(_KEY_CONTEXT + raw).digest()

    def _set_key(self, key: bytes) -> None:
        self._mac_key = key
        self._fernet = Fernet(base64.urlsafe_b64encode(key)) if self._use_fernet else None

    def use_secret(self, secret: str | bytes) -> None:
        """Seal and open with ``secret`` from now on (the store's shared secret, when none was configured)."""
        self._set_key(self._derive(secret))

    def seal(self, text: str, kind: str = REASONING) -> str:
        payload = orjson.dumps({"v": 1, "kind": kind, "text": text})
        if self._fernet is not None:
            return self._fernet.encrypt(payload).decode()
        mac = hmac.new(self._mac_key, payload, hashlib.sha256).digest()
        return f"{_HMAC_PREFIX}{_b64(payload)}.{_b64(mac)}"

    def open(self, blob: object, kind: str = REASONING) -> str | None:
        """The text sealed in ``blob``, or None when it is not a blob of this ``kind`` that this key sealed."""
        if not isinstance(blob, str) or not blob:
            return None
        payload: bytes | None = None
        if blob.startswith(_HMAC_PREFIX):
            body, _, tag = blob[len(_HMAC_PREFIX) :].partition(".")
            try:
                payload, mac = _unb64(body), _unb64(tag)
            except (binascii.Error, ValueError):
                return None
            if not hmac.compare_digest(mac, hmac.new(self._mac_key, payload, hashlib.sha256).digest()):
                return None
        elif self._fernet is not None:
            try:
                payload = self._fernet.decrypt(blob.encode())
            except (InvalidToken, ValueError):
                return None
        if payload is None:
            return None
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict) or data.get("v") != 1 or data.get("kind", REASONING) != kind:
            return None
        text = data.get("text")
        return text if isinstance(text, str) else None


# The process-wide sealer behind ``encrypt_reasoning``/``decrypt_reasoning``; ``create_app`` sets its key.
_sealer = ReasoningSealer()


def configure_reasoning_key(secret: str | bytes | None) -> ReasoningSealer:
    """Use ``secret`` (None: a fresh random key) for every blob sealed or opened from now on."""
    global _sealer
    _sealer = ReasoningSealer(secret)
    return _sealer


def encrypt_reasoning(text: str) -> str:
    return _sealer.seal(text)


def decrypt_reasoning(blob: object) -> str | None:
    """The reasoning text in an ``encrypted_content`` blob this server made, or None."""
    return _sealer.open(blob)
