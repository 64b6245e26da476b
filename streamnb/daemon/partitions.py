"""Every input partition's slice, owned or read from the changelog, and the global model.

The sufficient statistics are additive, so the state is kept per input partition: a *slice*
is what was learned from one partition (a model) plus that partition's feedback store. A daemon
holds every slice: those of the partitions the group assigned to it (*owned*: it learns into
them and writes their changed keys to the changelog) and all the others (*remote*: kept up to
date from the changelog, which their owners write). The model that predicts, ``live``, is the
sum of every slice, so every daemon of a group predicts with the same model, up to the remote
slices' lag (about one commit interval of their owners).

``live`` follows a remote slice's records by adding each key's change (new value minus old),
which is exact: counts are integers in float64. A model whose statistics are one key (GDA) is
re-summed instead.

>>> from streamnb.models import make_model
>>> parts = Partitions(lambda: make_model("bernoulli"), lambda key: FeedbackStore())
>>> mine, theirs = parts.slice("mail:0"), parts.slice("mail:1")
>>> parts.own("mail:0")
>>> parts.learn("mail:0", {"win": 1}, "spam")
>>> other = make_model("bernoulli"); other.learn_one({"hi": 1}, "ham")
>>> from streamnb.daemon.changelog import all_records
>>> parts.apply_remote("mail:1", all_records(other, FeedbackStore()))
2
>>> parts.live.n_updates, sorted(parts.live.classes)
(2, ['ham', 'spam'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamnb.daemon.changelog import ChangelogError, apply_records
from streamnb.daemon.feedback import FeedbackStore
from streamnb.models._keyed import MODEL_KEY, TOTALS_KEY, replace_part

__all__ = ["TP", "Partitions", "Slice", "slice_key", "tp_of"]

TP = tuple[str, int]


def slice_key(tp: TP) -> str:
    """The key of a partition's slice (topic names cannot contain ``:``).

    >>> slice_key(("mail", 3)), tp_of("mail:3")
    ('mail:3', ('mail', 3))
    """
    return f"{tp[0]}:{tp[1]}"


def tp_of(key: str) -> TP:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


@dataclass(slots=True)
class Slice:
    key: str
    model: Any
    store: FeedbackStore | None  # None: a standby's slice, which never learns from feedback
    owned: bool = False
    #: Whether this daemon has written the slice's identity record since it took it over.
    identified: bool = False


class Partitions:
    """The slices by key (``"topic:partition"``) and ``live``, their sum."""

    def __init__(self, new_model: Callable[[], Any],
                 new_store: Callable[[str], FeedbackStore | None],
                 new_live: Callable[[], Any] | None = None):
        self.new_model = new_model
        self.new_store = new_store
        # The sum of several slices needs no last-seen stamps (only a slice's owner expires).
        self.new_live = new_live or new_model
        self.slices: dict[str, Slice] = {}
        self.live: Any = self.new_live()

    def slice(self, key: str) -> Slice:
        """The slice of ``key``, created empty (and remote) the first time."""
        part = self.slices.get(key)
        if part is None:
            part = self.slices[key] = Slice(key, self.new_model(), self.new_store(key))
            part.model.mark_changes()
            if part.store is not None:
                part.store.mark_changes()
            self._resum()
        return part

    @property
    def owned(self) -> dict[str, Slice]:
        return {key: part for key, part in self.slices.items() if part.owned}

    def own(self, key: str) -> None:
        """Start learning into ``key``'s slice: what it holds is committed, so it is unchanged."""
        part = self.slice(key)
        part.owned = True
        part.identified = False
        part.model.mark_changes()
        part.store.mark_changes()

    def disown(self, key: str) -> None:
        part = self.slices.get(key)
        if part is not None:
            part.owned = False

    def reset(self, key: str) -> None:
        """Forget ``key``'s slice (it held uncommitted changes); it is read again from its
        changelog."""
        self.slices.pop(key, None)
        self._resum()

    def learn(self, key: str, x: Any, label: str, unlearn: bool = False,
              learned_at: int | None = None) -> int | None:
        """Add (or remove) one labelled input to an owned slice and to ``live``; with decay,
        ``learned_at`` is the slice clock the message was learned at (see ``learn_one``).
        Returns the slice's decay clock after the step (None without decay)."""
        model = self.slices[key].model
        if getattr(model, "half_life", None) is not None:
            self._learn_decayed(model, x, label, unlearn, learned_at)
            return model.decay_clock
        if unlearn and getattr(model, "tracks_last_seen", False):
            # What expiry left of it, so that live (a sum of slices) loses the same counts.
            x = model.unlearnable_part(x, label)
        step = "unlearn_one" if unlearn else "learn_one"
        getattr(model, step)(x, label)
        if self.live is not model:
            getattr(self.live, step)(x, label)

    def _learn_decayed(self, model: Any, x: Any, label: str, unlearn: bool,
                       learned_at: int | None) -> None:
        """The slice takes the step; ``live`` (a sum of slices, at the latest slice clock)
        follows the keys it changed, converted between the two models' units."""
        step = model.unlearn_one if unlearn else model.learn_one
        live = self.live
        if live is model:
            step(x, label, learned_at=learned_at)
            return
        keys = [*model.token_keys(x), TOTALS_KEY]
        old_clock = model.decay_clock
        before = [model.stat_value(k) for k in keys]
        step(x, label, learned_at=learned_at)
        live.add_slice_change({k: (old, model.stat_value(k)) for k, old in zip(
            keys, before, strict=True)}, old_clock, model.decay_clock)

    def expire(self, key: str, max_tokens: int, keep: int) -> int:
        """Expire tokens of the owned slice ``key`` if it holds more than ``max_tokens``
        (``TextModel.expire``), and take the same counts out of ``live``; the slice's
        changed keys then hold the tombstones. Returns how many tokens were expired."""
        model = self.slices[key].model
        before = model.expire(max_tokens, keep, old_values=self.live is not model)
        if before and self.live is not model and getattr(model, "half_life", None) is not None:
            clock = model.decay_clock
            self.live.add_slice_change({k: (old, model.stat_value(k)) for k, old in
                                        before.items()}, clock, clock)
        elif before and self.live is not model:
            live = self.live
            live.set_stat_values({k: replace_part(k, live.stat_value(k), old, model.stat_value(k))
                                  for k, old in before.items()})
        return max(len(before) - 1, 0)  # the totals key is not a token

    def apply_remote(self, key: str, records: list, follow: bool = True) -> int:
        """Apply changelog records of a slice this daemon does not own (in log order).

        ``follow=False`` leaves ``live`` behind (a restore of every slice, which re-sums once
        at the end with :meth:`resum`: half the work of following each record)."""
        part = self.slice(key)
        if part.owned:
            raise ChangelogError(
                f"changelog records for {key}, a partition this daemon owns: another writer "
                "(a zombie?) committed to its changelog"
            )
        whole = [False]

        def follow_live(changes: dict) -> None:
            if not follow or self.live is part.model:
                return
            if MODEL_KEY in changes:
                whole[0] = True
                return
            live = self.live
            if getattr(live, "half_life", None) is not None:
                old_clock = part.model.decay_clock  # changes come before the slice is set
                totals = changes.get(TOTALS_KEY, (None, None))[1] or {}
                live.add_slice_change(changes, old_clock, totals.get("decay_clock", old_clock))
                return
            live.set_stat_values({key: replace_part(key, live.stat_value(key), old, new)
                                  for key, (old, new) in changes.items()})

        count = apply_records(part.model, part.store, key, records, f"changelog of {key}",
                              on_stat=follow_live)
        if part.store is not None:
            part.store.order_by_arrival()
        if whole[0] and follow:
            self._resum()
        return count

    def resum(self) -> None:
        """Make ``live`` the sum of the slices again."""
        self._resum()

    def _resum(self) -> None:
        models = [part.model for part in self.slices.values()]
        if len(models) == 1:
            # One partition in all: its slice *is* the global model, learned once.
            (self.live,) = models
            return
        live = self.new_live()
        for model in models:
            live += model
        self.live = live
