"""Append-only shards: gzip members of JSON lines, found through an index of key ranges.

A shard is two files: ``<name>.jsonl.gz``, a sequence of gzip members (each a self-contained
block of rows, readable on its own), and ``<name>.jsonl.gz.idx``, one JSON line per member:
its byte ``offset`` and ``length``, its lowest and highest key (``lo``, ``hi``; a host
appends its agents in id order, so the ranges of one append do not overlap), its row count,
and optionally every key it holds (``keys``, for shards keyed by content hash, where ranges
say little).

Every row is a JSON object whose first field is ``"key"``. An append (``Appender``) writes
the members first and their index lines after, so at any moment the index describes only
bytes that are already in the data file: a reader (also of a running or crashed run) trusts
the complete index lines whose members lie inside the data file and ignores the rest.
Whatever lies beyond is a torn tail, which ``truncate`` cuts on resume.

Why gzip and JSON lines: both are in the standard library, a member is readable with
``gzip.decompress`` alone (``zcat`` reads the whole file), and the rows stay the JSON the
rest of agentsim already writes. Members of ~128 KB keep compression good (traces of
neighbouring agents share most of their text) and make a one-agent read cost one small
decompression per append.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "DATA_SUFFIX",
    "INDEX_SUFFIX",
    "Appender",
    "Member",
    "ShardDamaged",
    "append_rows",
    "check_prefix",
    "index_path",
    "key_prefix",
    "read_index",
    "read_key",
    "read_member",
    "shard_sizes",
    "truncate",
]

DATA_SUFFIX = ".jsonl.gz"
INDEX_SUFFIX = ".idx"
# Uncompressed bytes per member: big enough to compress well, small enough that reading one
# agent's rows decompresses little more than they take.
_MEMBER_BYTES = 128 * 1024
# Fixed header time, so that the same rows give the same bytes.
_MTIME = 0


class ShardDamaged(Exception):
    """A member listed by the index cannot be read back (bytes changed or lost)."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(path, offset, reason)
        self.path, self.offset, self.reason = path, offset, reason

    def __str__(self) -> str:
        return f"shard {self.path} is damaged at byte {self.offset}: {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    offset: int
    length: int
    lo: str
    hi: str
    rows: int
    keys: frozenset[str] | None = None

    def may_hold(self, key: str) -> bool:
        if self.keys is not None:
            return key in self.keys
        return self.lo <= key <= self.hi


def key_prefix(key: str) -> str:
    """How every row with ``key`` starts: rows are built as ``{"key": <key>, ...}``."""
    return '{"key": ' + encode_basestring(key) + ", "


def index_path(data: Path) -> Path:
    return data.with_name(data.name + INDEX_SUFFIX)


class Appender:
    """One append to a shard, fed row by row: members are compressed and written as they
    fill (memory holds one member, not the whole append), index lines at ``commit``.

    Until ``commit`` the new members are a tail no reader trusts; a caller that must make
    other data visible first (prompt parts before the rows that refer to them) writes it
    between ``close_members`` and ``commit``."""

    def __init__(self, data: Path, *, exact_keys: bool = False) -> None:
        self.data = data
        self.exact_keys = exact_keys
        self._rows: list[str] = []
        self._keys: set[str] = set()
        self._size = 0
        self._entries: list[str] = []
        self._file: BinaryIO | None = None

    def add(self, key: str, line: str) -> None:
        """One row: ``line`` is a JSON object starting with ``key_prefix(key)``."""
        self._rows.append(line)
        self._keys.add(key)
        self._size += len(line) + 1
        if self._size >= _MEMBER_BYTES:
            self._write_member()

    def _write_member(self) -> None:
        if not self._rows:
            return
        blob = gzip.compress(("\n".join(self._rows) + "\n").encode(), mtime=_MTIME)
        if self._file is None:
            self.data.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.data, "ab")  # noqa: SIM115 - closed in close_members
        offset = self._file.tell()
        self._file.write(blob)
        # Min and max rather than first and last: right whatever order rows come in.
        entry: dict[str, Any] = {
            "offset": offset,
            "length": len(blob),
            "lo": min(self._keys),
            "hi": max(self._keys),
            "rows": len(self._rows),
        }
        if self.exact_keys:
            entry["keys"] = sorted(self._keys)
        self._entries.append(json.dumps(entry, ensure_ascii=False))
        self._rows, self._keys, self._size = [], set(), 0

    def close_members(self) -> None:
        """Write the last member and flush the data file."""
        self._write_member()
        if self._file is not None:
            self._file.close()
            self._file = None

    def commit(self) -> None:
        """Append the index lines of the members written: readers see them from now on."""
        self.close_members()
        if self._entries:
            with open(index_path(self.data), "a", encoding="utf-8") as f:
                f.write("\n".join(self._entries) + "\n")
            self._entries = []


def append_rows(data: Path, rows: Iterable[tuple[str, str]], *, exact_keys: bool = False) -> None:
    """Append ``rows`` ((key, JSON line starting with ``key_prefix(key)``)) in one go."""
    out = Appender(data, exact_keys=exact_keys)
    for key, line in rows:
        out.add(key, line)
    out.commit()


def read_index(data: Path) -> list[Member]:
    """The members the index lists, in order, up to the first one that is not whole: a torn
    index line, or a member that reaches past the end of the data file (the tail of a write
    in progress, or of a crash)."""
    try:
        size = data.stat().st_size
        raw = index_path(data).read_bytes()
    except FileNotFoundError:
        return []
    out: list[Member] = []
    for line in raw.split(b"\n")[:-1]:  # the last piece has no newline: torn or empty
        try:
            d = json.loads(line)
            m = Member(
                offset=int(d["offset"]),
                length=int(d["length"]),
                lo=str(d["lo"]),
                hi=str(d["hi"]),
                rows=int(d["rows"]),
                keys=frozenset(map(str, d["keys"])) if "keys" in d else None,
            )
        except (ValueError, KeyError, TypeError):
            break
        if m.offset + m.length > size:
            break
        out.append(m)
    return out


def read_member(data: Path, member: Member) -> list[str]:
    """The rows of one member; ``ShardDamaged`` if its bytes do not decompress whole."""
    with open(data, "rb") as f:
        f.seek(member.offset)
        blob = f.read(member.length)
    try:
        text = gzip.decompress(blob).decode()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise ShardDamaged(str(data), member.offset, str(exc) or type(exc).__name__) from None
    lines = text.split("\n")[:-1]
    if len(lines) != member.rows:
        raise ShardDamaged(
            str(data), member.offset, f"{len(lines)} rows where the index says {member.rows}"
        )
    return lines


def read_key(
    data: Path, key: str, members: Sequence[Member] | None = None
) -> Iterator[dict[str, Any]]:
    """Every row with ``key``, in the order written, reading only the members that may hold
    it."""
    prefix = key_prefix(key)
    for m in read_index(data) if members is None else members:
        if m.may_hold(key):
            for line in read_member(data, m):
                if line.startswith(prefix):
                    row: dict[str, Any] = json.loads(line)
                    yield row


def shard_sizes(data: Path) -> tuple[int, int]:
    """(data bytes, index bytes) as they are now."""
    idx = index_path(data)
    return (
        data.stat().st_size if data.exists() else 0,
        idx.stat().st_size if idx.exists() else 0,
    )


def truncate(data: Path, sizes: tuple[int, int]) -> None:
    """Cut a shard back to ``sizes`` (check them first with ``check_prefix``)."""
    for path, keep in ((data, sizes[0]), (index_path(data), sizes[1])):
        if path.exists() and path.stat().st_size > keep:
            with open(path, "r+b") as f:
                f.truncate(keep)


def check_prefix(data: Path, sizes: tuple[int, int]) -> None:
    """That the first ``sizes`` bytes of a shard (data, index) are whole appends that read
    back: both files at least that long, the index ending with a complete line whose member
    ends exactly at the data size, and that member (the one a crash could have left its
    mark on) decompressing to the rows listed. Reads only; ``ShardDamaged`` otherwise."""
    idx = index_path(data)
    for path, keep in ((data, sizes[0]), (idx, sizes[1])):
        have = path.stat().st_size if path.exists() else -1
        if have < keep:
            what = "is missing" if have < 0 else f"holds {have} bytes"
            raise ShardDamaged(str(path), max(have, 0), f"it {what}, fewer than {keep}")
    if sizes[1] == 0:
        if sizes[0]:
            raise ShardDamaged(str(data), 0, "the index lists no member of its bytes")
        return
    with open(idx, "rb") as f:
        head = f.read(sizes[1])
    if not head.endswith(b"\n"):
        raise ShardDamaged(str(idx), sizes[1], "the index does not end with a whole line")
    last = head[:-1].rpartition(b"\n")[2]
    try:
        d = json.loads(last)
        member = Member(
            offset=int(d["offset"]),
            length=int(d["length"]),
            lo=str(d["lo"]),
            hi=str(d["hi"]),
            rows=int(d["rows"]),
        )
    except (ValueError, KeyError, TypeError):
        raise ShardDamaged(str(idx), sizes[1], "its last index line is not valid") from None
    if member.offset + member.length != sizes[0]:
        raise ShardDamaged(str(data), sizes[0], "the index and the data sizes disagree")
    read_member(data, member)
