"""The Harmony vocabulary loads with no network, and a user's own setup keeps working."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harmony_responses import vocab

LOAD = "from harmony_responses.vocab import load_encoding; e = load_encoding(); print(e.encode('hi'))"


def _run(env_updates: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    for key, value in env_updates.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=60)


def test_fresh_machine_loads_from_the_packaged_vocabulary(tmp_path: Path) -> None:
    # No TIKTOKEN_ENCODINGS_BASE and an empty tiktoken-rs cache: without our unpacking openai-harmony would
    # try to download (and fail here, offline).
    result = _run(
        {
            "TIKTOKEN_ENCODINGS_BASE": None,
            "TIKTOKEN_RS_CACHE_DIR": str(tmp_path / "rs-cache"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        }
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[3686]"
    unpacked = tmp_path / "cache" / "harmony-responses" / "encodings" / "o200k_base.tiktoken"
    assert hashlib.sha256(unpacked.read_bytes()).hexdigest() == vocab.O200K_BASE_SHA256


def test_a_users_TIKTOKEN_ENCODINGS_BASE_is_respected(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "o200k_base.tiktoken").write_bytes(vocab._packaged_bytes())
    result = _run({"TIKTOKEN_ENCODINGS_BASE": str(theirs), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "cache").exists()


def test_a_valid_tiktoken_rs_cache_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "rs-cache"
    cache.mkdir()
    (cache / vocab._RS_CACHE_NAME).write_bytes(vocab._packaged_bytes())
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    monkeypatch.setenv("TIKTOKEN_RS_CACHE_DIR", str(cache))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    vocab.ensure_offline_vocabulary()
    assert "TIKTOKEN_ENCODINGS_BASE" not in os.environ
    assert not (tmp_path / "cache").exists()


def test_a_corrupt_cached_copy_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private = tmp_path / "cache" / "harmony-responses" / "encodings"
    private.mkdir(parents=True)
    (private / "o200k_base.tiktoken").write_bytes(b"not a vocabulary")
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    monkeypatch.setenv("TIKTOKEN_RS_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    vocab.ensure_offline_vocabulary()
    assert os.environ["TIKTOKEN_ENCODINGS_BASE"] == str(private)
    digest = hashlib.sha256((private / "o200k_base.tiktoken").read_bytes()).hexdigest()
    assert digest == vocab.O200K_BASE_SHA256


def test_token_table_agrees_with_openai_harmony() -> None:
    table = vocab.load_vocabulary()
    encoding = vocab.load_encoding()
    text = "Grüße, 日本語 and emoji 🎉 — <|end|> as plain text"
    ids = encoding.encode(text, disallowed_special=())
    assert 200007 not in ids
    assert b"".join(table.token_bytes[i] for i in ids).decode() == text
    assert encoding.decode_utf8(ids) == text
    for token, name in vocab.SPECIAL_TOKENS.items():
        assert encoding.encode(name, allowed_special="all") == [token]
        assert table.token_bytes[token] == name.encode()
    assert table.special_name(200013) == "<|reserved_200013|>"
