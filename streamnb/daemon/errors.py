"""The daemon's own errors about Kafka, importable without importing ``kafka``."""

from __future__ import annotations

__all__ = ["ChangelogTopicError", "FencedError"]


class ChangelogTopicError(RuntimeError):
    """A changelog topic exists but cannot hold the state (wrong partition count or policy),
    or an input topic to size it from is missing."""


class FencedError(RuntimeError):
    """Another producer with this transactional id, or a newer member of the group, has
    taken over: this daemon must stop without writing."""
