"""Named model configurations: a preset is a set of options for one model kind.

The model classes' own defaults are the textbook models of the seeds: ``MultinomialNB()`` is
the multinomial event model with Laplace smoothing (scikit-learn's and river's
``MultinomialNB``), ``BernoulliNB()`` the multi-variate Bernoulli model (scikit-learn's
``BernoulliNB``). A preset names a tuned configuration on top of them:

- ``"textbook"`` (every kind): no options, the class defaults.
- ``"mail"`` (``multinomial``): the scoring that ranked spam best on the mail and SMS streams of
  ``docs/accuracy.md`` — boolean counts (a token counts once per message), α = 0.12, idf
  weights times each token's spread to the power 0.7, length-normalised, tokens whose
  log-probabilities differ by less than 0.5 left out. It changes how the counts become a
  score, not the counts themselves.

``config.toml``, the daemon and ``streamnb evaluate`` build their model through
:func:`resolve`, which applies the kind's default preset (:data:`DEFAULT_PRESETS`: ``"mail"``
for ``multinomial``) when the ``[model]`` table names none; explicit options go on top.

>>> resolve({"kind": "multinomial"})
('multinomial', {'alpha': 0.12, 'repeated_words': 'binary', 'idf': True, 'length_norm': True, \
'min_spread': 0.5, 'spread_weight': 0.7})
>>> resolve({"kind": "multinomial", "preset": "textbook", "alpha": 0.5})
('multinomial', {'alpha': 0.5})
>>> resolve({"kind": "bernoulli", "preset": "mail"})
Traceback (most recent call last):
...
ValueError: preset 'mail' is for model kind 'multinomial', not 'bernoulli'
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["DEFAULT_KIND", "DEFAULT_PRESETS", "MAIL", "PRESETS", "TEXTBOOK", "preset_options",
           "resolve"]

TEXTBOOK = "textbook"
#: The tuned mail scoring of ``MultinomialNB`` (see the module doc and docs/accuracy.md).
MAIL: Mapping[str, Any] = MappingProxyType({
    "alpha": 0.12, "repeated_words": "binary", "idf": True, "length_norm": True,
    "min_spread": 0.5, "spread_weight": 0.7,
})
#: preset name -> (the kind it is for, its options); "textbook" is valid for every kind.
PRESETS: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType({
    "mail": ("multinomial", MAIL),
})
#: The preset a ``[model]`` table without ``preset`` gets, per kind (others: "textbook").
DEFAULT_PRESETS: Mapping[str, str] = MappingProxyType({"multinomial": "mail"})
#: The kind a ``[model]`` table without ``kind`` gets.
DEFAULT_KIND = "multinomial"


def preset_options(kind: str, preset: str) -> dict[str, Any]:
    """The options ``preset`` gives a model of ``kind``; ValueError names an unknown preset or
    a preset of another kind."""
    if preset == TEXTBOOK:
        return {}
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; expected one of "
                         f"{sorted([TEXTBOOK, *PRESETS])}")
    preset_kind, options = PRESETS[preset]
    if preset_kind != kind:
        raise ValueError(f"preset {preset!r} is for model kind {preset_kind!r}, not {kind!r}")
    return dict(options)


def default_preset(kind: str) -> str:
    return DEFAULT_PRESETS.get(kind, TEXTBOOK)


def resolve(table: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(kind, options)`` of a flat ``[model]`` table (``kind``, ``preset`` and options): the
    preset's options (the kind's default preset when ``preset`` is absent) with the table's
    own options on top."""
    options = dict(table)
    kind = options.pop("kind", DEFAULT_KIND)
    preset = options.pop("preset", None)
    if preset is None:
        preset = default_preset(kind)
    if not isinstance(preset, str):
        raise ValueError(f"model preset must be a string, got {preset!r}")
    return kind, {**preset_options(kind, preset), **options}
