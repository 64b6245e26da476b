"""The daemon benchmark times what it says: the first batch's processing is inside the clock,
and its streams are the ones it names."""

from __future__ import annotations

import os
import time

import pytest

import bench.bench_daemon as bench
from streamnb.daemon.processor import RecordProcessor
from tests.daemon.fakes import FakeIO, FakeKafka


def test_the_daemons_clock_starts_before_its_first_batch_is_processed(monkeypatch):
    values = bench.sms_values()[:1200]  # polls of 500 records
    kafka = FakeKafka({"sms": 1, "sms-out": 1, "sms-dlq": 1})
    for key, value, _ in values:
        kafka.append("sms", value, key=key, partition=0)
    build = bench.build_daemon

    def build_on_the_fake(settings, metrics):
        return build(settings, metrics=metrics, io_factory=lambda on_assigned, on_revoked:
                     FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=500))

    events: list[str] = []
    process = RecordProcessor.process

    def noted(self, records, prepared=None):
        events.append(f"process {len(records)}")
        return process(self, records, prepared)

    monkeypatch.setattr(bench, "build_daemon", build_on_the_fake)
    monkeypatch.setattr(RecordProcessor, "process", noted)
    seconds = bench.daemon_loop("127.0.0.1:1", "sms", len(values),
                                after_build=lambda: events.append("built"),
                                probe=events.append)
    assert events == ["built", "start", "process 500", "process 500", "process 200", "end"]
    assert seconds > 0


def test_more_sms_copies_repeat_the_stream_under_new_ids():
    one, three = bench.sms_values(), bench.sms_values(copies=3)
    assert three[:len(one)] == one
    assert len(three) == 3 * len(one)
    assert len({key for key, _, _ in three}) == len(three)
    assert [y for _, _, y in three[len(one):2 * len(one)]] == [y for _, _, y in one]


def test_the_steady_state_stream_is_the_sms_stream_ten_times_over():
    assert bench.STREAMS["sms-10x"]() == bench.sms_values(copies=bench.SMS_STEADY_COPIES)
    assert bench.SMS_STEADY_COPIES == 10


def test_the_labelled_share_sets_how_many_messages_carry_their_label(monkeypatch):
    def share(values):
        return sum(b'"label"' in value for _, value, _ in values) / len(values)

    assert 0.78 < share(bench.sms_values()) < 0.82  # the default, 0.8
    monkeypatch.setattr(bench, "LABELLED", 0.5)
    assert 0.48 < share(bench.sms_values()) < 0.52
    monkeypatch.setattr(bench, "LABELLED", 0.0)
    assert share(bench.sms_values()) == 0.0


def test_an_unknown_stream_or_share_is_refused_at_once(capsys):
    for argv in (["--streams", "sms,mms"], ["--latency-streams", "email"],
                 ["--labelled", "1.5"], ["--labelled", "0.5", "--streams", "mms"]):
        with pytest.raises(SystemExit) as exited:
            bench.main(argv)
        assert exited.value.code == 2
        assert argv[-1].split(",")[-1] in capsys.readouterr().err
        assert bench.LABELLED == bench.DEFAULT_LABELLED  # a refused line sets nothing


def test_a_baseline_is_compared_round_by_round_not_median_to_median():
    # a machine slowing down across the rounds: the medians (3 s against 4 s) make the daemon
    # 25% faster; round by round it took twice, once and half its baseline's time
    daemon = [(2.0, 0.0), (4.0, 0.0), (3.0, 0.0)]
    baseline = [(1.0, 0.0), (4.0, 0.0), (6.0, 0.0)]
    assert bench.round_ratio(daemon, baseline) == 1.0
    with pytest.raises(ValueError):
        bench.round_ratio(daemon, baseline[:2])


def test_other_contenders_run_before_the_daemon_every_other_round(monkeypatch, capsys):
    # the machine drifts within a round: a contender always timed after the daemon would
    # carry the drift as a difference between the two
    runs: list[str] = []

    def timed(what, bootstrap, topic, n, repo=bench.REPO, kafka_setting=""):
        runs.append(what if what == "bare" else kafka_setting or
                    ("baseline" if repo != bench.REPO else "daemon"))
        return 1.0 + len(runs) / 100, 0.5

    monkeypatch.setattr(bench, "in_child", timed)
    monkeypatch.setattr(bench, "create_topics", lambda *args, **kwargs: None)
    monkeypatch.setattr(bench, "produce", lambda *args, **kwargs: None)
    monkeypatch.setattr(bench.faulthandler, "register", lambda *args: None)
    monkeypatch.setattr(bench, "LABELLED", bench.LABELLED)  # main sets it from the command line
    assert bench.main(["--streams", "sms", "--rounds", "3", "--skip-latency", "--skip-memory",
                       "--baseline", "/elsewhere", "--kafka-setting", "linger"]) == 0
    assert runs == ["bare", "daemon", "linger", "baseline",
                    "bare", "baseline", "linger", "daemon",
                    "bare", "daemon", "linger", "baseline"]
    printed = capsys.readouterr().out
    assert "its time over the daemon's, round by round: median" in printed


def test_the_brokers_cpu_is_read_from_the_pid_file_kafka_sh_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMNB_KAFKA_RUN", str(tmp_path))
    assert bench.broker_pid("127.0.0.1:19092") is None  # no pid file: not reported
    (tmp_path / "kafka.pid").write_text(f"{os.getpid()}\n")
    assert bench.broker_pid("127.0.0.1:19092") == os.getpid()
    (tmp_path / "kafka.pid").write_text("999999999\n")  # a broker that is gone
    assert bench.broker_pid("127.0.0.1:19092") is None
    assert bench.broker_pid("127.0.0.1:19092", given=os.getpid()) == os.getpid()


def test_the_brokers_cpu_is_counted_per_record_around_each_contender():
    def busy():
        started = time.process_time()
        while time.process_time() - started < 0.2:
            pass
        return 1.0, 0.2

    watched = bench.BrokerCPU(os.getpid())  # this process stands in for the broker
    assert watched.timed("daemon", 1000, busy) == (1.0, 0.2)
    assert watched.timed("daemon", 1000, lambda: (1.0, 0.0)) == (1.0, 0.0)
    busy_round, idle_round = watched.per_record["daemon"]
    assert 150 <= busy_round <= 400 and idle_round < 50  # us a record: 0.2 s over 1,000
    assert "while the daemon ran" in watched.line({"daemon": "the daemon", "bare": "x"})
    assert bench.BrokerCPU(None).timed("daemon", 10, busy) == (1.0, 0.2)
    assert bench.BrokerCPU(None).line({"daemon": "the daemon"}) is None
