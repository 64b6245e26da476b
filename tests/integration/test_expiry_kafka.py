"""Token expiry on the real broker: the owner of a slice expires at commit time, the tombstones
go out in the same transaction, and what the changelog holds is the live slice, within budget."""

from __future__ import annotations

import random
import threading

import orjson
import pytest

from streamnb.config import load_settings
from streamnb.daemon.changelog import apply_records, page_pairs
from streamnb.daemon.feedback import FeedbackStore
from streamnb.daemon.kafka_io import create_topics, end_offsets, produce
from streamnb.daemon.loop import build_daemon
from streamnb.pipeline import build_pipeline
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

BUDGET = 400
PARTITIONS = 2


def changelog_slices(bootstrap: str, prefix: str) -> tuple[dict, int]:
    """Each partition's slice as the changelog holds it (a stamped model), and how many
    tokens its token pages listed that the slice no longer holds (expired)."""
    by_partition = changelog_records(bootstrap, prefix)
    slices = {}
    gone = 0
    for p, items in sorted(by_partition.items()):
        part = build_pipeline({"kind": "multinomial"}, {}).model
        part.track_last_seen()
        apply_records(part, FeedbackStore(), f"{prefix}-in:{p}", items)
        slices[f"{prefix}-in:{p}"] = part
        listed = {token for key, v in items if v is not None and b'"page"' in key
                  for token, _ in page_pairs(orjson.loads(v))}
        gone += len(listed - {key[1] for key in part.stat_keys() if key[0] == "token"})
    return slices, gone


def test_slices_over_budget_expire_at_commit_and_the_changelog_equals_them(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir
):
    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": PARTITIONS, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    path = write_config(tmp_path, kafka_bootstrap, topic_prefix, every_messages=100,
                        every_seconds=0.2)
    text = path.read_text().replace("[model]\n", f"[model]\nmax_tokens = {BUDGET}\n"
                                                 "expiry_floor = 0\n")
    path.write_text(text)
    settings = load_settings(path)
    rows = sms(data_dir)[:1500]
    rng = random.Random(15)
    stream = []
    for i, (msg_id, label, body) in enumerate(rows):
        stream.append((msg_id.encode(), value(msg_id, body, label)))
        if i > 200 and rng.random() < 0.05:  # a correction of an old message: after expiry
            old_id, old_label, _ = rows[rng.randrange(i // 2)]
            stream.append((old_id.encode(), feedback(old_id, "ham" if old_label == "spam"
                                                     else "spam")))
    produce(kafka_bootstrap, f"{topic_prefix}-in", stream)
    ends = end_offsets(kafka_bootstrap, f"{topic_prefix}-in")
    want = {f"{t}:{p}": off for (t, p), off in ends.items()}

    daemon = build_daemon(settings)
    runner = threading.Thread(target=daemon.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: committed(kafka_bootstrap, topic_prefix) == want, 120,
                 "the daemon to commit every input record")
    finally:
        daemon.request_stop()
        runner.join(60)
    assert not runner.is_alive()

    restored, expired = changelog_slices(kafka_bootstrap, topic_prefix)
    live_slices = {key: part.model for key, part in daemon.parts.slices.items()}
    assert set(restored) == set(live_slices)
    assert expired > 0, "no token was expired: the test did not exercise expiry"
    total = build_pipeline({"kind": "multinomial"}, {}).model
    for key, model in live_slices.items():
        assert model.tracks_last_seen
        assert model.vocabulary_size <= BUDGET
        assert restored[key].to_state() == model.to_state()
        assert min(min(c, default=0) for c in model.to_state()["counts"]) >= 0
        total += model
    # The global model is the sum of the slices (expiry and relabels followed exactly).
    assert daemon.live.to_state() == total.to_state()
