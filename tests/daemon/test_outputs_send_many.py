"""The daemon hands a run's predictions, and a commit's changelog records of a slice, to the
producer with one ``send_many`` call each (``KafkaIO.send_many``, a batch at a time), not a
``send`` a record; a prediction too large for the output topic is still dead-lettered."""

from __future__ import annotations

import orjson

from streamnb.config import ModelSettings
from streamnb.daemon import build_daemon
from tests.daemon.fakes import FakeIO, FakeKafka, RecordingMetrics, drain, settings_for


def message(msg_id: str, text: str, label: str | None = None) -> bytes:
    body = {"id": msg_id, "text": text}
    if label is not None:
        body["label"] = label
    return orjson.dumps(body)


class CountingIO(FakeIO):
    calls: list[tuple] = []

    def send(self, topic, key, value, headers=None, partition=None):
        self.calls.append(("send", topic))
        super().send(topic, key, value, headers, partition)

    def send_many(self, topic, records, partition=None):
        self.calls.append(("send_many", topic, len(records)))
        for record in records:
            FakeIO.send(self, topic, *record, partition=partition)


def run(tmp_path, values, max_record_bytes=1048588):
    kafka = FakeKafka({"in": 1})
    for value in values:
        kafka.append("in", value)
    settings = settings_for(tmp_path, model=ModelSettings(kind="multinomial",
                                                           labels=("ham", "spam")))
    CountingIO.calls = []

    def io_factory(on_assigned, on_revoked):
        return CountingIO(kafka, settings.kafka, on_assigned, on_revoked, batch=500,
                          max_record_bytes=max_record_bytes)

    daemon = build_daemon(settings, metrics=RecordingMetrics(), io_factory=io_factory)
    drain(daemon)
    daemon.checkpoint("test")
    return kafka, daemon, CountingIO.calls


def test_a_runs_predictions_go_with_one_call_and_a_slices_changelog_with_one_each(tmp_path):
    values = [message(f"m{i}", "win cash now" if i % 2 else "lunch at noon",
                      None if i % 4 == 0 else ("spam" if i % 2 else "ham")) for i in range(200)]
    kafka, daemon, calls = run(tmp_path, values)
    out, changelog = daemon.settings.kafka.output_topic, daemon.io.changelogs["in"]
    assert [c for c in calls if c[1] == out] == [("send_many", out, 50)]
    assert [orjson.loads(r.value)["id"] for r in kafka.all(out)] == [
        f"m{i}" for i in range(0, 200, 4)]
    to_changelog = [c for c in calls if c[1] == changelog]
    assert to_changelog and all(c[0] == "send_many" for c in to_changelog)
    assert sum(c[2] for c in to_changelog) == len(kafka.all(changelog))
    assert not [c for c in calls if c[0] == "send"]


def test_a_prediction_too_large_is_dead_lettered_and_the_runs_others_sent_in_order(tmp_path):
    big_id = "x" * 3000  # the prediction carries the id twice (key and body)
    values = [message("a", "win cash", "spam"), message("b", "win cash"),
              message(big_id, "win cash"), message("c", "win cash")]
    kafka, daemon, calls = run(tmp_path, values, max_record_bytes=4000)
    out = daemon.settings.kafka.output_topic
    assert [orjson.loads(r.value)["id"] for r in kafka.all(out)] == ["b", "c"]
    (dead,) = kafka.all(daemon.settings.kafka.dead_letter_topic)
    assert dict(dead.headers)["streamnb.reason"] == b"output_too_large"
    assert [c for c in calls if c[1] == out] == [("send_many", out, 2)]
    assert daemon.offsets == {"in:0": 4}
