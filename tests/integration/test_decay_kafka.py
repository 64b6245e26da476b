"""Decay on the real broker: a daemon with model.half_life_messages writes its decaying slices
to the changelog, and a daemon started again restores the same slices and global model, then
goes on learning (corrections of messages learned before the restart included)."""

from __future__ import annotations

import random
import threading

import pytest

from streamnb.config import load_settings
from streamnb.daemon.changelog import apply_records
from streamnb.daemon.feedback import FeedbackStore
from streamnb.daemon.kafka_io import create_topics, end_offsets, produce
from streamnb.daemon.loop import build_daemon
from streamnb.models import make_model
from streamnb.models.presets import resolve
from tests.integration.harness import (
    changelog_records,
    committed,
    feedback,
    sms,
    value,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 2
HALF_LIFE = 5  # a new epoch (every count rescaled, every key written) each 320 slice messages


def new_model():
    kind, options = resolve({"kind": "multinomial"})
    return make_model(kind, **options, half_life=HALF_LIFE)


def stream_of(rows, rng, start):
    out = []
    for i, (msg_id, label, body) in enumerate(rows):
        out.append((msg_id.encode(), value(msg_id, body, label)))
        if i > 50 and rng.random() < 0.05:  # a correction of an earlier message
            old_id, old_label, _ = rows[rng.randrange(i)] if start == 0 else rng.choice(rows)
            out.append((old_id.encode(), feedback(old_id, "ham" if old_label == "spam"
                                                  else "spam")))
    return out


def run_until_committed(settings, bootstrap, prefix):
    ends = end_offsets(bootstrap, f"{prefix}-in")
    want = {f"{t}:{p}": off for (t, p), off in ends.items()}
    daemon = build_daemon(settings)
    runner = threading.Thread(target=daemon.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: committed(bootstrap, prefix) == want, 120,
                 "the daemon to commit every input record")
    finally:
        daemon.request_stop()
        runner.join(60)
    assert not runner.is_alive()
    return daemon


def assert_same_scores(a, b, probes):
    for x in probes:
        pa, pb = a.predict_log_proba_one(x), b.predict_log_proba_one(x)
        assert pa.keys() == pb.keys()
        for label in pa:
            assert pa[label] == pytest.approx(pb[label], abs=1e-9)


def test_a_decaying_daemon_restores_its_model_from_the_changelog(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": PARTITIONS, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    path = write_config(tmp_path, kafka_bootstrap, topic_prefix, every_messages=100,
                        every_seconds=0.2)
    path.write_text(path.read_text().replace(
        "[model]\n", f"[model]\nhalf_life_messages = {HALF_LIFE}\n"))
    settings = load_settings(path)
    rows = sms(data_dir)[:1600]
    rng = random.Random(16)
    before, after = rows[:1200], rows[1200:]
    produce(kafka_bootstrap, f"{topic_prefix}-in", stream_of(before, rng, 0))
    first = run_until_committed(settings, kafka_bootstrap, topic_prefix)
    first_slices = {key: part.model for key, part in first.parts.slices.items()}
    assert all(model.half_life == HALF_LIFE for model in first_slices.values())
    assert max(m.decay_clock for m in first_slices.values()) > 64 * HALF_LIFE  # epochs passed
    probes = [{"free": 1, "call": 1, "now": 1}, {"see": 1, "you": 1, "later": 1}]

    # A daemon started again reads the changelog: the same slices, the same global model.
    again = build_daemon(settings)
    try:
        for key, model in first_slices.items():
            assert again.parts.slices[key].model.to_state() == model.to_state()
        assert_same_scores(again.live, first.live, probes)
        stores = {key: part.store for key, part in first.parts.slices.items()}
        for key, store in stores.items():
            clocks = {i: e.clock for i, e in store.items()}
            assert clocks == {i: e.clock for i, e in again.parts.slices[key].store.items()}
            assert any(c is not None for c in clocks.values())
    finally:
        again.close()

    # ... and goes on from there: new messages, corrections of messages from before.
    later = stream_of(after, rng, 1)
    later += [(i.encode(), feedback(i, "spam" if label == "ham" else "ham"))
              for i, label, _ in rng.sample(before, 20)]
    produce(kafka_bootstrap, f"{topic_prefix}-in", later)
    second = run_until_committed(settings, kafka_bootstrap, topic_prefix)
    total = new_model()
    for p, items in sorted(changelog_records(kafka_bootstrap, topic_prefix).items()):
        key = f"{topic_prefix}-in:{p}"
        restored = new_model()
        apply_records(restored, FeedbackStore(), key, items)
        # the counts: the live slice also holds last-seen stamps for the default token budget,
        # which the changelog does not carry
        live_state = second.parts.slices[key].model.to_state()
        live_state.pop("clock", None), live_state.pop("last_seen", None)
        assert restored.to_state() == live_state
        assert min(min(c, default=0) for c in restored.to_state()["counts"]) >= 0
        total += restored
    assert_same_scores(second.live, total, probes)
