"""Stable hashing of tokens into a fixed number of buckets.

Python's built-in ``hash()`` of a ``str`` is salted per process (PYTHONHASHSEED), so a model
saved by one process would look up different buckets in the next. CRC-32 is stable across
processes, platforms and Python versions, runs in C, and spreads words well enough for
bucketing (the hashing trick needs uniformity, not collision resistance).

>>> stable_hash("viagra")
287661370
>>> stable_bucket("viagra", 1 << 20) == stable_hash("viagra") % (1 << 20)
True
"""

from zlib import crc32

__all__ = ["stable_bucket", "stable_hash"]


def stable_hash(token: str) -> int:
    """A 32-bit hash of ``token`` that is the same in every process and version."""
    return crc32(token.encode("utf-8", "surrogatepass"))


def stable_bucket(token: str, n_buckets: int) -> int:
    """The bucket in ``range(n_buckets)`` that ``token`` falls into."""
    return crc32(token.encode("utf-8", "surrogatepass")) % n_buckets
