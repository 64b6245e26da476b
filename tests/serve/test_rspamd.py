"""rspamd's protocol without a server: verdicts, replies, envelopes and ids."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from streamnb.models import MultinomialNB
from streamnb.serve.rspamd import (
    ACTIONS,
    Policy,
    check_reply,
    envelope_of,
    message_id,
    symbol_name,
)

log_probas = st.dictionaries(
    st.sampled_from(["ham", "spam", "news", "promo"]),
    st.floats(min_value=-5000, max_value=0, allow_nan=False), min_size=2, max_size=4)
offsets = st.dictionaries(st.sampled_from(["ham", "spam", "news"]),
                          st.floats(min_value=-5, max_value=5, allow_nan=False), max_size=3)


@given(log_probas, offsets)
def test_the_verdict_labels_spam_exactly_where_the_model_decides_spam(log_proba, class_offsets):
    assume("spam" in log_proba)
    policy = Policy(class_offsets=class_offsets)
    model = MultinomialNB(class_offsets=class_offsets or None)
    verdict = policy.verdict(log_proba)
    assert verdict.label == model.decide(log_proba)
    assert (verdict.action == "add header") == (verdict.label == "spam")
    assert math.isfinite(verdict.score)
    assert verdict.score == pytest.approx(6.0 + verdict.margin)


@given(st.floats(min_value=-200, max_value=200), st.floats(min_value=-200, max_value=200))
def test_the_score_grows_with_the_log_odds_and_never_saturates(a, b):
    """Two mails whose probabilities are both 1.0 in float64 still get different scores."""
    assume(abs(a - b) > 1e-6)
    policy = Policy(score_per_log_odds=0.5)
    first = policy.verdict({"ham": -1000.0, "spam": a})
    second = policy.verdict({"ham": -1000.0, "spam": b})
    assert (first.score < second.score) == (a < b)


def test_actions_follow_the_configured_thresholds():
    policy = Policy(add_header_score=6.0, greylist_score=4.0, reject_score=15.0)
    def action(margin: float) -> str:
        return policy.verdict({"ham": 0.0, "spam": margin}).action
    assert [action(m) for m in (-10.0, -1.5, 0.5, 8.9, 9.0, 30.0)] == [
        "no action", "greylist", "add header", "add header", "reject", "reject"]
    assert policy.thresholds() == {"greylist": 4.0, "add header": 6.0, "reject": 15.0}
    assert policy.required_score == 15.0
    # Greylist and reject are off unless configured.
    default = Policy()
    assert default.thresholds() == {"add header": 6.0} and default.required_score == 6.0
    assert default.verdict({"ham": 0.0, "spam": 10_000.0}).action == "add header"


def test_a_model_without_the_spam_class_gives_no_action_and_score_zero():
    policy = Policy()
    for log_proba in ({}, {"ham": 0.0}, {"news": -0.1, "sport": -2.4}):
        verdict = policy.verdict(log_proba)
        assert (verdict.action, verdict.score, verdict.margin) == ("no action", 0.0, None)


@given(log_probas)
def test_the_reply_is_json_with_every_class_and_no_infinity(log_proba):
    policy = Policy(reject_score=15.0)
    verdict = policy.verdict(log_proba)
    reply = check_reply(policy, verdict, log_proba, mid="m", seconds=0.001, model_updates=3,
                        verdict_header="X-Streamnb")
    decoded = orjson.loads(orjson.dumps(reply))  # orjson refuses nothing: NaN/inf become null
    assert decoded["action"] in ACTIONS
    assert set(decoded["streamnb"]["probabilities"]) == set(log_proba)
    assert decoded["streamnb"]["log_probabilities"] == {c: lp for c, lp in log_proba.items()}
    assert decoded["score"] == verdict.score and decoded["required_score"] == 15.0
    if verdict.label is not None:
        symbol = decoded["symbols"][symbol_name(verdict.label)]
        assert symbol["score"] == symbol["metric_score"] == verdict.score
    milter = decoded["milter"]
    assert milter["remove_headers"] == {"X-Streamnb": 0, "X-Spam": 0}
    assert milter["add_headers"]["X-Streamnb"]["value"].startswith(f"{verdict.label};")


def test_explanation_tokens_are_listed_in_the_symbol_options():
    model = MultinomialNB()
    model.learn_many([{"cheap": 2, "pills": 1}, {"meeting": 1}], ["spam", "ham"])
    x = {"cheap": 2, "meeting": 1}
    log_proba = model.predict_log_proba_one(x)
    why = model.explain_log_odds(x, 2)
    policy = Policy()
    reply = check_reply(policy, policy.verdict(log_proba), log_proba, mid="m", seconds=0.0,
                        model_updates=2, explanation=why)
    assert reply["symbols"]["BAYES_SPAM"]["options"][2:] == ["cheap:+1.386", "meeting:-1.099"]
    assert reply["streamnb"]["explanation"]["tokens"] == why["tokens"]


def test_no_verdict_header_means_no_milter_block():
    policy = Policy()
    reply = check_reply(policy, policy.verdict({"ham": 0.0, "spam": -3.0}),
                        {"ham": 0.0, "spam": -3.0}, mid="m", seconds=0.0, model_updates=1)
    assert reply["milter"] == {}


def test_envelope_reads_rspamd_request_headers_caselessly():
    from multidict import CIMultiDict

    headers = CIMultiDict([("Queue-ID", "4AbC"), ("Rcpt", "a@x"), ("rcpt", "b@x"),
                           ("IP", "192.0.2.1"), ("Deliver-To", "bob@x"), ("Flags", "milter")])
    envelope = envelope_of(headers)
    assert envelope.values["rcpt"] == ("a@x", "b@x")
    assert envelope.first("queue_id") == "4AbC" and envelope.user == "bob@x"
    assert envelope_of({"User": "carol"}).user == "carol"
    assert envelope_of({}).user is None


@pytest.mark.parametrize(("raw", "expected"), [
    (b"Message-ID: <a1@example.org>\r\nSubject: x\r\n\r\nbody", "a1@example.org"),
    (b"Subject: x\nMessage-Id:\n  <folded@example.org>\n\nbody", "folded@example.org"),
    (b"Subject: x\n\nMessage-ID: <in-body@example.org>\n", None),  # in the body: not the id
    (b"Message-ID: <>\n\nbody", None),
])
def test_message_id_is_the_header_else_a_digest(raw, expected):
    got = message_id(raw)
    if expected is None:
        assert got.startswith("sha256:") and len(got) == 7 + 64
        assert message_id(raw) == got  # the same mail, the same id
    else:
        assert got == expected


def test_message_id_of_real_mail(data_dir):
    """Every SpamAssassin mail gets a printable id, the same one twice."""
    from streamnb.evaluation.corpora import read_corpus

    mails = read_corpus(data_dir / "spamassassin", shuffle=1, limit=300).messages
    ids = [message_id(mail.raw) for mail in mails]
    assert all(mid and mid.isprintable() for mid in ids)
    assert ids == [message_id(mail.raw) for mail in mails]
    assert sum(mid.startswith("sha256:") for mid in ids) < 30  # nearly all carry a Message-ID


def test_the_message_id_scan_in_c_is_its_regex(data_dir):
    """Where the C extension is built the Message-ID is read by the featurizer's field scan;
    the regex of the same rule reads the same value."""
    from streamnb.evaluation.corpora import read_corpus
    from streamnb.features import native
    from streamnb.serve import rspamd

    if not native.enabled():
        pytest.skip("the C extension is not built")
    for mail in read_corpus(data_dir / "spamassassin", shuffle=4, limit=500).messages:
        found = rspamd._HEADER_END.search(mail.raw)
        head = mail.raw[:found.start() + 1] if found else mail.raw
        by_regex = rspamd._MESSAGE_ID_RE.search(head)
        assert rspamd._message_id_field(head) == (by_regex.group(1) if by_regex else None)
