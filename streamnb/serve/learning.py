"""Learns over HTTP become labelled records on the input topic.

A ``/learnspam`` does not touch a model: it writes ``{"id", "raw_b64", "label"}`` to the input
topic, keyed by the mail's id (:func:`streamnb.serve.rspamd.message_id`), and answers once
Kafka acknowledged the record (``acks=all``, idempotent producer). The group then learns it
exactly once, like any labelled record: the same mail learned again with the other class is a
correction (unlearn, learn), with the same class a duplicate, both by its id. Every daemon's
checks see it after its owner's next commit.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import orjson

from streamnb.config import KafkaSettings

__all__ = ["KafkaLearner", "LearnTooLarge", "learn_record"]

log = logging.getLogger("streamnb.serve")


class LearnTooLarge(ValueError):
    """A mail whose labelled record would not fit the input topic's records."""


def learn_record(mid: str, raw: bytes, label: str, max_value_bytes: int) -> bytes:
    """The input record that teaches ``raw`` as ``label``.

    >>> orjson.loads(learn_record("m1", b"Subject: hi", "ham", 1000))
    {'id': 'm1', 'raw_b64': 'U3ViamVjdDogaGk=', 'label': 'ham'}
    """
    value = orjson.dumps({"id": mid, "raw_b64": base64.b64encode(raw).decode("ascii"),
                          "label": label})
    if len(value) > max_value_bytes:
        raise LearnTooLarge(f"the labelled record would take {len(value)} bytes; the input "
                            f"topic takes {max_value_bytes} (limits.max_value_bytes)")
    return value


class KafkaLearner:
    """The producer of learns: idempotent, ``acks=all``, to ``topic``."""

    def __init__(self, settings: KafkaSettings, topic: str, max_value_bytes: int):
        from streamnb.daemon.kafka_io import learn_producer

        self.topic = topic
        self.max_value_bytes = max_value_bytes
        self.producer = learn_producer(settings, max_value_bytes)
        # The topic's metadata now, so that no learn's send waits for it on the event loop.
        self.producer.partitions_for(topic)

    async def learn(self, mid: str, raw: bytes, label: str) -> Any:
        """Write the labelled record; returns its record metadata once Kafka acknowledged
        it. Raises :class:`LearnTooLarge`, or Kafka's error."""
        value = learn_record(mid, raw, label, self.max_value_bytes)
        loop = asyncio.get_running_loop()
        acknowledged: asyncio.Future = loop.create_future()

        def settle(result: Any, error: BaseException | None = None) -> None:
            if acknowledged.done():
                return
            if error is None:
                acknowledged.set_result(result)
            else:
                acknowledged.set_exception(error)

        sent = self.producer.send(self.topic, key=mid.encode("utf-8", "surrogatepass"),
                                  value=value)
        sent.add_callback(lambda metadata: loop.call_soon_threadsafe(settle, metadata))
        sent.add_errback(lambda error: loop.call_soon_threadsafe(settle, None, error))
        return await acknowledged

    def close(self, timeout: float = 5.0) -> None:
        self.producer.close(timeout=timeout)
