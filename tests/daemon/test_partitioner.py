"""The daemon's producer partitioner chooses kafka-python's default partition for every record."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from streamnb.config import KafkaSettings
from streamnb.daemon.kafka_io import (
    KeyHashPartitioner,
    murmur2,
    producer_config,
    transactional_producer_config,
)


class Cluster:
    """The part of kafka-python's ClusterMetadata the partitioners read."""

    def __init__(self, partitions: dict[str, set[int]], available: dict[str, set[int]]):
        self.partitions, self.available = partitions, available

    def topics(self, exclude_internal_topics=True):
        return set(self.partitions)

    def partitions_for_topic(self, topic):
        return set(self.partitions[topic]) if topic in self.partitions else None

    def available_partitions_for_topic(self, topic):
        return set(self.available[topic]) if topic in self.available else None


@given(st.binary(max_size=300))
@settings(max_examples=2000)
def test_murmur2_is_the_java_clients_hash_as_kafka_python_computes_it(data):
    assert murmur2(data) == kafka_python_murmur2(data)
    assert murmur2(bytearray(data)) == kafka_python_murmur2(data)


@given(
    key=st.binary(max_size=120),
    partitions=st.sets(st.integers(0, 200), min_size=1, max_size=40),
)
@settings(max_examples=1000)
def test_a_keyed_record_goes_where_the_default_partitioner_sends_it(key, partitions):
    cluster = Cluster({"out": partitions}, {"out": partitions})
    ours = KeyHashPartitioner().partition("out", key, key, b"v", b"v", cluster)
    theirs = DefaultPartitioner().partition("out", key, key, b"v", b"v", cluster)
    assert ours == theirs
    if len(partitions) == 1:
        assert ours == next(iter(partitions))


def test_a_record_without_a_key_goes_to_a_random_available_partition():
    cluster = Cluster({"out": {0, 1, 2, 3}}, {"out": {1, 3}})
    random.seed(3)
    chosen = {KeyHashPartitioner().partition("out", None, None, b"v", b"v", cluster)
              for _ in range(200)}
    assert chosen == {1, 3}


def test_every_producer_of_the_daemon_uses_it():
    settings_ = KafkaSettings()
    assert isinstance(producer_config(settings_)["partitioner"], KeyHashPartitioner)
    assert isinstance(transactional_producer_config(settings_, "t")["partitioner"],
                      KeyHashPartitioner)
