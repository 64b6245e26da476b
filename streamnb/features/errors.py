"""The one error the featurizer raises."""

from __future__ import annotations

__all__ = ["FeaturizationError"]


class FeaturizationError(ValueError):
    """Input rejected rather than featurized; ``reason`` is a short, stable code.

    Reasons: ``wrong_type`` (not bytes / str / a list of str), and, with
    ``on_limit = "reject"``, ``too_large``, ``too_many_parts``, ``too_deep``, ``too_much_text``,
    ``too_many_tokens``, ``timeout``.

    >>> error = FeaturizationError("too_large", "5000000 bytes")
    >>> error.reason, str(error)
    ('too_large', 'too_large: 5000000 bytes')
    """

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
