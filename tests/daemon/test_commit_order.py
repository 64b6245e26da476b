"""A commit sends the feedback store's changelog records before the model's (the producer
flushes the large ones while the expiry and the pages are made), and its changelog still
restores the live slices."""

from __future__ import annotations

import orjson

from streamnb.config import CheckpointSettings, ModelSettings
from streamnb.daemon import build_daemon
from streamnb.daemon.changelog import apply_records, changelog_topic
from streamnb.daemon.feedback import FeedbackStore
from streamnb.models import make_model
from tests.daemon.fakes import FakeIO, FakeKafka, drain, settings_for


def test_each_commit_sends_the_store_first_and_the_log_restores_the_expired_slice(tmp_path):
    kafka = FakeKafka({"in": 1})
    for i in range(300):
        text = " ".join(f"t{i % 40}x{j}" for j in range(30))
        label = None if i % 2 else ("spam" if i % 3 else "ham")
        kafka.append("in", orjson.dumps({"id": f"m{i}", "text": text, "label": label}))
    model = ModelSettings(kind="multinomial", labels=("ham", "spam"), max_tokens=500,
                          expiry_floor=0)
    settings = settings_for(tmp_path, model=model,
                            checkpoint=CheckpointSettings(every_messages=50,
                                                          every_seconds=3600.0))
    commits: list[list[str]] = []

    def io_factory(on_assigned, on_revoked):
        io = FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=25)
        commit = io.commit

        def recording(offsets):
            commits.append([orjson.loads(key)[1] for topic, key, *_ in io.outbox
                            if topic.endswith("changelog")])
            return commit(offsets)

        io.commit = recording
        return io

    daemon = build_daemon(settings, io_factory=io_factory)
    drain(daemon)
    daemon.checkpoint("test")
    commits = [kinds for kinds in commits if kinds]  # the last: nothing left to commit
    assert len(commits) >= 6
    for kinds in commits:
        store_kinds = [k for k in kinds if k in ("entries", "feedback")]
        assert store_kinds and kinds[:len(store_kinds)] == store_kinds  # the store's first
        assert "page" in kinds[len(store_kinds):]  # then the model's
    live = daemon.parts.slices["in:0"]
    assert 0 < live.model.vocabulary_size <= 500  # the budget was enforced at the commits
    restored = make_model("multinomial", **live.model.options())
    store = FeedbackStore(max_ids=1000)
    restored.track_last_seen()
    log = kafka.topics[changelog_topic("streamnb", "in")][0]
    apply_records(restored, store, "in:0", [(r.key, r.value) for r in log])
    assert restored.to_state() == live.model.to_state()
    store.order_by_arrival()
    assert orjson.dumps(store.to_state()["entries"]) == orjson.dumps(
        live.store.to_state()["entries"])
