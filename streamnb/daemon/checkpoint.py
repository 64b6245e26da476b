"""Atomic, versioned checkpoint files (JSON, never pickle).

A checkpoint file is two lines: a small JSON header (format name, version, body length and
CRC-32) and the JSON body. It is written to a temporary file in the same directory, flushed and
fsynced, renamed over the previous checkpoint and the directory is fsynced, so a reader sees
either the whole old file or the whole new one, never a mix. The header's length and CRC catch
a file damaged afterwards (a disk error, a hand edit): :func:`read_checkpoint` refuses it
instead of resuming from garbage.

What the body holds is up to the caller (the daemon stores model slices, offsets, the feedback
store and the metrics); this module only knows it must be JSON-compatible.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "checkpoint.json"
>>> size = write_checkpoint(path, {"partitions": {"mail:0": {"next_offset": 42}}})
>>> read_checkpoint(path)["partitions"]["mail:0"]["next_offset"]
42
>>> read_checkpoint(path.with_name("missing.json")) is None
True
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import orjson

__all__ = ["FORMAT", "VERSION", "CheckpointError", "read_checkpoint", "write_checkpoint"]

FORMAT = "streamnb-checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file exists but cannot be used (damaged, or from an unknown version)."""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: str | os.PathLike, body: dict[str, Any]) -> int:
    """Atomically replace ``path`` with ``body``; returns the file size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    header = orjson.dumps(
        {"format": FORMAT, "version": VERSION, "length": len(data), "crc32": zlib.crc32(data)}
    )
    # Step 4 of the daemon's checkpoint protocol: a temporary file in the same directory,
    # flushed and fsynced, so the rename below never exposes a partly written file.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as out:
        out.write(header)
        out.write(b"\n")
        out.write(data)
        out.write(b"\n")
        out.flush()
        os.fsync(out.fileno())
    # Step 5: the atomic rename is the commit point; fsync the directory so it survives a
    # power cut.
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return len(header) + len(data) + 2


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any] | None:
    """The body of the checkpoint at ``path``, or ``None`` if there is none yet."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    head, sep, rest = blob.partition(b"\n")
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError:
        raise CheckpointError(f"{path}: not a streamnb checkpoint (bad header)") from None
    if not sep or not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a streamnb checkpoint")
    if header.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {header.get('version')!r}, this build reads {VERSION}"
        )
    data = rest[:-1] if rest.endswith(b"\n") else rest
    if len(data) != header.get("length") or zlib.crc32(data) != header.get("crc32"):
        raise CheckpointError(f"{path}: checkpoint is damaged (length or CRC-32 mismatch)")
    body = orjson.loads(data)
    if not isinstance(body, dict):
        raise CheckpointError(f"{path}: checkpoint body is not an object")
    return body
