"""Outputs that always fit: no record the daemon hands its producer can be refused for size.

A record over what the producer or the topic accepts (``max.message.bytes``, read at start)
would fail its delivery, stop the daemon, and stop it again at every restart, at the same
record: a poison pill. So every output is measured first (:meth:`KafkaIO.room` says how many
value bytes a record may carry):

* a prediction that does not fit is not sent; the input becomes a dead letter with reason
  ``output_too_large`` instead (the daemon does this);
* a dead letter whose original bytes do not fit carries a prefix of them, as long as fits,
  with headers saying so (:func:`fit_dead_letter`): ``streamnb.truncated: true``, the
  original's size (``streamnb.original.size``) and SHA-256 (``streamnb.original.sha256``), so
  the record can be found and checked against its source. If even the key and headers are too
  large, the input headers are dropped and the key is cut the same way
  (``streamnb.original.key_size``, ``streamnb.original.key_sha256``).

>>> class IO:  # a topic that takes 200-byte records
...     def room(self, topic, key, headers):
...         from streamnb.daemon.kafka_io import record_size
...         return 200 - record_size(key, b"", headers) - 5
>>> key, value, headers = fit_dead_letter(IO(), "dlq", b"k", b"x" * 1000, [("why", b"big")])
>>> len(value) < 200, dict(headers)["streamnb.truncated"], dict(headers)["streamnb.original.size"]
(True, b'true', b'1000')
>>> fit_dead_letter(IO(), "dlq", b"k", b"small", [])
(b'k', b'small', [])
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["fit_dead_letter"]

Headers = list[tuple[str, bytes]]

# A dead letter's key when its input's key is too large to keep: the first bytes of it.
KEY_PREFIX_BYTES = 256


def _digest(data: bytes | None) -> bytes:
    return hashlib.sha256(data or b"").hexdigest().encode()


def fit_dead_letter(
    io: Any, topic: str, key: bytes | None, value: bytes | None, headers: Headers
) -> tuple[bytes | None, bytes | None, Headers]:
    """``(key, value, headers)`` of a dead letter for ``topic``, cut to what it accepts."""
    room = io.room(topic, key, headers)
    size = len(value) if value is not None else 0
    if size <= room:
        return key, value, headers
    cut = [
        *headers,
        ("streamnb.truncated", b"true"),
        ("streamnb.original.size", str(size).encode()),
        ("streamnb.original.sha256", _digest(value)),
    ]
    room = io.room(topic, key, cut)
    if room < 0:
        # The input's own key or headers leave no room: keep ours only, and a key prefix.
        ours = [(name, data) for name, data in cut if name.startswith("streamnb.")]
        if key is not None and len(key) > KEY_PREFIX_BYTES:
            ours += [
                ("streamnb.original.key_size", str(len(key)).encode()),
                ("streamnb.original.key_sha256", _digest(key)),
            ]
            key = key[:KEY_PREFIX_BYTES]
        cut = ours
        room = max(0, io.room(topic, key, cut))
    return key, (value or b"")[:room], cut
