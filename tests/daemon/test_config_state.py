"""Settings and the feedback store: what an operator and a restart rely on."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamnb.config import ConfigError, load_settings
from streamnb.daemon.feedback import FeedbackStore, decide

REPO = Path(__file__).resolve().parents[2]


def test_the_documented_example_config_loads(tmp_path):
    settings = load_settings(REPO / "config.toml", environ={})
    assert settings.kafka.input_topics == ("streamnb-input",)
    assert settings.model.kind == "multinomial"
    assert settings.model.labels == ("ham", "spam")
    assert settings.checkpoint.every_seconds == 1.0
    assert settings.kafka.transactional_id == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[checkpoint]\nevery_messages = -3\n",
         "checkpoint.every_messages must be a positive integer, got -3"),
        ("[checkpoint]\nevery_seconds = 'soon'\n",
         "checkpoint.every_seconds must be a positive number, got 'soon'"),
        ("[kafka]\nbootstrap = 'x'\n", "unknown key kafka.bootstrap"),
        ("[kafak]\n", "unknown table [kafak]"),
        ("[kafka]\ninput_topics = []\n", "kafka.input_topics must be a non-empty list"),
        ("[kafka]\nstart_offset = 'middle'\n", "kafka.start_offset must be one of"),
        ("[kafka]\nassignment_strategy = 'cooperative'\n",
         "kafka.assignment_strategy must be one of 'range', 'roundrobin', 'sticky', "
         "'cooperative-sticky', got 'cooperative'"),
        ("[metrics]\nport = 70000\n", "metrics.port must be a port number"),
        ("[logging]\nformat = 'xml'\n", "logging.format must be one of 'plain', 'json'"),
        ("[kafka]\noutput_topic = 'streamnb-input'\n", "must be different topics"),
        ("[model]\nlabels = ['a', 'a']\n", "model.labels must be a list without duplicates"),
        ("[kafka]\nproducer_process = true\n", "unknown key kafka.producer_process"),
        ("[checkpoint]\npath = 'var/ckpt.json'\n", "unknown key checkpoint.path"),
        ("[kafka]\nchangelog_replication_factor = 0\n",
         "kafka.changelog_replication_factor must be -1 (the broker's default) or a positive"),
        ("[kafka]\ntransaction_timeout_ms = 'long'\n",
         "kafka.transaction_timeout_ms must be a positive integer"),
        ("[kafka]\nmax_partition_fetch_bytes = 0\n",
         "kafka.max_partition_fetch_bytes must be a positive integer, got 0"),
        ("[pipeline]\nprepare_process = 1\n",
         "pipeline.prepare_process must be true or false, got 1"),
        ("[pipeline]\nprepare_processes = 0\n",
         "pipeline.prepare_processes must be a positive integer, got 0"),
        ("[pipeline]\nprocess = true\n", "unknown key pipeline.process"),
        ("[checkpoint\n", "not valid TOML"),
    ],
)
def test_a_bad_value_fails_at_start_naming_the_key(text, message):
    with pytest.raises(ConfigError, match="^config: ") as info:
        load_settings(text=text, environ={})
    assert message in str(info.value)


def test_environment_overrides_every_level():
    env = {
        "STREAMNB_KAFKA__BOOTSTRAP_SERVERS": "kafka:29092",
        "STREAMNB_KAFKA__INPUT_TOPICS": "a, b",
        "STREAMNB_CHECKPOINT__EVERY_MESSAGES": "50",
        "STREAMNB_MODEL__OPTIONS__ALPHA": "0.5",
        "STREAMNB_MODEL__LABELS": '["x", "y", "z"]',
        "OTHER_VARIABLE": "ignored",
    }
    settings = load_settings(text="[model.options]\nalpha = 1.0\n", environ=env)
    assert settings.kafka.bootstrap_servers == "kafka:29092"
    assert settings.kafka.input_topics == ("a", "b")
    assert settings.checkpoint.every_messages == 50
    assert settings.model.options == {"alpha": 0.5}
    assert settings.model.labels == ("x", "y", "z")
    with pytest.raises(ConfigError, match="checkpoint.every_messages must be a positive integer"):
        load_settings(text="", environ={"STREAMNB_CHECKPOINT__EVERY_MESSAGES": "0"})


def test_the_prepare_process_is_off_by_default_and_the_environment_turns_it_on():
    assert load_settings(text="", environ={}).pipeline.prepare_process is False
    env = {"STREAMNB_PIPELINE__PREPARE_PROCESS": "true"}
    assert load_settings(text="", environ=env).pipeline.prepare_process is True
    with pytest.raises(ConfigError, match="pipeline.prepare_process must be true or false"):
        load_settings(text="", environ={"STREAMNB_PIPELINE__PREPARE_PROCESS": "off"})
    assert load_settings(text="", environ={}).pipeline.prepare_processes == 1
    env = {"STREAMNB_PIPELINE__PREPARE_PROCESSES": "3"}
    assert load_settings(text="", environ=env).pipeline.prepare_processes == 3


@given(
    st.lists(
        st.tuples(
            st.sampled_from([f"m{i}" for i in range(30)]),
            st.dictionaries(st.text(min_size=1, max_size=5), st.integers(1, 9), max_size=4),
            st.sampled_from([None, "ham", "spam"]),
        ),
        max_size=60,
    ),
    st.integers(1, 10),
)
def test_feedback_store_stays_bounded_and_survives_a_round_trip(items, max_ids):
    store = FeedbackStore(max_ids=max_ids, max_bytes=3000)
    for msg_id, x, label in items:
        store.remember(msg_id, "in:0", x, label)
        assert len(store) <= max_ids
        assert store.nbytes <= 3000 or len(store) == 1
        assert store.get(msg_id).x == x and store.get(msg_id).label == label
    saved = orjson.loads(orjson.dumps(store.to_state()))  # as the checkpoint file holds it
    again = FeedbackStore.from_state(saved, max_ids=max_ids, max_bytes=3000)
    assert orjson.dumps(again.to_state()) == orjson.dumps(store.to_state())
    assert again.nbytes == store.nbytes


def test_feedback_outcomes():
    store = FeedbackStore()
    assert decide(store.get("x"), "ham") == "unknown_id"
    store.remember("x", "in:0", {"a": 1}, "ham")
    assert decide(store.get("x"), "ham") == "duplicate"
    assert decide(store.get("x"), "spam") == "relabelled"


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "Cooperative-Sticky"])
def test_every_assignment_strategy_names_an_assignor_of_the_kafka_client(strategy):
    from streamnb.daemon.kafka_io import ASSIGNORS

    settings = load_settings(text=f"[kafka]\nassignment_strategy = '{strategy}'\n", environ={})
    assert ASSIGNORS[settings.kafka.assignment_strategy].name == strategy.lower()


def test_a_remembered_input_costs_about_its_own_length_in_memory():
    """orjson's output bytes carry an ~8 KiB buffer whatever their length; the store keeps
    exact-size copies, or 100,000 remembered SMS would hold 800 MiB (seen in a soak run)."""
    import tracemalloc

    from streamnb.daemon.changelog import apply_records, changed_records
    from streamnb.models import make_model

    x = {f"word{i}": 1 for i in range(20)}  # about 200 bytes of JSON
    store = FeedbackStore(max_ids=10_000, max_bytes=1 << 30)
    store.mark_changes()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(2000):
            store.remember(f"m{i}", "in:0", x, "spam")
        per_entry = (tracemalloc.get_traced_memory()[0] - before) / 2000
        restored = FeedbackStore(max_ids=10_000, max_bytes=1 << 30)
        empty = make_model("multinomial")
        empty.mark_changes()
        records = changed_records(empty, store)
        before = tracemalloc.get_traced_memory()[0]
        apply_records(make_model("multinomial"), restored, "in:0", records)
        per_restored = (tracemalloc.get_traced_memory()[0] - before) / 2000
    finally:
        tracemalloc.stop()
    assert len(restored) == 2000
    assert per_entry < 1500, f"{per_entry:.0f} bytes per remembered input"
    assert per_restored < 1500, f"{per_restored:.0f} bytes per restored input"
