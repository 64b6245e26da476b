"""bench.prepare_floor: its forms give the same counts, and the daemon's read of numbers is
the C read's batch on every poll of the stream it measures."""

import pytest

from bench.bench_daemon import _featurized_stream
from bench.prepare_floor import FORMS, prepare_polls, round_of
from streamnb.models import _prequential as prequential

pytestmark = pytest.mark.skipif(not prequential.native(), reason="the C step is not built")


def test_the_read_of_numbers_is_the_c_read_on_every_poll_of_sms():
    # prepare_polls steps the model through the stream and stops at a poll that differs
    polls, numbering = prepare_polls(_featurized_stream("sms"))
    assert len(polls) > 10 and numbering > 0


def test_the_numbers_rebuild_each_message_in_its_order():
    stream = _featurized_stream("sms")[:1200]
    polls, _ = prepare_polls(stream)
    tokens = [token for poll in polls for token in poll["new"]]
    rebuilt = []
    for poll in polls:
        numbers, counts, at = poll["numbers"].tolist(), poll["counts"].tolist(), 0
        for length in poll["lengths"].tolist():
            rebuilt.append([(tokens[n], c) for n, c in zip(numbers[at:at + length],
                                                         counts[at:at + length], strict=True)])
            at += length
    assert rebuilt == [list(x.items()) for x, _ in stream]


def test_a_round_times_every_form():
    polls, _ = prepare_polls(_featurized_stream("sms")[:1000])
    cpu = round_of(polls, FORMS)
    assert set(cpu) == set(FORMS) and all(figure > 0 for figure in cpu.values())
