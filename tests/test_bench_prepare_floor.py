"""bench.prepare_floor's sketch of a read of token numbers gives the C read's batch."""

import numpy as np
import pytest

from bench.bench_daemon import _featurized_stream
from bench.prepare_floor import RowsOfNumbers, Vocabulary, _fresh_model, prepare_polls
from streamnb.models import _prequential as prequential

pytestmark = pytest.mark.skipif(not prequential.native(), reason="the C step is not built")


def test_the_child_numbering_rebuilds_each_message_in_its_order():
    stream = _featurized_stream("sms")[:2000]
    child, daemon = Vocabulary(), RowsOfNumbers()
    for x, _ in stream:
        numbers, counts, new = child.encode(x)
        daemon.extend(new)
        rebuilt = dict(zip((daemon.tokens[n] for n in numbers), counts.tolist(), strict=True))
        assert list(rebuilt.items()) == list(x.items())


def test_the_rows_sketch_is_the_c_read_on_every_poll_of_sms():
    # prepare_polls steps the model through the stream and stops at a poll that differs
    polls, _ = prepare_polls(_featurized_stream("sms"))
    assert len(polls) > 10


def test_the_rows_sketch_numbers_a_labelled_messages_new_tokens_as_the_loop_does():
    stream = [({"a": 1, "b": 2}, None), ({"b": 1, "c": 3}, "ham"), ({"d": 1, "c": 1}, "spam")]
    polls, _ = prepare_polls(stream)
    model = _fresh_model()
    daemon = RowsOfNumbers()
    daemon.extend(polls[0]["new"])
    ids, values, lengths, distinct, rows, new_keys = daemon.batch(
        model, polls[0]["all_numbers"], polls[0]["all_counts"], polls[0]["lengths"],
        polls[0]["labelled"])
    assert distinct == ["a", "b", "c", "d"]
    assert rows.tolist() == [-1, 0, 1, 2]  # "a" only in the unlabelled message
    assert new_keys == ["b", "c", "d"]
    assert ids.tolist() == [0, 1, 1, 2, 3, 2]
    np.testing.assert_array_equal(values, [1, 2, 1, 3, 1, 1])
    assert lengths.tolist() == [2, 2, 2]
