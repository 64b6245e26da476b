"""Gaussian Discriminant Analysis: class priors, class means and one pooled covariance.

The MLE of the notes: φ_c = n_c / m, μ_c = mean of class c, and
Σ = (1/m) Σ_i (x⁽ⁱ⁾ − μ_{y⁽ⁱ⁾})(x⁽ⁱ⁾ − μ_{y⁽ⁱ⁾})ᵀ = Σ_c S_c / m, with S_c the scatter of class c.
A vector scores log φ_c + log N(x; μ_c, Σ); with one shared Σ that is the linear function
x·Σ⁻¹μ_c − ½ μ_c·Σ⁻¹μ_c + log φ_c (the terms common to every class cancel).

Statistics are per-class *shifted sums*: n_c, s_c = Σ (x − K_c) and P_c = Σ (x − K_c)(x − K_c)ᵀ,
with K_c the first vector the class saw. Then μ_c = K_c + s_c / n_c and S_c = P_c − s_c s_cᵀ / n_c.
Unlike running means, shifted sums form a group: learning adds, unlearning subtracts, merging
adds (after moving one shift onto the other), and a partial slice may even hold negative counts —
while the shift near the data keeps them as accurate as Welford's updates. They are floats, so
learn-then-unlearn and merges in another order agree to rounding (~1e-12 relative), not bit for bit.

``covariance`` picks the model: ``"pooled"`` (the GDA/LDA of the notes), ``"per_class"`` (QDA:
Σ_c = S_c / n_c) or ``"diagonal"`` (Gaussian Naive Bayes: per-class variances).
``shrinkage`` λ ∈ [0, 1] always uses (1 − λ)Σ + λ (tr Σ / d) I. If the covariance is singular
(fewer messages than features, or a constant feature) a ridge ``ridge × (tr Σ / d) × I`` is added
(multiplied by 10 until Σ factors); :attr:`GDA.regularized` and :meth:`GDA.explain` say so.
Prediction solves with a Cholesky factor; it never forms Σ⁻¹.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from streamnb.models._base import (
    STATE_VERSION,
    Model,
    ModelInputError,
    StateError,
    check_class_offsets,
    check_label,
    check_positive,
    json_numbers,
    log_normalise,
    state_array,
)
from streamnb.models._keyed import KeyedWholeModel

__all__ = ["GDA"]

COVARIANCES = ("pooled", "per_class", "diagonal")
#: A pivot this small relative to its variance means the feature is (numerically) a linear
#: combination of the others: Σ is treated as singular.
_PIVOT_TOLERANCE = 1e-12
# A mean variance below this is numerically zero: the ridge is scaled from it instead, so a
# far point's Mahalanobis distance stays finite (a ridge of 1e-9 × 5e-324 is no ridge at all).
_RIDGE_SCALE_FLOOR = 1e-100


class GDA(KeyedWholeModel, Model):
    """Gaussian Discriminant Analysis over numeric vectors (any number of classes).

    >>> model = GDA()
    >>> for x, y in [([1.0, 2.0], "a"), ([2.0, 1.0], "a"), ([5.0, 6.0], "b"), ([6.0, 5.0], "b")]:
    ...     model.learn_one(x, y)
    >>> model.means()["a"]
    [1.5, 1.5]
    >>> model.covariance()          # Σ_c S_c / m = 2 * [[.5, -.5], [-.5, .5]] / 4
    [[0.25, -0.25], [-0.25, 0.25]]
    >>> model.predict_one([1.0, 1.0]), model.regularized   # Σ is singular: ridge used
    ('a', True)
    """

    kind: ClassVar[str] = "gda"
    numeric_input: ClassVar[bool] = True
    _OPTIONS: ClassVar[tuple[str, ...]] = ("covariance", "shrinkage", "ridge", "class_offsets")

    def __init__(self, covariance: str = "pooled", *, shrinkage: float = 0.0,
                 ridge: float = 1e-6, class_offsets: Mapping[str, float] | None = None):
        if covariance not in COVARIANCES:
            raise ValueError(f"option 'covariance' must be one of {COVARIANCES}, "
                             f"got {covariance!r}")
        self.covariance_type = covariance
        self.shrinkage = check_positive("shrinkage", shrinkage, allow_zero=True)
        if self.shrinkage > 1:
            raise ValueError(f"option 'shrinkage' must be in [0, 1], got {shrinkage!r}")
        self.ridge = check_positive("ridge", ridge)
        self.class_offsets = check_class_offsets(class_offsets)  # the decision (Model.decide)
        self.n_features: int | None = None
        self._labels: list[str] = []
        self._column: dict[str, int] = {}
        self._n = np.zeros(0)
        self._shift = np.zeros((0, 0))
        self._sum = np.zeros((0, 0))
        self._outer = np.zeros((0, 0, 0))
        self._fit: dict[str, Any] | None = None

    def options(self) -> dict[str, Any]:
        options = {"covariance": self.covariance_type, "shrinkage": self.shrinkage,
                   "ridge": self.ridge}
        if self.class_offsets:  # listed only when set: the state it had before offsets
            options["class_offsets"] = dict(self.class_offsets)
        return options

    def __repr__(self) -> str:
        offsets = f", class_offsets={self.class_offsets!r}" if self.class_offsets else ""
        return f"GDA(covariance={self.covariance_type!r}, shrinkage={self.shrinkage!r}, " \
               f"ridge={self.ridge!r}{offsets})"

    # -- introspection ----------------------------------------------------------------------
    @property
    def classes(self) -> list[str]:
        return [self._labels[c] for c in self._active_columns()]

    @property
    def n_updates(self) -> int:
        return int(round(self._n.sum()))

    def state_nbytes(self) -> int:
        d = self.n_features or 0
        return int(len(self._labels) * (1 + 2 * d + d * d) * 8)

    def _active_columns(self) -> np.ndarray:
        """Columns of classes with messages, in label order (so sums round the same way
        whatever order the classes arrived or were merged in)."""
        columns = np.flatnonzero(self._n > 0).tolist()
        return np.array(sorted(columns, key=self._labels.__getitem__), dtype=np.intp)

    def means(self) -> dict[str, list[float]]:
        """μ_c for every known class."""
        return {self._labels[c]: self._mean(c).tolist() for c in self._active_columns()}

    def _mean(self, column: int) -> np.ndarray:
        return self._shift[column] + self._sum[column] / self._n[column]

    def _scatter(self, column: int) -> np.ndarray:
        s = self._sum[column]
        return self._outer[column] - np.outer(s, s) / self._n[column]

    def covariance(self, label: str | None = None) -> list[list[float]]:
        """The MLE covariance before shrinkage or ridge: pooled, or of class ``label``."""
        columns = self._active_columns()
        if columns.size == 0:
            raise ValueError("no class has been learned yet")
        if label is not None:
            if label not in self._column or self._n[self._column[label]] <= 0:
                raise ValueError(f"unknown class {label!r}; known classes: {self.classes}")
            column = self._column[label]
            return (self._scatter(column) / self._n[column]).tolist()
        pooled = sum(self._scatter(c) for c in columns.tolist()) / self._n[columns].sum()
        return pooled.tolist()

    @property
    def regularized(self) -> bool:
        """Whether the last prediction's covariance needed the ridge to be invertible."""
        fit = self._fitted()
        return bool(fit and fit["ridge"] > 0)

    # -- inputs -----------------------------------------------------------------------------
    def _vector(self, x: Any) -> np.ndarray:
        if isinstance(x, Mapping | str | bytes):
            raise ModelInputError(f"GDA takes a numeric vector, got {type(x).__name__}")
        try:
            vector = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise ModelInputError("GDA takes a vector of numbers") from None
        if vector.ndim != 1:
            raise ModelInputError(f"GDA takes a 1-D vector, got shape {vector.shape}")
        if self.n_features is not None and vector.shape[0] != self.n_features:
            raise ModelInputError(
                f"expected {self.n_features} features, got {vector.shape[0]}")
        if not np.isfinite(vector).all():
            raise ModelInputError("features must be finite numbers")
        return vector

    def _check_examples(self, xs: list, ys: list) -> None:
        # The first labelled vector fixes the length of the others when none was learned yet.
        n_features = self.n_features
        for x, y in zip(xs, ys, strict=True):
            length = self._vector(x).shape[0]
            if n_features is not None and length != n_features:
                raise ModelInputError(f"expected {n_features} features, got {length}")
            if y is not None:
                check_label(y)
                n_features = length

    def _column_of(self, y: str, shift: np.ndarray) -> int:
        column = self._column.get(y)
        if column is None:
            column = len(self._labels)
            self._labels.append(y)
            self._column[y] = column
            d = shift.shape[0]
            self._n = np.append(self._n, 0.0)
            self._shift = np.vstack([self._shift.reshape(-1, d), shift[None, :]])
            self._sum = np.vstack([self._sum.reshape(-1, d), np.zeros((1, d))])
            self._outer = np.concatenate([self._outer.reshape(-1, d, d), np.zeros((1, d, d))])
        return column

    # -- learning ---------------------------------------------------------------------------
    def learn_one(self, x: Sequence[float], y: str) -> None:
        """Add the vector ``x`` to class ``y``."""
        self._update(x, y, 1.0)

    def unlearn_one(self, x: Sequence[float], y: str) -> None:
        """Undo ``learn_one(x, y)`` (a slice may go negative; only sums of slices are scored)."""
        self._update(x, y, -1.0)

    def _update(self, x: Sequence[float], y: str, sign: float) -> None:
        check_label(y)
        vector = self._vector(x)
        if self.n_features is None:
            self.n_features = vector.shape[0]
        column = self._column_of(y, vector)
        delta = vector - self._shift[column]
        self._n[column] += sign
        self._sum[column] += sign * delta
        self._outer[column] += sign * np.outer(delta, delta)
        self._fit = None
        self._note_change()

    def _combine(self, other: Model, sign: int) -> GDA:
        self._check_same_kind(other)
        assert isinstance(other, GDA)
        if other.n_features is None:
            return self
        if self.n_features is None:
            self.n_features = other.n_features
        elif self.n_features != other.n_features:
            raise ValueError(f"cannot combine GDA models over {self.n_features} and "
                             f"{other.n_features} features")
        for theirs, label in enumerate(other._labels):
            column = self._column_of(label, other._shift[theirs])
            n, s, outer = other._n[theirs], other._sum[theirs], other._outer[theirs]
            move = other._shift[theirs] - self._shift[column]
            if move.any():  # re-express the sums around this model's shift
                outer = outer + np.outer(s, move) + np.outer(move, s) + n * np.outer(move, move)
                s = s + n * move
            self._n[column] += sign * n
            self._sum[column] += sign * s
            self._outer[column] += sign * outer
        self._fit = None
        self._note_change()
        return self

    # -- scoring ----------------------------------------------------------------------------
    def _factor(self, sigma: np.ndarray) -> tuple[np.ndarray, float]:
        """Cholesky factor of Σ (plus the ridge it needed, 0.0 if none)."""
        d = sigma.shape[0]
        scale = float(np.trace(sigma)) / d
        if not scale > 0:
            scale = 1.0
        scale = max(scale, _RIDGE_SCALE_FLOOR)
        ridge = 0.0
        for _ in range(40):
            candidate = sigma + ridge * scale * np.eye(d) if ridge else sigma
            try:
                factor = np.linalg.cholesky(candidate)
            except np.linalg.LinAlgError:
                factor = None
            if factor is not None:
                pivots = np.diag(factor) ** 2
                if np.all(pivots >= _PIVOT_TOLERANCE * np.diag(candidate)):
                    return factor, ridge * scale
            ridge = self.ridge if ridge == 0 else ridge * 10
        raise ValueError("covariance cannot be regularised into a positive-definite matrix")

    def _shrink(self, sigma: np.ndarray) -> np.ndarray:
        if not self.shrinkage:
            return sigma
        d = sigma.shape[0]
        return (1 - self.shrinkage) * sigma + self.shrinkage * (np.trace(sigma) / d) * np.eye(d)

    def _fitted(self) -> dict[str, Any] | None:
        if self._fit is not None:
            return self._fit
        columns = self._active_columns()
        if columns.size == 0:
            return None
        n = self._n[columns]
        means = np.array([self._mean(c) for c in columns.tolist()])
        scatters = [self._scatter(c) for c in columns.tolist()]
        fit: dict[str, Any] = {"columns": columns, "means": means,
                               "log_prior": np.log(n) - math.log(n.sum())}
        if self.covariance_type == "pooled":
            sigma = self._shrink(sum(scatters) / n.sum())
            factor, ridge = self._factor(sigma)
            if ridge:
                sigma = sigma + ridge * np.eye(sigma.shape[0])
            # Σ⁻¹ μ_cᵀ by one LU solve; the Cholesky factor above proved Σ positive definite
            solved = np.linalg.solve(sigma, means.T)
            fit["factors"] = [factor]
            fit["coef"] = solved
            fit["intercept"] = -0.5 * np.einsum("cd,dc->c", means, solved) + fit["log_prior"]
            fit["ridge"] = ridge
        elif self.covariance_type == "per_class":
            factors, ridges = [], []
            for scatter, count in zip(scatters, n.tolist(), strict=True):
                factor, ridge = self._factor(self._shrink(scatter / count))
                factors.append(factor)
                ridges.append(ridge)
            fit["factors"] = factors
            fit["log_det"] = np.array([2 * np.log(np.diag(f)).sum() for f in factors])
            fit["ridge"] = max(ridges)
        else:
            variances = np.array([np.diag(s) / c for s, c in zip(scatters, n.tolist(),
                                                                   strict=True)])
            if self.shrinkage:
                mean_var = variances.mean(axis=1, keepdims=True)
                variances = (1 - self.shrinkage) * variances + self.shrinkage * mean_var
            ridge = 0.0
            if (variances <= 0).any():
                positive = variances[variances > 0]
                scale = float(positive.mean()) if positive.size else 1.0
                ridge = self.ridge * scale
                variances = variances + ridge
            fit["variances"] = variances
            fit["ridge"] = ridge
        self._fit = fit
        return fit

    def _scores(self, vector: np.ndarray, fit: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Per-class log joint scores (up to a shared constant) and Mahalanobis distances²."""
        means = fit["means"]
        if self.covariance_type == "pooled":
            scores = vector @ fit["coef"] + fit["intercept"]
            return scores, np.empty(0)
        if self.covariance_type == "per_class":
            distances = np.array([
                np.sum(np.linalg.solve(f, vector - mu) ** 2)
                for f, mu in zip(fit["factors"], means, strict=True)])
            return fit["log_prior"] - 0.5 * (fit["log_det"] + distances), distances
        variances = fit["variances"]
        distances = (((vector - means) ** 2) / variances).sum(axis=1)
        log_det = np.log(variances).sum(axis=1)
        return fit["log_prior"] - 0.5 * (log_det + distances), distances

    def predict_log_proba_one(self, x: Sequence[float]) -> dict[str, float]:
        """log P(class | x) under the Gaussian class densities ({} before any class)."""
        vector = self._vector(x)
        fit = self._fitted()
        if fit is None:
            return {}
        scores, _ = self._scores(vector, fit)
        labels = (self._labels[c] for c in fit["columns"].tolist())
        return log_normalise(dict(zip(labels, scores.tolist(), strict=True)))

    def explain(self, x: Sequence[float]) -> dict[str, Any]:
        """Prediction, log-probabilities, squared Mahalanobis distance to each class mean, and
        whether (and how much) ridge was added to make the covariance invertible."""
        vector = self._vector(x)
        fit = self._fitted()
        if fit is None:
            return {"prediction": None, "log_proba": {}, "mahalanobis": {},
                    "regularized": False, "ridge": 0.0}
        scores, distances = self._scores(vector, fit)
        labels = [self._labels[c] for c in fit["columns"].tolist()]
        if self.covariance_type == "pooled":
            factor = fit["factors"][0]
            distances = np.array([np.sum(np.linalg.solve(factor, vector - mu) ** 2)
                                  for mu in fit["means"]])
        log_proba = log_normalise(dict(zip(labels, scores.tolist(), strict=True)))
        return {
            "prediction": self.decide(log_proba),
            "log_proba": log_proba,
            "mahalanobis": dict(zip(labels, distances.tolist(), strict=True)),
            "regularized": fit["ridge"] > 0,
            "ridge": float(fit["ridge"]),
        }

    # -- state ------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """A JSON-compatible snapshot (classes sorted, all-zero classes dropped)."""
        columns = [c for c in range(len(self._labels))
                   if self._n[c] != 0 or self._sum[c].any() or self._outer[c].any()]
        columns.sort(key=self._labels.__getitem__)
        return {
            "model": self.kind,
            "version": STATE_VERSION,
            "options": self.options(),
            "n_features": self.n_features,
            "classes": [self._labels[c] for c in columns],
            "n": json_numbers(self._n[columns]),
            "shift": [self._shift[c].tolist() for c in columns],
            "sum": [self._sum[c].tolist() for c in columns],
            "outer": [self._outer[c].tolist() for c in columns],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> GDA:
        """Rebuild a model from :meth:`to_state`'s output; raises StateError if it is unusable."""
        model = cls._empty_from_state(state)
        classes = state.get("classes")
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes) \
                or len(set(classes)) != len(classes):
            raise StateError("corrupt state: 'classes' must be a list of distinct str")
        d = state.get("n_features")
        if d is None:
            if classes:
                raise StateError("corrupt state: classes without 'n_features'")
            return model
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise StateError(f"corrupt state: 'n_features' must be an int >= 1, got {d!r}")
        k = len(classes)
        n = state_array(state, "n", (k,))
        shift = state_array(state, "shift", (k, d))
        sums = state_array(state, "sum", (k, d))
        outer = state_array(state, "outer", (k, d, d))
        model.n_features = d
        model._labels = list(classes)
        model._column = {label: i for i, label in enumerate(classes)}
        model._n, model._shift, model._sum, model._outer = n, shift, sums, outer
        return model
