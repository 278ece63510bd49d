"""``api.sealed``: reasoning blobs open with the key that sealed them, and with nothing else."""

from __future__ import annotations

import pytest

from harmony_responses.request import sealed
from harmony_responses.request.sealed import ReasoningSealer


@pytest.mark.parametrize("use_fernet", [True, False], ids=["fernet", "hmac"])
def test_round_trip_and_rejection(use_fernet: bool) -> None:
    sealer = ReasoningSealer("k1", use_fernet=use_fernet)
    blob = sealer.seal("I think, therefore… 🤔")
    assert "think" not in blob or not use_fernet  # Fernet encrypts; the HMAC form only authenticates
    assert sealer.open(blob) == "I think, therefore… 🤔"
    # The same secret in another process opens it; another secret does not.
    assert ReasoningSealer("k1", use_fernet=use_fernet).open(blob) == "I think, therefore… 🤔"
    assert ReasoningSealer("k2", use_fernet=use_fernet).open(blob) is None
    tampered = blob[:-6] + ("AAAAAA" if not blob.endswith("AAAAAA") else "BBBBBB")
    assert sealer.open(tampered) is None
    for junk in ("", "x", "hrr1.", "hrr1.!!.??", "gAAAAA", None, 5, {"a": 1}):
        assert sealer.open(junk) is None


def test_a_fernet_server_still_reads_hmac_blobs() -> None:
    blob = ReasoningSealer("k", use_fernet=False).seal("plan")
    assert ReasoningSealer("k").open(blob) == "plan"


def test_random_key_per_process_and_module_functions() -> None:
    assert ReasoningSealer().open(ReasoningSealer().seal("x")) is None
    sealed.configure_reasoning_key("shared")
    assert sealed.decrypt_reasoning(sealed.encrypt_reasoning("y")) == "y"
    assert sealed.decrypt_reasoning(ReasoningSealer("shared").seal("z")) == "z"
