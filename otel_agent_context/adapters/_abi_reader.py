"""Context Runtime ABI: reading a session folder, never writing it, never raising on content.

Malformed or half-written files give a warning (logged, and kept in :attr:`_Reader.warnings`).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import math
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from .._digest import digest_bytes, digest_chunks
from ..instrumentation._tokens import estimate_tokens

_log = logging.getLogger("otel_agent_context.adapters")

MESSAGES = "messages.jsonl"
EVENTS = "events.jsonl"
PACK = "context/pack.json"
BUDGET = "context/budget"
GC_POLICY = "context/gc.policy"
SWAP_INDEX = "context/swap/index.jsonl"
DEDUP_INDEX = "context/dedup/index.jsonl"
CHILD_DIR = "context/child"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

#: a range of lines (1-based, inclusive)
Range = tuple[int, int]

#: the longest integer read as a number (a longer one is out of any field's range; Python
#: refuses to convert more than 4,300 digits anyway)
_INT_DIGITS = 20


def _loads(raw: bytes) -> tuple[Any, int]:
    """The JSON document in ``raw`` and how many of its numbers were out of range and read
    as null: a number no field can hold (a 5,000-digit integer, ``1e400``, ``NaN``) makes
    orjson refuse the whole document, and the rest of it is still worth reading. Raises
    ``orjson.JSONDecodeError`` when it is not JSON."""
    try:
        return orjson.loads(raw), 0
    except orjson.JSONDecodeError as exc:
        first = exc
    dropped = 0

    def out_of_range() -> None:
        nonlocal dropped
        dropped += 1

    def integer(text: str) -> int | None:
        if len(text.lstrip("-")) > _INT_DIGITS:
            out_of_range()
            return None
        return int(text)

    def real(text: str) -> float | None:
        value = float(text)
        if math.isfinite(value):
            return value
        out_of_range()
        return None

    def constant(text: str) -> None:  # NaN, Infinity, -Infinity
        out_of_range()

    try:
        doc = json.loads(raw, parse_int=integer, parse_float=real, parse_constant=constant)
    except (ValueError, RecursionError):
        raise first from None
    if not dropped:
        raise first  # orjson refused it for another reason (e.g. a lone surrogate)
    return doc, dropped


@dataclasses.dataclass(frozen=True, slots=True)
class FileState:
    """What was seen of an append-only file: its size, mtime and the digest of its bytes."""

    size: int
    mtime_ns: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileState:
        return cls(int(data["size"]), int(data["mtime_ns"]), str(data["sha256"]))


#: What an incremental look at a grown history file re-reads of what it had: its first and
#: its last this many bytes.
TAIL_BYTES = 4096
#: Chunks history files are read in: memory stays bounded whatever their size.
CHUNK_BYTES = 1 << 20


#: The most of one session file read (a pack, an index, a history): beyond, a warning.
MAX_FILE_BYTES = 64 << 20


class _Reader:
    """Reads files of one session folder and nothing outside it.

    A session folder is written by an agent runtime and may be crafted: a name that leaves
    the folder (absolute, ``..``, or through a symlinked directory), a symlink, a FIFO or
    device, or a file past :data:`MAX_FILE_BYTES` is refused with a warning, never read
    (a symlinked summary once carried ``/etc/shadow`` out as content).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._real_root = os.path.realpath(root)
        self.warnings: list[str] = []

    def _inside(self, rel: str) -> Path | None:
        """``root / rel`` when it names something inside the folder, else None (warned)."""
        parts = Path(rel).parts
        if not rel or Path(rel).is_absolute() or ".." in parts:
            self.warn(rel, "names a path outside the session folder: not read")
            return None
        path = self.root / rel
        parent = os.path.realpath(path.parent)
        if parent != self._real_root and not parent.startswith(self._real_root + os.sep):
            self.warn(rel, "lies outside the session folder (a symlinked directory): not read")
            return None
        return path

    def warn(self, rel: str, message: str) -> None:
        text = f"{rel}: {message}"
        self.warnings.append(text)
        _log.warning("context runtime session %s: %s", self.root, text)

    def stat(self, rel: str) -> os.stat_result | None:
        """The file's own status (a symlink is not followed: it is reported and refused)."""
        path = self._inside(rel)
        if path is None:
            return None
        try:
            st = path.lstat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.warn(rel, f"cannot stat ({exc.strerror or exc})")
            return None
        if stat.S_ISLNK(st.st_mode):
            self.warn(rel, "is a symbolic link: not followed")
            return None
        return st

    def _open(self, rel: str) -> int | None:
        """A descriptor of the file inside the folder, opened without following a symlink
        and without blocking on a FIFO; None (warned) otherwise."""
        path = self._inside(rel)
        if path is None:
            return None
        try:
            # O_NOFOLLOW: a symlink fails to open; O_NONBLOCK: a FIFO does not hang us
            return os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP or path.is_symlink():
                self.warn(rel, "is a symbolic link: not followed")
            elif exc.errno == errno.EISDIR:
                self.warn(rel, "is a directory, expected a file")
            else:
                self.warn(rel, f"cannot read ({exc.strerror or exc})")
            return None

    def read(self, rel: str) -> bytes | None:
        """The file's bytes; None when absent, unreadable, not a regular file inside the
        folder, or too large (with a warning)."""
        fd = self._open(rel)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                self.warn(rel, "is a directory, expected a file")
                return None
            if not stat.S_ISREG(st.st_mode):
                self.warn(rel, "is not a regular file: not read")
                return None
            if st.st_size > MAX_FILE_BYTES:
                self.warn(rel, f"is {st.st_size} bytes, over {MAX_FILE_BYTES}: not read")
                return None
            chunks = []
            left = MAX_FILE_BYTES + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            if left <= 0:
                self.warn(rel, f"grew past {MAX_FILE_BYTES} bytes while read: not read")
                return None
            return b"".join(chunks)
        except OSError as exc:
            self.warn(rel, f"cannot read ({exc.strerror or exc})")
            return None
        finally:
            os.close(fd)

    def chunks(self, rel: str, start: int = 0, limit: int | None = None
               ) -> Iterator[bytes] | None:
        """The file's bytes from ``start`` (at most ``limit`` of them) in chunks of
        :data:`CHUNK_BYTES` (no size cap: memory stays bounded); None when absent or
        refused, as :meth:`read`."""
        fd = self._open(rel)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            self.warn(rel, f"cannot read ({exc.strerror or exc})")
            return None
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self.warn(rel, "is not a regular file: not read")
            return None

        def stream() -> Iterator[bytes]:
            try:
                os.lseek(fd, start, os.SEEK_SET)
                left = limit
                while left is None or left > 0:
                    chunk = os.read(fd, CHUNK_BYTES if left is None else min(left, CHUNK_BYTES))
                    if not chunk:
                        return
                    if left is not None:
                        left -= len(chunk)
                    yield chunk
            except OSError as exc:
                self.warn(rel, f"cannot read ({exc.strerror or exc})")
            finally:
                os.close(fd)

        return stream()

    def text(self, rel: str, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.warn(rel, "not UTF-8; undecodable bytes replaced")
            return data.decode("utf-8", errors="replace")

    def json_object(self, rel: str, data: bytes) -> dict[str, Any] | None:
        try:
            doc, dropped = _loads(data)
        except orjson.JSONDecodeError as exc:
            what = "empty" if not data.strip() else "not valid JSON (half-written?)"
            self.warn(rel, f"{what}: {exc}" if data.strip() else what)
            return None
        if dropped:
            self.warn(rel, f"{dropped} number(s) out of range, read as null")
        if not isinstance(doc, dict):
            self.warn(rel, f"expected a JSON object, got {type(doc).__name__}")
            return None
        return doc

    def jsonl(self, rel: str, data: bytes) -> list[tuple[int, dict[str, Any]]]:
        """(line number, object) of every well-formed line; a warning for each other line."""
        out = []
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            last = number == len(lines)  # no newline after it: may still be being written
            try:
                doc, dropped = _loads(raw)
            except orjson.JSONDecodeError:
                self.warn(rel, f"line {number}: " + (
                    "half-written last line, ignored" if last else "not valid JSON, ignored"))
                continue
            if dropped:
                self.warn(rel, f"line {number}: {dropped} number(s) out of range, read as null")
            if not isinstance(doc, dict):
                self.warn(rel, f"line {number}: expected a JSON object, ignored")
                continue
            out.append((number, doc))
        return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(data: bytes) -> str:
    """The digest recorded for a file's content (keyed, see ``_digest``); ``_sha256`` is
    the watcher's own change detection, never exported."""
    return digest_bytes(data)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(reader: _Reader, rel: str, where: str, value: Any) -> int | None:
    """A non-negative integer field, or None with a warning when it is something else."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    reader.warn(rel, f"{where}: expected a non-negative integer, got {value!r}; ignored")
    return None

# ---------------------------------------------------------------------------------------
# messages.jsonl


class _History:
    """``messages.jsonl`` as line offsets and token counts, read in chunks: memory grows with
    the number of lines, not their bytes. Given ``resume`` (the lines parsed at an earlier
    look, when the file has only grown since: :func:`read_session` knows), only the new
    bytes are parsed."""

    def __init__(self, reader: _Reader,
                 resume: tuple[list[int], list[int], int] | None = None) -> None:
        self.reader = reader
        self.starts: list[int] = list(resume[0]) if resume else []
        self.tokens: list[int] = list(resume[1]) if resume else []
        self.end = resume[2] if resume else 0  # end of the last complete line
        chunks = reader.chunks(MESSAGES, self.end)
        self.present = chunks is not None
        if chunks is None:
            self.starts, self.tokens, self.end = [], [], 0
            return
        pending = b""
        offset = self.end
        for chunk in chunks:
            data = pending + chunk
            base = offset - len(pending)
            position = 0
            while True:
                newline = data.find(b"\n", position)
                if newline < 0:
                    break
                self.starts.append(base + position)
                self.tokens.append(self._tokens(reader, len(self.starts), data[position:newline]))
                position = newline + 1
            pending = data[position:]
            offset += len(chunk)
            self.end = offset - len(pending)
        if pending.strip():
            reader.warn(MESSAGES, f"line {len(self.starts) + 1}: half-written last line, "
                                  "not counted")

    def resumable(self) -> tuple[list[int], list[int], int]:
        return self.starts, self.tokens, self.end

    @staticmethod
    def _tokens(reader: _Reader, number: int, raw: bytes) -> int:
        try:
            doc, dropped = _loads(raw)
        except orjson.JSONDecodeError:
            if raw.strip():
                reader.warn(MESSAGES, f"line {number}: not valid JSON; tokens estimated")
            return estimate_tokens(raw.decode("utf-8", errors="replace"))
        if dropped:
            reader.warn(MESSAGES, f"line {number}: {dropped} number(s) out of range, read as "
                                  "null")
        if isinstance(doc, dict):
            tokens = doc.get("tokens")
            if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
                return tokens
            content = doc.get("content")
            if isinstance(content, str):
                return estimate_tokens(content)
        return estimate_tokens(raw.decode("utf-8", errors="replace"))

    @property
    def count(self) -> int:
        return len(self.starts)

    def tokens_in(self, r: Range) -> int:
        return sum(self.tokens[r[0] - 1:r[1]])

    def digest_in(self, r: Range) -> tuple[str, int] | None:
        """(digest, byte size) of lines ``r``, read from the file in chunks; None if the
        file cannot be read now."""
        first = self.starts[r[0] - 1]
        last = self.starts[r[1]] if r[1] < len(self.starts) else self.end
        chunks = self.reader.chunks(MESSAGES, first, last - first)
        if chunks is None:
            return None
        return digest_chunks(chunks), last - first

    def resolve(self, selector: str | None) -> Range | None:
        """A pack range (``tail:N``, ``head:N``, ``A-B``, ``N``) as lines of messages.jsonl."""
        if self.count == 0:
            return None
        if selector is None:
            return (1, self.count)
        text = selector.strip()
        m = re.fullmatch(r"(tail|head):(\d+)", text)
        if m:
            n = min(int(m.group(2)), self.count)
            if n == 0:
                return None
            return (self.count - n + 1, self.count) if m.group(1) == "tail" else (1, n)
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
        if m:
            a = int(m.group(1))
            b = min(int(m.group(2) or a), self.count)
            return (a, b) if 1 <= a <= b else None
        return None


