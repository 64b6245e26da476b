"""The feedback store keeps each model input in the form the changelog carries: its JSON, or
from ``COMPRESS_FROM`` bytes of it on, that JSON compressed (``encode_x``/``decode_x``). A late
label must learn exactly the counts the message was featurized to, after a restart too, and a
changelog written before inputs were compressed must still read."""

from __future__ import annotations

import base64
import random
import statistics
import string

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.config import ModelSettings
from streamnb.daemon import build_daemon
from streamnb.daemon.changelog import FORMAT_VERSION, apply_records, changed_records
from streamnb.daemon.feedback import COMPRESS_FROM, FeedbackStore, decode_x, encode_x
from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.models import make_model
from streamnb.pipeline import build_pipeline
from tests.daemon.fakes import FakeIO, FakeKafka, drain, settings_for
from tests.features.token_digests import sample

tokens_ = st.text(min_size=1, max_size=30)
token_counts_ = st.dictionaries(tokens_, st.integers(1, 10**6), max_size=300)
vectors_ = st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=300)


@settings(max_examples=200, deadline=None)
@given(st.one_of(token_counts_, vectors_))
def test_an_input_reads_back_equal_and_in_its_order(x):
    stored = encode_x(x)
    back = decode_x(stored)
    assert back == x
    if isinstance(x, dict):
        assert list(back) == list(x)  # the model step reads tokens in the featurizer's order
    # whichever form it is in, the stored bytes are one JSON value, as a changelog run holds it
    assert orjson.loads(orjson.dumps([orjson.Fragment(stored)]))[0] is not None
    # and a reader that parsed that JSON keeps the same bytes (a restore stores no other form)
    assert encode_x(orjson.loads(stored)) == stored
    plain = orjson.dumps(x)
    assert len(stored) <= len(plain)  # the budget of max_bytes never buys fewer inputs
    if len(plain) < COMPRESS_FROM:
        assert stored == plain


def test_an_input_that_does_not_compress_is_stored_as_its_json():
    # 90 characters drawn at random: 6.5 bits a byte, which base64's 6 bits cannot beat
    alphabet = [c for c in string.printable if c not in '"\\' and not c.isspace()]
    rng = random.Random(7)
    random_tokens = {"".join(rng.choices(alphabet, k=100)): 1 for _ in range(50)}
    plain = orjson.dumps(random_tokens)
    assert len(plain) >= COMPRESS_FROM
    assert encode_x(random_tokens) == plain
    assert decode_x(encode_x(random_tokens)) == random_tokens


def test_mail_is_stored_compressed_and_sms_as_it_is(data_dir):
    featurizer = Featurizer(FeaturizerOptions())
    mails = [featurizer.from_raw(raw).tokens for _, raw in sample(data_dir, "spamassassin")]
    assert len(mails) > 250
    plain = [len(orjson.dumps(x)) for x in mails]
    stored = [encode_x(x) for x in mails]
    assert all(decode_x(s) == x and list(decode_x(s)) == list(x)
               for s, x in zip(stored, mails, strict=True))
    # the store's byte budget holds more than twice as many mails
    assert sum(map(len, stored)) < 0.5 * sum(plain)
    assert statistics.median(len(s) / p for s, p in zip(stored, plain, strict=True)
                             if p >= COMPRESS_FROM) < 0.5
    lines = (data_dir / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8")
    sms = [featurizer.from_text(line.split("\t", 1)[1]).tokens
           for line in lines.splitlines()[:500]]
    assert all(encode_x(x) == orjson.dumps(x) for x in sms if len(orjson.dumps(x)) < 1024)


def test_a_corrupt_stored_input_is_a_value_error():
    with pytest.raises(ValueError, match="cannot be decompressed"):
        decode_x(b'"' + base64.b64encode(b"not a zstd frame") + b'"')
    with pytest.raises(ValueError):
        decode_x(b'"not base64!"')


def test_a_store_restored_from_its_changelog_holds_the_same_inputs(data_dir):
    featurizer = Featurizer(FeaturizerOptions())
    mails = [featurizer.from_raw(raw).tokens for _, raw in sample(data_dir, "spamassassin")]
    model, store = make_model("multinomial"), FeedbackStore()
    model.mark_changes()
    store.mark_changes()
    for i, x in enumerate(mails):
        store.remember(f"m{i}", "in:0", x, None)
    records = changed_records(model, store)
    copy_model, copy = make_model("multinomial"), FeedbackStore()
    apply_records(copy_model, copy, "in:0", records)
    assert [(i, e.x_json, e.run, e.seq) for i, e in copy.items()] == [
        (i, e.x_json, e.run, e.seq) for i, e in store.items()]
    assert all(copy.get(f"m{i}").x == x for i, x in enumerate(mails))
    assert copy.nbytes == store.nbytes


def test_a_run_of_plain_json_inputs_written_before_compression_still_reads(data_dir):
    featurizer = Featurizer(FeaturizerOptions())
    _, raw = next(sample(data_dir, "spamassassin"))
    x = featurizer.from_raw(raw).tokens
    assert len(orjson.dumps(x)) >= COMPRESS_FROM
    old_run = (orjson.dumps([FORMAT_VERSION, "entries", 0]),
               orjson.dumps([["m0", None, 0, x], ["m1", "spam", 1, {"hi": 1}]]))
    model, store = make_model("multinomial"), FeedbackStore()
    apply_records(model, store, "in:0", [old_run])
    assert store.get("m0").x == x and list(store.get("m0").x) == list(x)
    assert store.get("m1").x == {"hi": 1} and store.get("m1").label == "spam"
    assert store.get("m0").x_json == encode_x(x)  # kept, and committed next, compressed


def test_late_labels_on_mail_learn_the_counts_it_was_featurized_to(tmp_path, data_dir):
    """Mail arrives unlabelled, its labels come later as feedback: the daemon's model equals
    one that learned each mail's featurized counts with its label directly."""
    mails = list(sample(data_dir, "spamassassin"))[:80]
    kafka = FakeKafka({"in": 1})
    for member, raw in mails:
        kafka.append("in", orjson.dumps({"id": member, "raw_b64": base64.b64encode(raw).decode()}))
    for member, _ in mails:
        label = "spam" if "spam" in member else "ham"
        kafka.append("in", orjson.dumps({"type": "feedback", "id": member, "label": label}))
    config = settings_for(tmp_path, model=ModelSettings(kind="multinomial",
                                                        labels=("ham", "spam")))
    daemon = build_daemon(config, io_factory=lambda on_assigned, on_revoked: FakeIO(
        kafka, config.kafka, on_assigned, on_revoked, batch=25))
    try:
        drain(daemon)
        live = daemon.live.to_state()
    finally:
        daemon.close()
    pipeline = build_pipeline(config.model.table(), dict(config.features))  # the daemon's
    reference = pipeline.model
    for member, raw in mails:
        reference.learn_one(pipeline.featurizer.from_raw(raw).tokens,
                            "spam" if "spam" in member else "ham")
    assert kafka.all("dlq") == []
    counts = reference.to_state()  # the daemon's also holds expiry's last-seen stamps
    assert {key: live[key] for key in counts} == counts
