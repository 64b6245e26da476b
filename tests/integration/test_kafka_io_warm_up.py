"""The transactional producer learns at start-up what its first prediction and its first
commit would otherwise wait for (the real broker)."""

from __future__ import annotations

import contextlib
import logging
import time

import pytest

from streamnb.daemon.changelog import changelog_topic
from streamnb.daemon.kafka_io import KafkaIO, create_topics, ensure_changelogs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


class _NoWatchdog:
    def guard(self, what):
        return contextlib.nullcontext()


def _kafka_io(kafka_bootstrap: str, topic_prefix: str, with_output: bool = True,
              **kafka_settings) -> KafkaIO:
    from streamnb.config import KafkaSettings

    topic, group = f"{topic_prefix}-in", f"{topic_prefix}-group"
    topics = {topic: 1, f"{topic_prefix}-dlq": 1}
    if with_output:
        topics[f"{topic_prefix}-out"] = 1
    create_topics(kafka_bootstrap, topics)
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, input_topics=(topic,),
                             output_topic=f"{topic_prefix}-out",
                             dead_letter_topic=f"{topic_prefix}-dlq", group_id=group,
                             **kafka_settings)
    changelogs = {topic: changelog_topic(group, topic)}
    ensure_changelogs(settings, changelogs)
    return KafkaIO(settings, lambda tps: None, lambda tps, lost: None, changelogs,
                   f"{group}-warm-up", _NoWatchdog())


def test_the_first_commit_finds_the_group_coordinator_known(kafka_bootstrap, topic_prefix,
                                                             caplog):
    io = _kafka_io(kafka_bootstrap, topic_prefix)
    try:
        deadline = time.monotonic() + 10
        while not io.group_coordinator_known() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert io.group_coordinator_known()
        # The output and changelog topics' partitions are known: a send does not wait.
        for topic in (io.settings.output_topic, *io.changelogs.values()):
            assert io.producer._metadata.partitions_for_topic(topic) == {0}
        with caplog.at_level(logging.DEBUG, logger="kafka.producer"):
            io.send(io.settings.output_topic, b"k", b"v")
            io.commit({(f"{topic_prefix}-in", 0): 0})
        lookups = [r for r in caplog.records if "FindCoordinatorRequest" in r.getMessage()]
        assert not lookups, lookups[0].getMessage()
    finally:
        io.close()


def test_a_missing_output_topic_is_not_created_at_start_up(kafka_bootstrap, topic_prefix):
    io = _kafka_io(kafka_bootstrap, topic_prefix, with_output=False)
    try:
        assert io.producer._metadata.partitions_for_topic(io.settings.output_topic) is None
        assert io.settings.output_topic not in io.consumer.topics()
        assert io.settings.dead_letter_topic in io.consumer.topics()
    finally:
        io.close()
