"""The columns of each trace file, kept beside the run so a second read skips the JSON.

Reading a run is parsing and walking its OTLP/JSON (seconds per million spans); loading the
columns it projects to is a few milliseconds per file. So the first read of a run writes, per
trace file, the columns of its complete lines to ``<run_dir>/.rlsight-cache/columns/<file>.cols``
and later reads use them, reading from the JSON only what was appended since.

An entry is never trusted blindly; it holds the file's identity (device, inode), the byte
length it covers (up to the last newline: a line without one may still be being written),
the number of lines there, a CRC-32 of those bytes, the file's size and times when it was
read, and a fingerprint of the code that projected it. A read uses an entry when

* the file's identity, size and modification/change times are what the entry recorded, and
  the file had not been written for :data:`SETTLED_NS` before the entry was made (file
  times have a coarse clock: a write in the same tick would leave them unchanged); or
* the file is the same file and at least as long, and the CRC-32 of the covered bytes
  still matches (a live run's file grows): only the bytes after them are parsed.

Anything else (another file under the same name, a rewrite, a shorter file, an entry from
other code, an unreadable entry) reads the file from the start. Entries hold raw column bytes
and JSON, never pickle, so a run folder from elsewhere cannot run code here; a folder that
cannot be written to simply gets no cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from rlsight.analysis.columns import SpanColumns
from rlsight.store._schema import SkippedRecord

__all__ = ["SETTLED_NS", "CachedFile", "crc_of", "entry_path", "fingerprint", "load_entry", "save_entry"]

#: Where the entries live, inside the run folder.
CACHE_DIR: Final = Path(".rlsight-cache") / "columns"
#: A file last written this long before its entry was made is trusted by its stat alone.
SETTLED_NS: Final = 2_000_000_000
_ARRAYS: Final = ("start", "end", "trace", "span_id", "parent_id", "name", "group", "bucket",
                  "concurrent", "process", "thread", "step_no", "batch_size", "prompts", "status",
                  "source_file", "source_line", "source_slot")
_FINGERPRINT: list[str] = []
#: An entry file: this magic, the header's length (8 bytes, little-endian), the JSON header
#: (the metadata, and each column's dtype, offset and length), then the columns' raw bytes.
_MAGIC: Final = b"rlsight-columns\n"
_HEAD: Final = len(_MAGIC) + 8


def fingerprint() -> str:
    """A digest of the source of every module that decides what the columns hold: an entry
    written by other code (another rlsight, or this one edited) never matches."""
    if not _FINGERPRINT:
        from rlsight import __version__
        from rlsight.analysis import _order, columns
        from rlsight.store import _lines, _reader

        digest = hashlib.blake2b(__version__.encode(), digest_size=16)
        for module in (columns, _order, _reader, _lines):
            try:
                digest.update(Path(str(module.__file__)).read_bytes())
            except OSError:
                digest.update(str(module.__file__).encode())
        digest.update(Path(__file__).read_bytes())
        _FINGERPRINT.append(digest.hexdigest())
    return _FINGERPRINT[0]


@dataclass(frozen=True, slots=True)
class CachedFile:
    """The columns and skipped lines of a file's first ``covered`` bytes (``lines`` lines)."""

    cols: SpanColumns
    skipped: list[SkippedRecord]
    covered: int
    lines: int
    crc: int
    stat: tuple[int, int, int, int, int]
    """(device, inode, size, mtime ns, ctime ns) of the file when it was read."""
    settled: bool


def stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def entry_path(run_dir: Path, trace_file: Path) -> Path:
    return run_dir / CACHE_DIR / f"{trace_file.name}.cols"


def crc_of(path: Path, length: int) -> int | None:
    """CRC-32 of the first ``length`` bytes of ``path`` (None if it has fewer or cannot be read)."""
    crc, left = 0, length
    try:
        with path.open("rb") as handle:
            while left:
                chunk = handle.read(min(left, 8 * 2**20))
                if not chunk:
                    return None
                crc = zlib.crc32(chunk, crc)
                left -= len(chunk)
    except OSError:
        return None
    return crc


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples the decoder gives sequence attributes."""
    return tuple(value) if isinstance(value, list) else value


def _attrs(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: _tuples(v) for k, v in raw.items()}


def load_entry(run_dir: Path, trace_file: Path) -> CachedFile | None:
    """The entry of ``trace_file`` written by this code, or None (missing, foreign, unreadable)."""
    try:
        data = np.fromfile(entry_path(run_dir, trace_file), dtype=np.uint8)
        if bytes(data[:len(_MAGIC)]) != _MAGIC:
            return None
        size = int(data[len(_MAGIC):_HEAD].view("<u8")[0])
        header = json.loads(bytes(data[_HEAD:_HEAD + size]))
        meta = header["meta"]
        if meta.get("fingerprint") != fingerprint() or meta.get("file") != trace_file.name:
            return None
        arrays = {}
        for name, dtype, offset, nbytes in header["arrays"]:
            if offset + nbytes > len(data):
                return None
            arrays[name] = data[offset:offset + nbytes].view(np.dtype(dtype))
        cols = SpanColumns(
            **{name: arrays[name] for name in _ARRAYS},
            names=meta["names"], groups=meta["groups"], traces=meta["traces"],
            resources=[_attrs(r) for r in meta["resources"]], process_keys=meta["process_keys"],
            kept_attributes={int(i): _attrs(a) for i, a in meta["kept"]},
            source_files=[str(trace_file)] * bool(len(arrays["start"])),
            invalid_buckets=int(meta["invalid_buckets"]),
        )
        skipped = [SkippedRecord(str(trace_file), int(line), str(reason)) for line, reason in meta["skipped"]]
        return CachedFile(cols, skipped, int(meta["covered"]), int(meta["lines"]), int(meta["crc"]),
                          tuple(meta["stat"]), bool(meta["settled"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None  # JSONDecodeError and UnicodeDecodeError are ValueErrors


def save_entry(run_dir: Path, trace_file: Path, entry: CachedFile, code: str | None = None) -> None:
    """Write ``entry`` atomically (``code``: :func:`fingerprint`, given by a process that
    cannot compute it); a folder that cannot be written to gets no cache."""
    cols = entry.cols
    meta = {
        "fingerprint": code or fingerprint(), "file": trace_file.name, "covered": entry.covered,
        "lines": entry.lines, "crc": entry.crc, "stat": list(entry.stat), "settled": entry.settled,
        "names": cols.names, "groups": cols.groups, "traces": cols.traces,
        "resources": cols.resources, "process_keys": cols.process_keys,
        "kept": sorted(cols.kept_attributes.items()), "invalid_buckets": cols.invalid_buckets,
        "skipped": [(s.line, s.reason) for s in entry.skipped],
    }
    blobs = [np.ascontiguousarray(getattr(cols, name)) for name in _ARRAYS]
    layout: list[list[Any]] = []
    offset = 0
    for name, blob in zip(_ARRAYS, blobs, strict=True):
        layout.append([name, blob.dtype.str, offset, blob.nbytes])
        offset += -(-blob.nbytes // 8) * 8
    path = entry_path(run_dir, trace_file)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # Offsets in the header are from the file's start, which depends on the header's own
        # length: fix them up once that is known (8-aligned, so every column views in place).
        text = json.dumps({"meta": meta, "arrays": layout}, default=str).encode()
        start = -(-(_HEAD + len(text) + 32) // 8) * 8
        for item in layout:
            item[2] += start
        text = json.dumps({"meta": meta, "arrays": layout}, default=str).encode()
        if _HEAD + len(text) > start:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as handle:
            handle.write(_MAGIC + len(text).to_bytes(8, "little") + text)
            handle.write(b"\0" * (start - _HEAD - len(text)))
            for blob in blobs:
                handle.write(blob.tobytes())
                handle.write(b"\0" * (-blob.nbytes % 8))
        os.replace(tmp, path)
    except (OSError, ValueError, TypeError):
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def settled(stat: tuple[int, int, int, int, int]) -> bool:
    """Whether a file with :func:`stat_key` ``stat`` has not been written for :data:`SETTLED_NS`."""
    return time.time_ns() - max(stat[3], stat[4]) > SETTLED_NS
