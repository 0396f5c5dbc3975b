"""Keyed digests: equal texts match wherever the key is shared, a guess cannot be tested
without the key, and there is never a silent fallback to plain hashes."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from otel_agent_context import _digest
from otel_agent_context._attributes import digest_text

PROGRAM = ("import json; from otel_agent_context._attributes import digest_text; "
           "from otel_agent_context.instrumentation._common import short_digest; "
           "print(json.dumps([digest_text('yes'), short_digest('user', 'yes')]))")


def _in_process(tmp_path: Path, **env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_AGENT_CONTEXT_DIGEST")}
    base["XDG_STATE_HOME"] = str(tmp_path / "state")
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=60, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_two_processes_sharing_a_key_agree_and_another_key_does_not(tmp_path: Path) -> None:
    first = _in_process(tmp_path, OTEL_AGENT_CONTEXT_DIGEST_KEY="team-key")
    second = _in_process(tmp_path, OTEL_AGENT_CONTEXT_DIGEST_KEY="team-key")
    other = _in_process(tmp_path, OTEL_AGENT_CONTEXT_DIGEST_KEY="another-key")
    assert first == second
    assert first[0] != other[0] and first[1] != other[1]
    assert first[0] == "hmac-sha256:" + hmac.new(b"team-key", b"yes", "sha256").hexdigest()
    plain = hashlib.sha256(b"yes").hexdigest()
    assert plain not in json.dumps([first, other])  # a guess cannot be confirmed


def test_the_key_file_and_the_host_key(tmp_path: Path) -> None:
    key_file = tmp_path / "digest.key"
    key_file.write_text("team-key\n")
    assert _in_process(tmp_path, OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE=str(key_file)) == \
        _in_process(tmp_path, OTEL_AGENT_CONTEXT_DIGEST_KEY="team-key")
    # no key configured: a per-host key, made once, owner-only, shared by later processes
    first = _in_process(tmp_path)
    host_key = tmp_path / "state" / "otel-agent-context" / "digest.key"
    assert stat.S_IMODE(host_key.stat().st_mode) == 0o600
    assert _in_process(tmp_path) == first
    assert first[0].startswith("hmac-sha256:")
    assert first[0] == "hmac-sha256:" + hmac.new(host_key.read_bytes().strip(), b"yes",
                                                 "sha256").hexdigest()


def test_plain_sha256_only_when_asked(tmp_path: Path) -> None:
    plain = _in_process(tmp_path, OTEL_AGENT_CONTEXT_DIGEST="sha256")
    assert plain[0] == "sha256:" + hashlib.sha256(b"yes").hexdigest()


def test_a_bad_key_file_is_said_and_the_host_key_used(tmp_path: Path, monkeypatch,
                                                      caplog) -> None:
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE", str(tmp_path / "missing.key"))
    monkeypatch.delenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    _digest.reset()
    try:
        value = digest_text("yes")
    finally:
        monkeypatch.undo()
        _digest.reset()
    assert value.startswith("hmac-sha256:")
    assert "missing.key" in caplog.text
    # one problem, one message
    assert [r.getMessage() for r in caplog.records if "missing.key" in r.getMessage()] == [
        "otel_agent_context: cannot read OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE="
        f"{tmp_path / 'missing.key'} ([Errno 2] No such file or directory: "
        f"'{tmp_path / 'missing.key'}'); using the host's key"]


def _digest_with_key_file(path: Path, tmp_path: Path, monkeypatch) -> None:
    """A digest made with the key file ``path`` and no key given: keyed all the same."""
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE", str(path))
    monkeypatch.delenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    _digest.reset()
    try:
        assert digest_text("yes").startswith("hmac-sha256:")
    finally:
        monkeypatch.undo()
        _digest.reset()


def test_an_empty_key_file_is_said_once(tmp_path: Path, monkeypatch, caplog) -> None:
    (tmp_path / "empty.key").write_text("\n")
    _digest_with_key_file(tmp_path / "empty.key", tmp_path, monkeypatch)
    assert [r.getMessage() for r in caplog.records if "empty.key" in r.getMessage()] == [
        f"otel_agent_context: the digest key file {tmp_path / 'empty.key'} is empty; "
        "using the host's key"]


def test_no_place_for_a_host_key_still_keys_the_digests(tmp_path: Path, monkeypatch,
                                                         caplog) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # the state directory cannot be made below a file
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    monkeypatch.delenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", raising=False)
    monkeypatch.delenv("OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE", raising=False)
    _digest.reset()
    try:
        value = digest_text("yes")
    finally:
        monkeypatch.undo()
        _digest.reset()
    assert value.startswith("hmac-sha256:")
    assert value != "hmac-sha256:" + hashlib.sha256(b"yes").hexdigest()
    assert "key of its own" in caplog.text


def test_the_precomputed_hmac_is_the_standard_one(monkeypatch) -> None:
    for key in ("k", "x" * 64, "y" * 65, "z" * 200):
        monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", key)
        _digest.reset()
        try:
            for data in (b"", b"yes", b"a" * 5000):
                assert _digest.digest_bytes(data) == "hmac-sha256:" + hmac.new(
                    key.encode(), data, "sha256").hexdigest()
            assert _digest.digest_chunks([b"a\n", b"b\n"]) == "hmac-sha256:" + hmac.new(
                key.encode(), b"a\nb\n", "sha256").hexdigest()
        finally:
            _digest.reset()


def test_remembered_digests_follow_the_key_and_stay_bounded(monkeypatch) -> None:
    """Texts seen lately are not digested again (an agent resends its history every call),
    but a new key is never answered from memory, and the memory has a bound."""
    text = "the refund policy " * 50
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "first")
    _digest.reset()
    try:
        first = (digest_text(text), _digest.short_digest("user", text))
        assert (digest_text(text), _digest.short_digest("user", text)) == first
        assert first[0] == "hmac-sha256:" + hmac.new(b"first", text.encode(),
                                                     "sha256").hexdigest()
        monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "second")
        _digest.reset()
        second = (digest_text(text), _digest.short_digest("user", text))
        assert second[0] == "hmac-sha256:" + hmac.new(b"second", text.encode(),
                                                      "sha256").hexdigest()
        assert second[1] != first[1]
        assert _digest.short_digest("user", text, length=16)[:12] == second[1]
        for i in range(_digest._MEMO_MAX_ENTRIES + 10):
            digest_text(f"message {i}")
        assert len(_digest._MEMO) <= _digest._MEMO_MAX_ENTRIES
        huge = "x" * (_digest._MEMO_MAX_CHARS // 8 + 1)
        digest_text(huge)
        assert huge not in _digest._MEMO
    finally:
        _digest.reset()


def test_remembered_message_facts_follow_the_key_and_the_token_estimator(monkeypatch) -> None:
    """A message's id, token estimate and digest are remembered like the digests (a history
    is read again every call), and never answered from memory after the key or the token
    estimator changed."""
    from otel_agent_context.instrumentation._common import message_facts
    from otel_agent_context.instrumentation._tokens import set_token_estimator

    text = "where is my refund? " * 20
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "first")
    _digest.reset()
    try:
        first = message_facts("user", text)
        assert message_facts("user", text) == first
        assert first == ("user:" + _digest.short_digest(text), (len(text) + 3) // 4,
                         digest_text(text))
        assert message_facts("assistant", text)[0].startswith("assistant:")
        set_token_estimator(lambda t: 7)
        try:
            assert message_facts("user", text) == (first[0], 7, first[2])
        finally:
            set_token_estimator(None)
        assert message_facts("user", text) == first
        monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "second")
        _digest.reset()
        second = message_facts("user", text)
        assert second[0] != first[0] and second[2] != first[2]
        assert second[2] == "hmac-sha256:" + hmac.new(b"second", text.encode(),
                                                      "sha256").hexdigest()
    finally:
        _digest.reset()


def test_a_long_history_is_read_from_memory_on_the_next_call(monkeypatch) -> None:
    """A history of 1,500 distinct messages (two memo entries each: the message's facts and
    its block) is digested once, not again on every call (the memo must not empty itself in
    the middle of a call)."""
    from otel_agent_context.instrumentation import _common
    from otel_agent_context.instrumentation.openai import _extract as openai_extract

    messages = [{"role": "user" if i % 2 else "assistant", "content": f"message number {i}"}
                for i in range(1500)]
    computed: list[int] = []
    real, real_message = _digest.digest_bytes, _digest.message_digests

    def counting(data: bytes) -> str:
        computed[-1] += 1
        return real(data)

    def counting_message(text: str) -> tuple[str, str | None]:
        computed[-1] += 1
        return real_message(text)

    monkeypatch.setattr(_digest, "digest_bytes", counting)
    monkeypatch.setattr(_common, "message_digests", counting_message)
    _digest.reset()
    try:
        for _ in range(3):
            computed.append(0)
            openai_extract.chat_request((), {"model": "gpt-4o-mini", "messages": messages},
                                        False)
        assert computed == [1500, 0, 0]
    finally:
        _digest.reset()


def test_an_enum_role_keeps_its_own_message_id() -> None:
    """A role given as a str enum member is read by the general path, as before: its id
    does not depend on whether the plain string role was seen first."""
    import enum

    from otel_agent_context.instrumentation.openai import _extract as openai_extract

    class Role(str, enum.Enum):
        USER = "user"

    def first_id(role: object) -> str:
        req = openai_extract.chat_request(
            (), {"model": "gpt-4o-mini", "messages": [{"role": role, "content": "hi"}]}, False)
        return req.blocks[0].item_id

    _digest.reset()
    try:
        plain, member = first_id("user"), first_id(Role.USER)
        _digest.reset()
        assert (first_id(Role.USER), first_id("user")) == (member, plain)
        assert plain.startswith("user:") and plain != member
    finally:
        _digest.reset()


def test_message_digests_are_the_short_and_full_digests_not_remembered(monkeypatch) -> None:
    """``message_digests`` gives what ``short_digest(text)`` and ``digest_str(text)`` give
    (the short one the start of the other's hex: one hash), keyed or plain, and leaves the
    memo as it was (its caller remembers its facts)."""
    texts = ["", "yes", "a longer message about the refund policy " * 20, "caf\u00e9 \ud800"]
    for key in ("k1", None):
        if key is None:
            monkeypatch.delenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", raising=False)
            monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST", "sha256")
        else:
            monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", key)
        for text in texts:
            _digest.reset()
            got = _digest.message_digests(text)
            assert not _digest._MEMO
            assert got == (_digest.short_digest(text),
                           _digest.digest_str(text) if text else None), (key, text)
            assert not text or got[1].split(":")[1][:12] == got[0]
    _digest.reset()


def test_a_new_message_is_one_entry_of_the_memo_with_its_characters() -> None:
    """A message the instrumentors read adds its facts (and its block) to the memo, not its
    digests as well, and its characters are counted with each (an application that builds
    its messages anew each call gives the block another string than the facts': counted
    twice rather than not at all, so the memo's bound on characters holds what its entries
    keep alive)."""
    from otel_agent_context.instrumentation._common import message_facts, plain_block

    _digest.reset()
    try:
        text = "a question nobody asked before " * 10
        facts = message_facts("user", text)
        assert len(_digest._MEMO) == 1
        assert _digest._memo_chars == len(text)
        plain_block("user", "".join(text), "session_history", "message_history",
                    "message_history")
        assert len(_digest._MEMO) == 2
        assert _digest._memo_chars == 2 * len(text)
        assert facts == message_facts("user", text)
        huge = "y" * (_digest._MEMO_MAX_CHARS // 8 + 1)
        message_facts("user", huge)
        plain_block("user", huge, "session_history", "message_history", "message_history")
        assert len(_digest._MEMO) == 2 and _digest._memo_chars == 2 * len(text)
    finally:
        _digest.reset()


def test_a_long_media_text_is_named_from_memory_without_holding_it(monkeypatch) -> None:
    """A base64 image an agent sends again with every call (a text past the memo's share)
    is digested once while its digest is remembered by its length and hash: none of its
    characters held, several images at once each remembered, forgotten with the key, and
    a digest made under a key forgotten meanwhile never kept."""
    monkeypatch.setattr(_digest, "_MEMO_MAX_CHARS", 8 * 100)
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "first")
    _digest.reset()
    hashed: list[int] = []
    real = _digest._hmac_hex

    def counting(data: bytes) -> str:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(_digest, "_hmac_hex", counting)
    try:
        images = [chr(ord("a") + i) * (101 + i) for i in range(6)]
        first = [_digest.short_digest(t) for t in images]
        for _ in range(3):  # the same six again, and equal strings built anew
            assert [_digest.short_digest(t) for t in images] == first
            assert [_digest.short_digest("".join(list(t))) for t in images] == first
        assert len(hashed) == 6 and len(set(first)) == 6
        assert first[0] == hmac.new(b"first", images[0].encode(), "sha256").hexdigest()[:12]
        held = [k for k in (*_digest._MEMO, *_digest._BIG_SHORT) if images[0] in str(k)]
        assert held == []
        monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "second")
        _digest.reset()
        assert _digest.short_digest(images[0]) != first[0] and len(hashed) == 7

        def forgetting(data: bytes) -> str:  # the key changes while a digest is made
            value = counting(data)
            _digest.reset()
            return value

        monkeypatch.setattr(_digest, "_hmac_hex", forgetting)
        _digest.short_digest(images[1])
        assert _digest._BIG_SHORT == {}
    finally:
        _digest.reset()


@pytest.mark.parametrize("kind", ["fifo", "device", "large"])
def test_a_key_file_that_is_not_a_small_file_is_refused_unread(
        tmp_path: Path, monkeypatch, caplog, kind: str) -> None:
    """A FIFO would block the first digest (the application's first model call) until
    something writes to it, /dev/zero would fill the memory: refused by what ``stat``
    says, never opened, and said."""
    if kind == "fifo":
        path = tmp_path / "key.fifo"
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "large.key"
        path.write_bytes(b"k" * 5000)
    _digest_with_key_file(path, tmp_path, monkeypatch)
    (message,) = [r.getMessage() for r in caplog.records if str(path) in r.getMessage()]
    assert "using the host's key" in message
    assert ("not a regular file" if kind != "large" else "5000 bytes") in message
