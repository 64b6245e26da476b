"""Whether the featurizer runs its C extension (``streamnb.features._tokens``) or pure Python.

``make setup`` (``pip install -e .``) compiles the extension; it finds and counts words, URL
hosts and header values the way the Python code beside it does, several times faster. The
Python code stays as the reference the tests compare the C code with, and as the fallback of
an install without a compiler. ``STREAMNB_PURE_PYTHON=1`` asks for it explicitly.
"""

from __future__ import annotations

import logging
import os

try:
    from streamnb.features import _tokens
except ImportError:  # an install without a compiler: the pure-Python rules, same tokens
    _tokens = None

__all__ = ["PURE_PYTHON_ENV", "enabled"]

PURE_PYTHON_ENV = "STREAMNB_PURE_PYTHON"
_log = logging.getLogger("streamnb.features")
_logged = False


def enabled() -> bool:
    """True when the extension is built, unless ``STREAMNB_PURE_PYTHON=1`` says otherwise."""
    return _tokens is not None and os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")


def log_path_once(native: bool) -> None:
    """Say once per process which path the featurizer takes.

    A warning only when the extension is missing; the chosen paths are logged at debug level,
    so a daemon's start (one line for a bad setting) says nothing more than before.
    """
    global _logged
    if _logged:
        return
    _logged = True
    if native:
        _log.debug("featurizer: words, URL hosts and headers read in C (streamnb.features._tokens)")
    elif _tokens is None:
        _log.warning(
            "featurizer: the C extension streamnb.features._tokens is not built; reading in "
            "pure Python, about half as fast (pip install -e . builds it)"
        )
    else:
        _log.debug("featurizer: reading in pure Python (%s=1)", PURE_PYTHON_ENV)
