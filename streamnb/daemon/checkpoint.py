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

__all__ = [
    "FORMAT",
    "VERSION",
    "CheckpointError",
    "check_daemon_body",
    "read_checkpoint",
    "write_checkpoint",
]

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


def check_daemon_body(path: str | os.PathLike, body: dict[str, Any]) -> None:
    """Raise :class:`CheckpointError` naming ``path`` unless ``body`` has the shape the daemon
    writes: ``model.kind``, ``slices`` of ``{next_offset, model}``, a ``feedback`` store with its
    ``entries``, and ``metrics`` (an object or null). A file can pass its CRC and still be
    wrong (written by hand or by another program, then re-checksummed): the daemon must not
    resume from it.

    >>> check_daemon_body("c.json", {"model": {"kind": "multinomial"}, "slices": {"in:0": {
    ...     "next_offset": 3, "model": {}}}, "feedback": {"version": 1, "entries": []}})
    >>> check_daemon_body("c.json", {"model": {"kind": "multinomial"}, "slices": {"in:0": {
    ...     "next_offset": "3", "model": {}}}, "feedback": {"version": 1, "entries": []}})
    Traceback (most recent call last):
    ...
    streamnb.daemon.checkpoint.CheckpointError: c.json: checkpoint body does not have the \
expected shape: slices['in:0'].next_offset must be an offset (an integer >= 0), got '3'
    """

    def wrong(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: checkpoint body does not have the expected shape: {what}")

    model = body.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("kind"), str):
        raise wrong("model must be an object with a string 'kind'")
    slices = body.get("slices")
    if not isinstance(slices, dict):
        raise wrong(f"slices must be an object, got {type(slices).__name__}")
    for key, part in slices.items():
        topic, colon, partition = key.rpartition(":")
        if not (topic and colon and partition.isdigit()):
            raise wrong(f"slice key {key!r:.80} is not 'topic:partition'")
        if not isinstance(part, dict) or not isinstance(part.get("model"), dict):
            raise wrong(f"slices[{key!r:.80}] must be an object with a 'model' object")
        offset = part.get("next_offset")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise wrong(f"slices[{key!r:.80}].next_offset must be an offset (an integer >= 0), "
                        f"got {offset!r:.40}")
    feedback = body.get("feedback")
    if not isinstance(feedback, dict) or not isinstance(feedback.get("entries"), list):
        raise wrong("feedback must be an object with an 'entries' list")
    for entry in feedback["entries"]:
        if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)
                and isinstance(entry[1], str) and (entry[2] is None or isinstance(entry[2], str))):
            raise wrong(f"feedback entry {entry!r:.80} is not [id, slice, label, input]")
    metrics = body.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        raise wrong(f"metrics must be an object or null, got {type(metrics).__name__}")
