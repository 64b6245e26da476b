"""The preparer (decode and featurize ahead of the model): the child process gives what the
in-process one gives, and a dead or orphaned child is noticed or ends by itself."""

from __future__ import annotations

import base64
import itertools
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streamnb.config import load_settings
from streamnb.daemon.prepare import (
    DECODE_ERROR,
    FEEDBACK,
    MESSAGE,
    REJECTED,
    InProcessPreparer,
    NumberedCounts,
    PreparerError,
    ProcessPreparer,
    _without_token_counts,
    prepare_value,
    with_token_counts,
)
from streamnb.pipeline import build_pipeline
from tests.conftest import REPO
from tests.daemon.fakes import FakeKafka, WordPipeline, make_daemon, settings_for
from tests.features.token_digests import sample
from tests.processes import running

pytestmark = pytest.mark.timeout(120)

MAX_VALUE_BYTES = 2000

POISON = [
    b"not json",
    b"\xff\xfe garbage",
    b"[1, 2]",
    b'{"id": "p1", "label": "spam"}',  # missing body
    b'{"id": "p2", "tokens": "not a list"}',
    b'{"id": "p3", "tokens": ["fine", 3]}',
    b'{"id": "p4", "features": [1.0, 2.0]}',  # a vector for a text model
    b'{"id": "p5", "text": "a", "tokens": ["a"]}',
    b'{"type": "feedback", "id": "sms-1", "label": "ham"}',
    b'{"type": "feedback", "id": "sms-1"}',
    None,  # a tombstone
    orjson.dumps({"id": "big", "text": "x" * MAX_VALUE_BYTES}),  # not sent to the child
    b'{"id": 7, "tokens": ["already", "tokenized"], "label": "ham"}',
    b'{"text": "no id: the default one is used"}',
]


def sms_values(data_dir: Path) -> list[bytes]:
    lines = (data_dir / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8")
    values = []
    for i, line in enumerate(lines.splitlines()):
        label, text = line.split("\t", 1)
        obj = {"id": f"sms-{i}", "text": text}
        if i % 5:
            obj["label"] = label
        values.append(orjson.dumps(obj))
    return values


def default_pipeline_args():
    settings = load_settings(text="", environ={})
    model = {"kind": settings.model.kind, **settings.model.options}
    return model, dict(settings.features)


def ids(values):
    return [f"in:0:{offset}" for offset in range(len(values))]


def as_dicts(results):
    return [with_token_counts(result) for result in results]


def assert_numbers_are_the_counts(from_child, expected, numbering=None):
    """Every message's token counts came as numbers too: in the daemon's copy of the child's
    numbering (``numbering``, or with several children each part's), its tokens and counts
    in the dict's order."""
    messages = [(got, want) for got, want in zip(from_child, expected, strict=True)
                if want and want[0] == MESSAGE]
    assert messages and all(type(got[3]) is NumberedCounts for got, _ in messages)
    for got, want in messages:
        poll = got[3].poll
        if numbering is not None:
            assert poll.numbering is numbering
        numbers, counts, lengths = poll.arrays([got[3]])
        assert lengths.tolist() == [len(want[3])]
        assert [poll.numbering.tokens[n] for n in numbers.tolist()] == list(want[3])
        assert counts.tolist() == list(want[3].values())


def test_the_child_gives_what_the_in_process_preparer_gives_over_sms_and_poison(data_dir):
    args = default_pipeline_args()
    values = sms_values(data_dir)
    values = values[:1000] + POISON + values[1000:]
    here = InProcessPreparer(build_pipeline(*args), MAX_VALUE_BYTES)
    expected = here.results(here.submit(values, ids(values)))
    child = ProcessPreparer(build_pipeline, args, MAX_VALUE_BYTES)
    try:
        # Two batches submitted before either is collected: large enough to fill the pipe in
        # both directions if both ends wrote at once.
        first = child.submit(values, ids(values))
        second = child.submit(values[::-1], ids(values)[::-1])
        assert as_dicts(child.results(second)) == expected[::-1]
        from_child = child.results(first)
        assert as_dicts(from_child) == expected
        # token counts come back in the order the featurizer gave them (float sums follow it)
        assert [list(r[3].items()) for r in as_dicts(from_child) if r and r[0] == MESSAGE] == (
            [list(r[3].items()) for r in expected if r and r[0] == MESSAGE])
        assert_numbers_are_the_counts(from_child, expected, *child.numberings)
        for start in range(0, len(values), 500):  # as the daemon submits: one poll at a time
            chunk = values[start:start + 500]
            assert as_dicts(child.results(child.submit(chunk, ids(values)[start:start + 500]))
                            ) == expected[start:start + 500]
    finally:
        child.close()
    kinds = {result[0] if result else None for result in expected}
    assert kinds == {DECODE_ERROR, FEEDBACK, MESSAGE, REJECTED, None}
    poison = dict(zip(POISON, expected[1000:1000 + len(POISON)], strict=True))
    assert poison[b'{"id": "p2", "tokens": "not a list"}'] == (
        DECODE_ERROR, "bad_body", "tokens must be a list of strings")
    assert poison[None] == (DECODE_ERROR, "empty_value", "the record has no value (tombstone)")
    assert poison[b'{"id": "p4", "features": [1.0, 2.0]}'][:4] == (
        REJECTED, "p4", None, "wrong_body")
    assert poison[b'{"type": "feedback", "id": "sms-1", "label": "ham"}'] == (
        FEEDBACK, "sms-1", "ham")
    assert poison[b'{"text": "no id: the default one is used"}'][1] == (
        f"in:0:{1000 + len(POISON) - 1}")


def test_several_children_share_each_batch_in_order(data_dir):
    """Three children, each given a consecutive part of every batch and numbering its own
    tokens: the results are the in-process preparer's in the batch's order, for batches of
    every size (smaller than the number of children too), two in flight at once."""
    args = default_pipeline_args()
    values = sms_values(data_dir)[:1500] + POISON
    here = InProcessPreparer(build_pipeline(*args), MAX_VALUE_BYTES)
    expected = here.results(here.submit(values, ids(values)))
    children = ProcessPreparer(build_pipeline, args, MAX_VALUE_BYTES, processes=3)
    try:
        assert len(set(children.pids)) == 3 and children.pid == children.pids[0]
        first = children.submit(values, ids(values))
        second = children.submit(values[:2], ids(values)[:2])
        assert as_dicts(children.results(second)) == expected[:2]
        from_children = children.results(first)
        assert as_dicts(from_children) == expected
        assert_numbers_are_the_counts(from_children, expected)
        polls = {id(r[3].poll) for r in from_children if r and r[0] == MESSAGE}
        assert len(polls) == 3  # one numbered part per child
        offsets = [0, 1, 2, 7, 40, 499, 500, 501, 1000, len(values)]
        for start, stop in itertools.pairwise(offsets):
            got = children.results(children.submit(values[start:stop], ids(values)[start:stop]))
            assert as_dicts(got) == expected[start:stop]
    finally:
        children.close()
    assert all(not process.is_alive() for process in (c.process for c in children._children))


def test_a_preparer_needs_one_process_at_least():
    with pytest.raises(ValueError, match="at least one process"):
        ProcessPreparer(WordPipeline, (), MAX_VALUE_BYTES, processes=0)


def spamassassin_values(data_dir: Path) -> list[bytes]:
    """The token digests' sample of SpamAssassin (every 20th mail) as ``raw_b64`` records,
    every other one labelled."""
    records = [{"id": member, "raw_b64": base64.b64encode(raw).decode()}
               for member, raw in sample(data_dir, "spamassassin")]
    for record in records[1::2]:
        record["label"] = "spam" if record["id"].startswith("spam") else "ham"
    return [orjson.dumps(record) for record in records]


def test_mail_from_the_child_is_the_in_process_result_carried_as_its_json(data_dir):
    """The featurizer's token counts (a ``Counter``) cross the pipe as their ``x_json`` and
    their token numbers, never pickled: a pickled ``Counter`` is rebuilt through Python's
    ``Counter.update``, which cost the daemon more a mail than featurizing it in its own
    process."""
    args = default_pipeline_args()
    values = spamassassin_values(data_dir)
    here = InProcessPreparer(build_pipeline(*args), 1 << 20)
    expected = here.results(here.submit(values, ids(values)))
    assert all(type(r[3]) is Counter for r in expected if r[0] == MESSAGE)
    assert b"Counter" not in pickle.dumps(_without_token_counts(expected))
    child = ProcessPreparer(build_pipeline, args, 1 << 20)
    try:
        from_child = child.results(child.submit(values, ids(values)))
    finally:
        child.close()
    assert as_dicts(from_child) == expected
    assert [list(r[3].items()) for r in as_dicts(from_child) if r[0] == MESSAGE] == (
        [list(r[3].items()) for r in expected if r[0] == MESSAGE])
    assert_numbers_are_the_counts(from_child, expected, *child.numberings)
    assert sum(r[0] == MESSAGE for r in expected) == len(values)


def test_the_daemons_own_prepare_gives_the_preparers_result_with_the_records_place_as_id(
        tmp_path):
    """The loop's in-process path decodes without a default id first, and again with the
    record's place only when the id is missing or unusable: the same result as decoding with
    it at once, for every kind of id."""
    values = [*POISON[:-2], b'{"text": "no id"}', b'{"id": null, "text": "null id"}',
              b'{"id": "", "text": "empty id"}', b'{"id": 7, "text": "a number"}',
              b'{"id": true, "text": "a bool"}', b'{"type": "feedback", "label": "ham"}',
              b'{"id": "ok", "text": "fine", "label": "spam"}']
    kafka = FakeKafka({"in": 1})
    records = [kafka.append("in", value) for value in values]
    daemon = make_daemon(settings_for(tmp_path), kafka)
    for record in records:
        assert daemon._prepare(record) == prepare_value(
            daemon.pipeline, record.value, f"in:0:{record.offset}"), record.value
    assert daemon._prepare(records[-7])[1] == f"in:0:{records[-7].offset}"


def test_a_featurizer_error_travels_as_its_reason_and_detail():
    child = ProcessPreparer(WordPipeline, (), MAX_VALUE_BYTES)
    try:
        [result] = child.results(child.submit([b'{"id": "c", "text": "CRASH"}'], ["in:0:0"]))
    finally:
        child.close()
    assert result == (REJECTED, "c", None, "parse_error", "featurizer cannot read this")


def test_a_child_that_cannot_build_its_pipeline_fails_the_start():
    with pytest.raises(PreparerError, match="could not start.*unknown model kind|model"):
        ProcessPreparer(build_pipeline, ({"kind": "no-such-model"}, {}), MAX_VALUE_BYTES)


def test_a_killed_child_makes_the_next_results_raise_an_error_naming_it():
    child = ProcessPreparer(WordPipeline, (), MAX_VALUE_BYTES)
    try:
        os.kill(child.pid, signal.SIGKILL)
        with pytest.raises(PreparerError, match=rf"prepare process .*pid {child.pid}.*ended"):
            child.results(child.submit([b'{"id": "a", "text": "hi"}'], ["in:0:0"]))
    finally:
        child.close()


def test_a_stuck_child_makes_results_raise_after_the_timeout():
    child = ProcessPreparer(WordPipeline, (), MAX_VALUE_BYTES, timeout=1.0)
    try:
        os.kill(child.pid, signal.SIGSTOP)  # alive, but never answers
        ticket = child.submit([b'{"id": "a", "text": "hi"}'], ["in:0:0"])
        started = time.monotonic()
        with pytest.raises(PreparerError, match=r"did not prepare a batch within 1 s"):
            child.results(ticket)
        assert time.monotonic() - started < 10
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.close()


def test_the_time_waited_for_the_children_is_counted_from_the_submit_on():
    """``waited_seconds`` (the daemon's ``streamnb_prepare_wait_seconds_total``) holds the
    time :meth:`results` blocked until a child's answer began to arrive: a child held for a
    second costs about a second; the start-up wait and a ready answer cost nothing."""
    children = ProcessPreparer(WordPipeline, (), MAX_VALUE_BYTES, processes=2)
    try:
        assert children.waited_seconds == 0.0
        values = [b'{"id": "a", "text": "hi"}', b'{"id": "b", "text": "ho"}']
        ready = children.submit(values, ["in:0:0", "in:0:1"])
        time.sleep(1.0)  # both answers are in the pipes by now
        children.results(ready)
        assert children.waited_seconds < 0.2
        os.kill(children.pids[1], signal.SIGSTOP)
        ticket = children.submit(values, ["in:0:0", "in:0:1"])
        threading.Timer(1.0, os.kill, (children.pids[1], signal.SIGCONT)).start()
        assert [r[1] for r in children.results(ticket)] == ["a", "b"]
        assert 0.9 < children.waited_seconds < 3.0
    finally:
        os.kill(children.pids[1], signal.SIGCONT)
        children.close()


def test_the_child_ignores_sigterm_and_ends_when_its_pipe_closes():
    child = ProcessPreparer(WordPipeline, (), MAX_VALUE_BYTES)
    pid = child.pid
    try:
        os.kill(pid, signal.SIGTERM)  # a supervisor signalling the whole process group
        time.sleep(0.5)  # long enough for a default SIGTERM handler to have ended it
        assert running(pid), "the prepare process ended on SIGTERM instead of its daemon"
        [result] = child.results(child.submit([b'{"id": "a", "text": "hi"}'], ["in:0:0"]))
        assert result[0] == MESSAGE
    finally:
        child.close()
    assert not running(pid)
    assert [c.process.exitcode for c in child._children] == [0]


def test_the_child_ends_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from streamnb.daemon.prepare import ProcessPreparer\n"
        "from tests.daemon.fakes import WordPipeline\n"
        "if __name__ == '__main__':\n"
        "    child = ProcessPreparer(WordPipeline, (), 100)\n"
        "    print(child.pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        pid = int(parent.stdout.readline())
        assert running(pid)
    finally:
        parent.kill()
        parent.wait(10)
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid), "the prepare process outlived its killed parent"


def test_a_program_that_never_closes_its_preparer_still_exits(tmp_path):
    # multiprocessing joins its children at exit and the child ignores SIGTERM: without its
    # pipe closed at exit, a daemon that failed after starting the child would hang here.
    script = tmp_path / "forget.py"
    script.write_text(
        "from streamnb.daemon.prepare import ProcessPreparer\n"
        "from tests.daemon.fakes import WordPipeline\n"
        "if __name__ == '__main__':\n"
        "    child = ProcessPreparer(WordPipeline, (), 100)\n"
        "    child.submit([b'{}'], ['in:0:0'])\n"
        "    raise SystemExit(5)\n"
    )
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 5
