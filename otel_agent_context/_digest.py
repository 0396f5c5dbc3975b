"""Digests of content: keyed, so that nobody without the key can confirm a guess.

A plain ``sha256:`` of a short text ("yes", an order number, a name) is that text to anyone
who can guess it and hash the guess. Every digest this package records (items, blocks,
summaries, the content part of message ids) is therefore an
HMAC-SHA256 under a deployment key, written ``hmac-sha256:<hex>``: equal texts still match
across turns, processes and services that share the key, and a guess cannot be tested
without it.

An assembly's hash (:func:`assembly_hash`, also its injection's) is a plain SHA-256 of its
blocks' ids and digests: those digests are keyed already and travel beside it, so a second
key would hide nothing, and the rebuild derives the same hash from a span's folded block
arrays, where the emitter does not send it (contract v0.2).

Where the key comes from, first found:

- ``OTEL_AGENT_CONTEXT_DIGEST_KEY``: the key itself (its UTF-8 bytes);
- ``OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE``: a file holding it (surrounding whitespace cut);
- otherwise a per-host key, created on first use (32 random bytes, hex) in
  ``$XDG_STATE_HOME/otel-agent-context/digest.key`` (``~/.local/state/...``), readable by
  its owner only: digests then match within one host and user, not across hosts (set a
  shared key for that). If no such file can be made, a key for this process alone, said
  once in the log: never a fallback to plain hashes.

``OTEL_AGENT_CONTEXT_DIGEST=sha256`` asks for plain ``sha256:<hex>`` digests instead (for
content that is public anyway, or to match digests computed elsewhere). A bad setting (an
unreadable or empty key file, an unknown mode) is logged and the default applies: telemetry
settings never stop the application.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import stat
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import _env

__all__ = ["HMAC_PREFIX", "SHA256_PREFIX", "assembly_hash", "assembly_line", "digest_bytes",
           "digest_chunks", "digest_str", "message_digests", "recall", "remember",
           "remember_beside", "short_digest"]

_log = logging.getLogger("otel_agent_context")

HMAC_PREFIX = "hmac-sha256:"
SHA256_PREFIX = "sha256:"
_lock = threading.Lock()
_key: bytes | None = None  # None until first use; b"" means plain sha256
_resolved = False
#: HMAC's two sha256 states, the key already absorbed (RFC 2104): each digest copies them
#: instead of keying a new ``hmac`` object (0.97 us a short digest, against 2.2 us for
#: ``hmac.digest`` and 1.6 us for a copied ``hmac`` object; plain sha256 is 0.49 us).
_inner: Any = None
_outer: Any = None
_BLOCK = 64  # sha256's block size


def _host_key_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                            "state")
    return Path(base) / "otel-agent-context" / "digest.key"


def _host_key() -> bytes:
    path = _host_key_path()
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    except OSError as exc:
        _log.warning("otel_agent_context: cannot read the digest key %s (%s)", path, exc)
        return b""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        try:
            return path.read_bytes().strip()
        except OSError:
            return b""
    except OSError as exc:
        _log.warning("otel_agent_context: cannot create the digest key %s (%s)", path, exc)
        return b""
    key = secrets.token_hex(32).encode()
    try:
        os.write(fd, key + b"\n")
    finally:
        os.close(fd)
    return key


def _resolve() -> bytes:
    mode = (os.environ.get(_env.OTEL_AGENT_CONTEXT_DIGEST) or "hmac-sha256").strip().lower()
    if mode == "sha256":
        return b""
    if mode not in ("hmac-sha256", "hmac"):
        _log.warning("otel_agent_context: %s=%r is not sha256 or hmac-sha256; digests are "
                     "keyed (hmac-sha256)", _env.OTEL_AGENT_CONTEXT_DIGEST, mode)
    key = os.environ.get(_env.OTEL_AGENT_CONTEXT_DIGEST_KEY, "").encode()
    if not key:
        key_file = os.environ.get(_env.OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE)
        if key_file:
            try:
                key = _read_key_file(key_file)
            except OSError as exc:
                _log.error("otel_agent_context: cannot read %s=%s (%s); using the host's key",
                           _env.OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE, key_file, exc)
            else:
                if not key:
                    _log.error("otel_agent_context: the digest key file %s is empty; using "
                               "the host's key", key_file)
    if not key:
        key = _host_key()
    if not key:
        key = secrets.token_bytes(32)
        _log.warning("otel_agent_context: no digest key could be read or stored; this "
                     "process uses a key of its own (its digests match no other process's)")
    return key


#: a key file larger than this is not a key (a log, a device): refused, not read
_KEY_FILE_MAX_BYTES = 4096


def _read_key_file(path: str) -> bytes:
    """The key a file holds, stripped; OSError for anything but a small regular file (a
    FIFO would block the application's first model call, ``/dev/zero`` fill its memory)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{path} is not a regular file")
    if info.st_size > _KEY_FILE_MAX_BYTES:
        raise OSError(f"{path} holds {info.st_size} bytes, more than a key's "
                      f"{_KEY_FILE_MAX_BYTES}")
    with open(path, "rb") as f:
        return f.read(_KEY_FILE_MAX_BYTES + 1).strip()


def _pads(key: bytes) -> tuple[Any, Any]:
    """sha256 states with the key's inner and outer pads absorbed (RFC 2104)."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)),
            hashlib.sha256(bytes(b ^ 0x5C for b in key)))


def _current_key() -> bytes:
    global _key, _resolved, _inner, _outer
    if not _resolved:
        with _lock:
            if not _resolved:
                key = _resolve()
                _inner, _outer = _pads(key) if key else (None, None)
                _key = key
                _resolved = True
    return _key  # type: ignore[return-value]


def reset() -> None:
    """Read the settings again at the next digest (tests; a process that changed them)."""
    global _key, _resolved
    with _lock:
        _key, _resolved = None, False
        _forget()


#: Digests of texts digested lately, by text. An agent sends its whole history again with
#: every model call, so most messages of a call were digested by the call before: a lookup
#: (the text's hash is cached in the str) replaces an HMAC over the whole text. Bounded by
#: entries and by the characters the keys hold; forgotten whole when full, or with the key.
_MEMO: dict[Any, Any] = {}
#: two entries a message the instrumentors read (its facts and its block or row, one
#: more for each other kind it is sent as), one a text digested directly: 4,096 messages
#: at four entries each when this bound was set, twice as many messages since run AK
_MEMO_MAX_ENTRIES = 4 * 4096
_MEMO_MAX_CHARS = 8 * 2**20
_memo_chars = 0


#: counts the forgettings: a digest made under a key forgotten meanwhile is not kept
_generation = 0


def _forget() -> None:
    global _memo_chars, _generation
    _generation += 1
    _MEMO.clear()
    _BIG_SHORT.clear()
    _memo_chars = 0


def _remember(key: Any, chars: int, value: Any) -> None:
    global _memo_chars
    if chars > _MEMO_MAX_CHARS // 8:
        return  # one huge text would evict everything else
    if len(_MEMO) >= _MEMO_MAX_ENTRIES or _memo_chars + chars > _MEMO_MAX_CHARS:
        _forget()
    _MEMO[key] = value
    _memo_chars += chars


def recall(key: Any) -> Any:
    """What :func:`remember` kept under ``key`` (None if nothing, or the key changed)."""
    found = _MEMO.get(key)
    return found if _resolved else None


def remember(key: Any, chars: int, value: Any) -> None:
    """Keep ``value``, derived from texts of ``chars`` characters and from the digest key,
    under ``key`` beside the digests (same bounds; forgotten with them)."""
    _remember(key, chars, value)


def remember_beside(key: Any, text: str, value: Any) -> None:
    """:func:`remember` a value derived from ``text`` whose characters are counted with
    the text's digest entry: nothing for a text past the cap's share, whose digest is not
    kept either (the key would hold it uncounted)."""
    if len(text) <= _MEMO_MAX_CHARS // 8:
        _remember(key, 0, value)


def _keyed(inner: Any) -> str:
    outer = _outer.copy()
    outer.update(inner.digest())
    return str(outer.hexdigest())


def _hmac_hex(data: bytes) -> str:
    """The keyed hash of ``data`` in hex (the caller checked that a key is set)."""
    inner = _inner.copy()
    inner.update(data)
    return _keyed(inner)


def digest_bytes(data: bytes) -> str:
    """The digest of ``data``: ``hmac-sha256:<hex>``, or ``sha256:<hex>`` when asked."""
    if _current_key():
        return HMAC_PREFIX + _hmac_hex(data)
    return SHA256_PREFIX + hashlib.sha256(data).hexdigest()


def digest_chunks(chunks: Iterable[bytes]) -> str:
    """:func:`digest_bytes` of the chunks joined, without joining them (bounded memory)."""
    h = _inner.copy() if _current_key() else hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return HMAC_PREFIX + _keyed(h) if _current_key() else SHA256_PREFIX + h.hexdigest()


def assembly_line(index: Any, item_id: Any, digest: Any) -> str:
    """A block's part of its assembly's hash: ``<index>:<item id>:<digest>`` (an empty digest
    where none), the one format the emitter and the rebuild use."""
    return f"{index}:{item_id}:{digest or ''}"


def assembly_hash(parts: Iterable[str]) -> str:
    """An assembly's hash from its blocks' :func:`assembly_line` parts, in order:
    ``sha256:`` of the parts, each followed by a newline. Not keyed: each part holds a keyed
    digest already, and the rebuild computes the same hash without the key (the folded
    form sends the block arrays, not the hash)."""
    data = "".join([f"{part}\n" for part in parts]).encode("utf-8", "surrogatepass")
    return SHA256_PREFIX + hashlib.sha256(data).hexdigest()


def digest_str(text: str) -> str:
    """:func:`digest_bytes` of ``text`` in UTF-8, remembered for the texts seen lately."""
    found = _MEMO.get(text)
    if found is not None and _resolved:
        return found
    value = digest_bytes(text.encode("utf-8", "surrogatepass"))
    _remember(text, len(text), value)
    return value


def message_digests(text: str) -> tuple[str, str | None]:
    """A message's short digest (the first 12 hex characters of its text's digest, which
    names it in an id after its role: ``user:<12 hex>``) and :func:`digest_str` of its text
    (None for no text), from one hash, neither remembered: for the caller that remembers
    what it makes of them (an instrumentor's message facts), so a new message adds one entry
    to the memo, not three (each entry's key objects stay with the garbage collector until
    the memo is full)."""
    data = text.encode("utf-8", "surrogatepass")
    if _current_key():
        hexed = _hmac_hex(data)
        return hexed[:12], HMAC_PREFIX + hexed if text else None
    hexed = hashlib.sha256(data).hexdigest()
    return hexed[:12], SHA256_PREFIX + hexed if text else None


#: Short digests of single texts past the memo's share (a base64 image or a signed URL in a
#: media part, ``media_marker``), by the text's length and Python's own hash of it, which the
#: string keeps once computed: an agent sends its screenshots again with every call, and
#: digesting 10 MB of one again cost 12-24 ms a call. No text is held (the memo's entry
#: would hold it, and evict everything else); two texts of one length whose 64-bit hashes
#: collide would share an id. Forgotten with the memo.
_BIG_SHORT: dict[tuple[int, int, int], str] = {}
_BIG_SHORT_MAX_ENTRIES = 1024


def short_digest(*parts: str, length: int = 12) -> str:
    """``length`` hex characters naming content in an id (a message's, a document's): keyed
    like the digests, so an id does not reveal a guessable text either."""
    memo_key: Any = (length, parts)
    found = _MEMO.get(memo_key)
    if found is not None and _resolved:
        return found
    chars = sum(map(len, parts))
    big = chars > _MEMO_MAX_CHARS // 8 and len(parts) == 1 and type(parts[0]) is str
    if big:
        memo_key = (length, chars, hash(parts[0]))
        found = _BIG_SHORT.get(memo_key)
        if found is not None and _resolved:
            return found
    generation = _generation
    data = "\x1f".join(parts).encode("utf-8", "surrogatepass")
    if _current_key():
        value = _hmac_hex(data)[:length]
    else:
        value = hashlib.sha256(data).hexdigest()[:length]
    if not big:
        _remember(memo_key, chars, value)
        return value
    with _lock:  # never one made under a key forgotten meanwhile (``reset`` holds the lock)
        if generation == _generation and _resolved:
            if len(_BIG_SHORT) >= _BIG_SHORT_MAX_ENTRIES:
                _BIG_SHORT.clear()
            _BIG_SHORT[memo_key] = value
    return value
