"""What every streamnb model shares: the prediction protocol, batch forms, merging, errors.

A subclass says how to count (``_update``), how counts become per-class log joint scores
(``_joint_log_scores``), how two states add (``_add``), and how to (de)serialise itself.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from numbers import Real
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "ModelInputError", "StateError", "STATE_VERSION", "check_class_offsets", "first_best",
    "probabilities_of",
]

#: The version written by ``to_state``; ``from_state`` reads this one only.
STATE_VERSION = 1


class ModelInputError(TypeError, ValueError):
    """An input a model cannot use (wrong type, negative or non-finite count, wrong length).

    It is both a ``TypeError`` and a ``ValueError`` so callers may catch either; the model is
    left unchanged.

    >>> from streamnb.models import MultinomialNB
    >>> MultinomialNB().learn_one({"cheap": -1}, "spam")
    Traceback (most recent call last):
    ...
    streamnb.models._base.ModelInputError: token counts must be finite numbers >= 0
    """


class StateError(ValueError):
    """A saved state that cannot be loaded: wrong model, unknown version, or corrupt data.

    >>> from streamnb.models import model_from_state
    >>> model_from_state({"model": "gda", "version": 7, "options": {}})
    Traceback (most recent call last):
    ...
    streamnb.models._base.StateError: unsupported gda state version 7: this streamnb reads version 1
    """


def check_label(y: Any) -> str:
    if not isinstance(y, str):
        raise ModelInputError(f"labels must be str, got {type(y).__name__}: {y!r}")
    return y


def log_normalise(scores: Mapping[str, float]) -> dict[str, float]:
    """Log-sum-exp normalisation of per-class log joint scores into log-probabilities, one per
    class of ``scores``: a class far below the others keeps its finite log-probability (its
    probability underflows to 0.0 only once exponentiated, :func:`probabilities_of`)."""
    if not scores:
        return {}
    if len(scores) == 1:  # one class is certain, even where its density underflows to 0
        return dict.fromkeys(scores, 0.0)
    top = max(scores.values())
    if top == -math.inf or math.isnan(top):
        raise ValueError(f"cannot normalise scores {dict(scores)!r}")
    # (s - top) - log Σ, not s - (top + log Σ): top + log Σ rounds to top's ulp, an error of
    # 1e-9 in each log-probability of a message scored -1e7 (whose exps then add up to
    # 1 + 2e-10); s - top is exact for close scores
    log_sum = math.log(math.fsum(math.exp(s - top) for s in scores.values()))
    return {label: (s - top) - log_sum for label, s in scores.items()}


def probabilities_of(log_proba: Mapping[str, float]) -> dict[str, float]:
    """P(class | x) of each class of a prediction ``log_proba`` (class -> log P(class | x)),
    every class kept: one that underflows is 0.0, never left out.

    >>> probabilities_of({"ham": -800.0, "spam": 0.0})
    {'ham': 0.0, 'spam': 1.0}
    """
    exp = math.exp
    return {label: exp(lp) for label, lp in log_proba.items()}


def check_positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"option {name!r} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0 or (
        number == 0 and not allow_zero
    ):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"option {name!r} must be a finite number {bound}, got {value!r}")
    return number


def check_class_offsets(value: Any) -> dict[str, float]:
    """The ``class_offsets`` option as a plain dict, label -> finite float, sorted by label, zero
    offsets left out (so ``{spam = 0.0}`` is the model without offsets, to the saved state).

    >>> check_class_offsets({"spam": -1, "ham": 0})
    {'spam': -1.0}
    >>> check_class_offsets({"spam": "high"})
    Traceback (most recent call last):
    ...
    ValueError: option 'class_offsets' must map class labels to finite numbers (log-odds), \
got 'spam' = 'high'
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("option 'class_offsets' must be a table of class label -> log-odds "
                         f"offset, e.g. {{spam = -1.0}}, got {value!r}")
    offsets = {}
    for label, offset in value.items():
        if not isinstance(label, str) or not label or isinstance(offset, bool) or not (
            isinstance(offset, Real) and math.isfinite(offset)
        ):
            raise ValueError("option 'class_offsets' must map class labels to finite numbers "
                             f"(log-odds), got {label!r} = {offset!r}")
        if offset != 0:
            offsets[label] = float(offset)
    return dict(sorted(offsets.items()))


def check_optional_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"option {name!r} must be None or an int >= 1, got {value!r}")
    return int(value)


def json_numbers(values: np.ndarray) -> list:
    """``values`` as a JSON list: ints when every value is an exact integer, floats otherwise."""
    values = np.asarray(values, dtype=np.float64)
    if values.size and np.all(np.abs(values) < 2**53) and np.array_equal(values, np.rint(values)):
        return values.astype(np.int64).tolist()
    return values.tolist()


def state_array(
    state: Mapping[str, Any], key: str, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """Read ``state[key]`` as a finite float64 array of the given shape, or raise StateError."""
    if key not in state:
        raise StateError(f"corrupt state: missing field {key!r}")
    try:
        array = np.array(state[key], dtype=np.float64)
    except (TypeError, ValueError):
        raise StateError(f"corrupt state: field {key!r} is not a numeric array") from None
    if shape is not None and array.shape != shape:
        if array.size == 0 and math.prod(shape) == 0:
            return np.zeros(shape)
        raise StateError(f"corrupt state: field {key!r} has shape {array.shape}, expected {shape}")
    if not np.all(np.isfinite(array)):
        raise StateError(f"corrupt state: field {key!r} holds non-finite numbers")
    return array


def check_header(state: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(state, Mapping):
        raise StateError(f"a model state must be a dict, got {type(state).__name__}")
    if state.get("model") != kind:
        raise StateError(f"state is for model {state.get('model')!r}, not {kind!r}")
    version = state.get("version")
    if version != STATE_VERSION:
        raise StateError(
            f"unsupported {kind} state version {version!r}: this streamnb reads version "
            f"{STATE_VERSION}"
        )
    options = state.get("options")
    if not isinstance(options, Mapping):
        raise StateError("corrupt state: field 'options' must be a dict")
    return options


def first_best(scores: Mapping[str, float]) -> str | None:
    """The label of the highest score, ties to the first label in sorted order (what
    ``max(sorted(scores), key=scores.__getitem__)`` returns, in one pass: sorting the labels
    first cost the daemon 0.5 µs a message); None for no scores.

    >>> first_best({"spam": 0.5, "ham": 0.5}), first_best({"ham": 0.2, "spam": 0.8})
    ('ham', 'spam')
    """
    best, top = None, -math.inf
    for label, score in scores.items():
        if best is None or score > top or (score == top and label < best):
            best, top = label, score
    return best


class Model:
    """The protocol every streamnb model follows (see the module docstring).

    >>> from streamnb.models import make_model
    >>> a, b = make_model("bernoulli"), make_model("bernoulli")
    >>> a.learn_one({"hello": 1}, "ham")
    >>> b.learn_one({"prize": 1}, "spam")
    >>> both = a + b
    >>> both.classes, both.n_updates, (both - b).to_state() == a.to_state()
    (['ham', 'spam'], 2, True)
    """

    kind: ClassVar[str]
    numeric_input: ClassVar[bool]
    _OPTIONS: ClassVar[tuple[str, ...]]  # constructor options, as saved in the state
    #: The decision option (docs/models.md, "The decision"): label -> a constant added to that
    #: class's log-posterior before the most probable class is chosen. Not a statistic: the
    #: probabilities and the counts are those of the model without it.
    class_offsets: Mapping[str, float] = MappingProxyType({})

    # -- what subclasses provide ------------------------------------------------------------
    def learn_one(self, x, y: str) -> None:
        raise NotImplementedError

    def unlearn_one(self, x, y: str) -> None:
        raise NotImplementedError

    def predict_log_proba_one(self, x) -> dict[str, float]:
        raise NotImplementedError

    def merge(self, other: Model) -> Model:
        """Add ``other``'s statistics to this model (in place) and return it."""
        return self._combine(other, +1)

    def subtract(self, other: Model) -> Model:
        """Remove ``other``'s statistics from this model (in place) and return it."""
        return self._combine(other, -1)

    def _combine(self, other: Model, sign: int) -> Model:
        raise NotImplementedError

    def to_state(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Model:
        raise NotImplementedError

    # -- shared behaviour -------------------------------------------------------------------
    @classmethod
    def _empty_from_state(cls, state: Mapping[str, Any]):
        """A new, empty model with the options of ``state`` (header and options checked)."""
        options = check_header(state, cls.kind)
        unknown = set(options) - set(cls._OPTIONS)
        if unknown:
            raise StateError(f"corrupt state: unknown options {sorted(unknown)}")
        try:
            return cls(**options)
        except ValueError as error:
            raise StateError(f"corrupt state: {error}") from None

    def predict_proba_one(self, x) -> dict[str, float]:
        return probabilities_of(self.predict_log_proba_one(x))

    def predict_one(self, x) -> str | None:
        return self.decide(self.predict_log_proba_one(x))

    def decide(self, log_proba: Mapping[str, float]) -> str | None:
        """The predicted label of a prediction ``log_proba`` (label -> log P(label | x)): the
        class c of highest log P(c | x) + ``class_offsets[c]`` (0 for a class without one),
        which without offsets is the most probable class. Ties go to the first class in sorted
        order, so the answer never depends on history. None for an empty prediction.

        For two classes an offset b on spam labels a message spam when P(spam | x) >
        1 / (1 + e^b): b = -1 asks for P(spam) > 0.731, b = ln(1/9) for P(spam) > 0.9.

        >>> from streamnb.models import MultinomialNB
        >>> strict = MultinomialNB(class_offsets={"spam": -1.0})
        >>> import math
        >>> odds_2 = {"ham": math.log(1 / 3), "spam": math.log(2 / 3)}   # P(spam) = 2/3
        >>> MultinomialNB().decide(odds_2), strict.decide(odds_2)
        ('spam', 'ham')
        """
        if not log_proba:
            return None
        offsets = self.class_offsets
        if not offsets:
            return max(sorted(log_proba), key=log_proba.__getitem__)
        get = offsets.get
        return first_best({label: lp + get(label, 0.0) for label, lp in log_proba.items()})

    def decide_proba(self, proba: Mapping[str, float]) -> str | None:
        """:meth:`decide` of probabilities (``predict_proba_one``'s, the daemon's): their logs,
        a probability that underflowed to 0 counting as log 0 = -inf."""
        offsets = self.class_offsets
        if not offsets:
            return first_best(proba)
        # first_best written out: the daemon labels every message with it
        log, get = math.log, offsets.get
        best, top = None, -math.inf
        for label, p in proba.items():
            score = (log(p) if p > 0 else -math.inf) + get(label, 0.0)
            if best is None or score > top or (score == top and label < best):
                best, top = label, score
        return best

    def learn_many(self, X: Iterable, ys: Iterable[str]) -> None:
        X, ys = list(X), list(ys)
        if len(X) != len(ys):
            raise ModelInputError(f"learn_many got {len(X)} inputs but {len(ys)} labels")
        for x, y in zip(X, ys, strict=True):
            self.learn_one(x, y)

    def unlearn_many(self, X: Iterable, ys: Iterable[str]) -> None:
        X, ys = list(X), list(ys)
        if len(X) != len(ys):
            raise ModelInputError(f"unlearn_many got {len(X)} inputs but {len(ys)} labels")
        for x, y in zip(X, ys, strict=True):
            self.unlearn_one(x, y)

    def prequential_many(self, xs: Iterable, ys: Iterable[str | None]
                         ) -> list[dict[str, float]]:
        """:meth:`prequential_log_proba_many` as probabilities: ``proba_i`` is what
        ``predict_proba_one(xs[i])`` returns after every earlier labelled pair was learned
        (each class's exp of its log-probability, 0.0 where it underflows).

        >>> from streamnb.models import make_model
        >>> model = make_model("bernoulli")
        >>> probas = model.prequential_many([{"win": 1}, {"hi": 1}, {"win": 1}],
        ...                                 ["spam", "ham", None])
        >>> probas[0], probas[1], model.n_updates
        ({}, {'spam': 1.0}, 2)
        >>> probas[2]["spam"] > 0.5
        True
        """
        log_probas = self.prequential_log_proba_many(xs, ys)
        # Each dict becomes its probabilities in place: a second dict for each message makes
        # the cyclic collector run (and walk the model's row lists) more often.
        exp = math.exp
        for log_proba in log_probas:
            for label, lp in log_proba.items():
                log_proba[label] = exp(lp)
        return log_probas

    def prequential_log_proba_many(self, xs: Iterable, ys: Iterable[str | None]
                                   ) -> list[dict[str, float]]:
        """Predict each input, then learn it if it is labelled, in order: a stream's step.

        ``ys[i]`` is a label or None (unlabelled). ``log_proba_i`` is what
        ``predict_log_proba_one(xs[i])`` returns after every earlier labelled pair was
        learned: log P(class | x) of every class known then, in a new dict the caller may
        change; afterwards the model has learned all of them. This is the loop the daemon
        would run per message; a model may do it faster (:class:`MultinomialNB` vectorises
        it) as long as it returns what the loop returns. The inputs are checked first
        (``_check_examples``), so a rejected one raises the error ``learn_one`` would, before
        anything is learned.

        >>> from streamnb.models import make_model
        >>> model = make_model("bernoulli")
        >>> log_probas = model.prequential_log_proba_many([{"win": 1}, {"hi": 1}],
        ...                                               ["spam", "ham"])
        >>> log_probas, model.classes
        ([{}, {'spam': 0.0}], ['ham', 'spam'])
        """
        xs, ys = list(xs), list(ys)
        if len(xs) != len(ys):
            raise ModelInputError(f"prequential_many got {len(xs)} inputs but {len(ys)} labels")
        self._check_examples(xs, ys)
        return self._prequential_loop(xs, ys)

    def _prequential_loop(self, xs: list, ys: list) -> list[dict[str, float]]:
        """:meth:`prequential_log_proba_many` on checked inputs, one message at a time."""
        log_probas = []
        for x, y in zip(xs, ys, strict=True):
            log_probas.append(self.predict_log_proba_one(x))
            if y is not None:
                self.learn_one(x, y)
        return log_probas

    def _check_examples(self, xs: list, ys: list) -> None:
        """Raise the error predicting then learning these examples in turn would raise first;
        a model checks what it can without changing anything (the labels, at least)."""
        for y in ys:
            if y is not None:
                check_label(y)

    def predict_log_proba_many(self, X: Iterable) -> list[dict[str, float]]:
        return [self.predict_log_proba_one(x) for x in X]

    def predict_proba_many(self, X: Iterable) -> list[dict[str, float]]:
        return [self.predict_proba_one(x) for x in X]

    def predict_many(self, X: Iterable) -> list[str | None]:
        return [self.predict_one(x) for x in X]

    def copy(self) -> Model:
        return copy.deepcopy(self)

    def __iadd__(self, other: Model) -> Model:
        return self.merge(other)

    def __isub__(self, other: Model) -> Model:
        return self.subtract(other)

    def __add__(self, other: Model) -> Model:
        return self.copy().merge(other)

    def __sub__(self, other: Model) -> Model:
        return self.copy().subtract(other)

    def _check_same_kind(self, other: Any, *options: str) -> None:
        if type(other) is not type(self):
            raise TypeError(f"cannot combine {type(self).__name__} with {type(other).__name__}")
        for name in options:
            if getattr(self, name) != getattr(other, name):
                raise ValueError(
                    f"cannot combine {type(self).__name__} models with different {name!r}: "
                    f"{getattr(self, name)!r} != {getattr(other, name)!r}"
                )
