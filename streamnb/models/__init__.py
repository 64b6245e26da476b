"""Online generative classifiers as exact, mergeable sufficient statistics.

Every model learns and unlearns one labelled example at a time, adds and subtracts with another
model of its kind (``+=``, ``-=``), and saves itself as a JSON-compatible, versioned dict.

>>> model = make_model("multinomial")   # the textbook model; preset="mail": the tuned one
>>> model.learn_one({"win": 1, "cash": 2}, "spam")
>>> model.learn_one({"lunch": 1, "today": 1}, "ham")
>>> copy = model_from_state(model.to_state())
>>> copy.predict_one({"cash": 1}), copy.classes
('spam', ['ham', 'spam'])
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from streamnb.models._base import STATE_VERSION, Model, ModelInputError, StateError
from streamnb.models.bernoulli import BernoulliNB
from streamnb.models.gda import GDA
from streamnb.models.multinomial import TEXTBOOK_OPTIONS, MultinomialNB
from streamnb.models.presets import PRESETS, preset_options

__all__ = [
    "BernoulliNB",
    "GDA",
    "KINDS",
    "Model",
    "ModelInputError",
    "MultinomialNB",
    "PRESETS",
    "STATE_VERSION",
    "StateError",
    "TEXTBOOK_OPTIONS",
    "make_model",
    "model_from_state",
]

#: Model kind (as in ``config.toml``'s ``[model] kind``) -> class.
KINDS: dict[str, type[Model]] = {
    "multinomial": MultinomialNB,
    "bernoulli": BernoulliNB,
    "gda": GDA,
}


def make_model(kind: str, *, preset: str | None = None, **options: Any) -> Model:
    """A new, empty model of ``kind`` with ``options``; ValueError names an unknown kind/option.

    Without ``preset`` the class defaults apply (the textbook models); ``preset`` (a name from
    :mod:`streamnb.models.presets`, e.g. ``"mail"``) gives its options, ``options`` go on top.

    >>> make_model("multinomial", preset="mail", alpha=0.5).options()["alpha"]
    0.5
    """
    cls = KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown model kind {kind!r}; expected one of {sorted(KINDS)}")
    if preset is not None:
        options = {**preset_options(kind, preset), **options}
    accepted = [name for name in inspect.signature(cls.__init__).parameters if name != "self"]
    for name in options:
        if name not in accepted:
            raise ValueError(f"unknown option {name!r} for model kind {kind!r}; "
                             f"accepted: {accepted}")
    return cls(**options)


def model_from_state(state: Mapping[str, Any]) -> Model:
    """The model saved by ``to_state()``; StateError (a ValueError) if it cannot be loaded."""
    if not isinstance(state, Mapping):
        raise StateError(f"a model state must be a dict, got {type(state).__name__}")
    cls = KINDS.get(state.get("model"))  # type: ignore[arg-type]
    if cls is None:
        raise StateError(f"unknown model kind {state.get('model')!r} in state; "
                         f"expected one of {sorted(KINDS)}")
    return cls.from_state(state)
