"""rspamd's protocol: what a check request carries and what its reply says.

Mail servers ask rspamd with ``POST /checkv2`` (rspamd's proxy in milter mode, the way Postfix
reaches it, sends ``GET /checkv2`` with the message as the body), the SMTP envelope in request
headers, and read a JSON reply (rspamd's ``src/libserver/protocol.c``,
``docs/developers/protocol.md``). This module turns the model's verdict into that reply; it
knows nothing of HTTP servers or Kafka, so it is read and tested on its own.

**Score and action.** A Naive Bayes probability saturates (a long mail's P(spam) is 1.0 in
float64), so the score is computed from the log-odds, which do not. With ``s`` the spam class
and ``o_c`` the model's ``class_offsets`` (0 without them),

    margin = (log P(s | x) + o_s) - max_{c != s} (log P(c | x) + o_c)
    score  = add_header_score + score_per_log_odds * margin

``margin >= 0`` is exactly where the daemon labels the message spam (its decision line), so
the action is ``"add header"`` for what the daemon calls spam, ``"reject"`` from
``reject_score`` on, ``"greylist"`` from ``greylist_score`` up to the line, and ``"no
action"`` below; greylist and reject are off (``inf``) unless configured. A model that does
not know the spam class (nothing learned yet, or a k-class model without it) gives score 0
and ``"no action"``.

>>> policy = Policy(add_header_score=6.0, score_per_log_odds=1.0, reject_score=15.0)
>>> v = policy.verdict({"ham": -5.000045, "spam": -0.006715})   # P(spam) = 0.9933
>>> v.label, v.action, round(v.margin, 4), round(v.score, 4)
('spam', 'add header', 4.9933, 10.9933)
>>> policy.verdict({"ham": -0.0001, "spam": -9.2}).action
'no action'
>>> policy.verdict({"ham": -30.0, "spam": 0.0}).action
'reject'
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACTIONS", "Envelope", "Policy", "Verdict", "check_reply", "envelope_of",
           "message_id"]

#: rspamd's action names, mildest first (those this front door gives).
ACTIONS = ("no action", "greylist", "add header", "reject")

#: The request headers of rspamd's protocol this front door reads, by their reply/record name.
#: rspamd's proxy sends ``Queue-ID``; rspamc ``Queue-Id``: HTTP header names are caseless.
ENVELOPE_HEADERS = {
    "deliver_to": "Deliver-To",
    "user": "User",
    "from": "From",
    "rcpt": "Rcpt",
    "ip": "IP",
    "helo": "Helo",
    "hostname": "Hostname",
    "queue_id": "Queue-Id",
    "flags": "Flags",
}
#: The longest envelope value kept (a header line is bounded by the server already).
ENVELOPE_VALUE_CHARS = 512


@dataclass(frozen=True, slots=True)
class Envelope:
    """The SMTP envelope a check names: each request header of ``ENVELOPE_HEADERS`` it sent
    (``rcpt`` may repeat)."""

    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def first(self, name: str) -> str | None:
        got = self.values.get(name)
        return got[0] if got else None

    @property
    def user(self) -> str | None:
        """Whose mailbox the check is for: ``Deliver-To`` (``rspamc -d``), else ``User``."""
        return self.first("deliver_to") or self.first("user")


def envelope_of(headers: Any) -> Envelope:
    """The envelope of a request whose headers are ``headers`` (a caseless multi-mapping
    with ``getall``, as aiohttp's; or a plain mapping)."""
    values: dict[str, tuple[str, ...]] = {}
    getall = getattr(headers, "getall", None)
    for name, header in ENVELOPE_HEADERS.items():
        if getall is not None:
            got = getall(header, ())
        else:
            one = headers.get(header)
            got = () if one is None else (one,)
        if got:
            values[name] = tuple(value[:ENVELOPE_VALUE_CHARS] for value in got)
    return Envelope(values)


#: How much of a mail is searched for its header block (the Message-ID is in it).
HEADER_SEARCH_BYTES = 256 * 1024
# The end of the header block (its last line's break, then an empty line).
_HEADER_END = re.compile(rb"\n\r?\n")
# The Message-ID field with its folded continuation lines (the featurizer's field rule).
_MESSAGE_ID_RE = re.compile(rb"^message-id[ \t]*:[ \t]*(.*(?:\r?\n[ \t].*)*)", re.M | re.I)
_MESSAGE_ID_NAMES = ((b"message-id", "message-id"),)


def _message_id_field(head: bytes) -> bytes | None:
    """The raw value of the first Message-ID field of a header block: read in C by the
    featurizer's field scan where it is built (a mail's header in about a microsecond, where
    the standard library's header parser took 100 us), else by the same rule's regex."""
    from streamnb.features import native

    if native.enabled():
        fields = native._tokens.header_fields(head, _MESSAGE_ID_NAMES)
        return fields[0][1] if fields else None
    found = _MESSAGE_ID_RE.search(head)
    return found.group(1) if found else None


def message_id(raw: bytes) -> str:
    """The id a mail is learned and reported under: its ``Message-ID`` without angle brackets,
    or, without one, ``sha256:`` and the digest of its bytes (so the same mail learned twice
    has the same id, and a correction reaches the first learn).

    >>> message_id(b"Message-ID: <a1@example.org>\\r\\nSubject: hi\\r\\n\\r\\nbody")
    'a1@example.org'
    >>> message_id(b"Subject: hi\\n\\nbody")[:15]
    'sha256:25a308bb'
    """
    found = _HEADER_END.search(raw, 0, HEADER_SEARCH_BYTES)
    head = raw[:found.start() + 1] if found is not None else raw[:HEADER_SEARCH_BYTES]
    value = _message_id_field(head)
    if value is not None:
        mid = re.sub(rb"\s+", b"", value).strip(b"<>").decode("utf-8", "replace")
        if 0 < len(mid) <= 998 and mid.isprintable():
            return mid
    return "sha256:" + hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the model says of one mail, in rspamd's terms (see the module docstring)."""

    label: str | None
    action: str
    score: float
    margin: float | None


@dataclass(frozen=True, slots=True)
class Policy:
    """How the model's log-probabilities become a score and an action ([http] in config.toml);
    ``class_offsets`` are the model's own (its decision line)."""

    spam_class: str = "spam"
    add_header_score: float = 6.0
    score_per_log_odds: float = 1.0
    greylist_score: float = math.inf
    reject_score: float = math.inf
    class_offsets: Mapping[str, float] = field(default_factory=dict)

    def decide(self, log_proba: Mapping[str, float]) -> str | None:
        """The label the daemon gives: highest log P(c | x) + offset, ties to the first
        label in sorted order (``Model.decide``)."""
        best, top = None, -math.inf
        get = self.class_offsets.get
        for label in sorted(log_proba):
            score = log_proba[label] + get(label, 0.0)
            if best is None or score > top:
                best, top = label, score
        return best

    def verdict(self, log_proba: Mapping[str, float]) -> Verdict:
        label = self.decide(log_proba)
        spam = self.spam_class
        if spam not in log_proba or len(log_proba) < 2:
            return Verdict(label, "no action", 0.0, None)
        get = self.class_offsets.get
        runner_up = max(lp + get(c, 0.0) for c, lp in log_proba.items() if c != spam)
        margin = log_proba[spam] + get(spam, 0.0) - runner_up
        score = self.add_header_score + self.score_per_log_odds * margin
        if label == spam:
            action = "reject" if score >= self.reject_score else "add header"
        else:
            action = "greylist" if score >= self.greylist_score else "no action"
        return Verdict(label, action, score, margin)

    def thresholds(self) -> dict[str, float]:
        """The configured thresholds, as rspamd lists them (rspamc prints them)."""
        found = {"greylist": self.greylist_score, "add header": self.add_header_score,
                 "reject": self.reject_score}
        return {name: value for name, value in found.items() if math.isfinite(value)}

    @property
    def required_score(self) -> float:
        """rspamd's ``required_score``: the reject threshold, or without one the score from
        which a mail counts as spam."""
        return self.reject_score if math.isfinite(self.reject_score) else self.add_header_score


def symbol_name(label: str) -> str:
    """The Bayes-style symbol of a label: ``BAYES_SPAM``, ``BAYES_HAM``, ``BAYES_<LABEL>``.

    >>> symbol_name("spam"), symbol_name("comp.os-ms")
    ('BAYES_SPAM', 'BAYES_COMP_OS_MS')
    """
    return "BAYES_" + re.sub(r"[^A-Z0-9]+", "_", label.upper()).strip("_")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def check_reply(policy: Policy, verdict: Verdict, log_proba: Mapping[str, float], *,
                mid: str, seconds: float, model_updates: int,
                explanation: Mapping[str, Any] | None = None,
                verdict_header: str = "") -> dict[str, Any]:
    """The ``/checkv2`` reply for one mail.

    Besides rspamd's fields the reply has ``streamnb``: the label, every class's exact
    log-probability and probability (as the daemon's predictions on the output topic), the
    margin and the model's update count. rspamd's clients ignore fields they do not know.
    """
    probabilities = {label: math.exp(lp) for label, lp in log_proba.items()}
    symbols: dict[str, Any] = {}
    if verdict.label is not None:
        options = [f"{probabilities[verdict.label]:.2%}"]
        if verdict.margin is not None:
            options.append(f"log-odds {verdict.margin:+.3f}")
        if explanation:
            options.extend(f"{token}:{weight:+.3f}" for token, weight in explanation["tokens"])
        name = symbol_name(verdict.label)
        symbols[name] = {
            "name": name,
            "score": verdict.score,
            "metric_score": verdict.score,
            "description": "streamnb: the global model's log-odds against the runner-up class, "
                           "past its decision line",
            "options": options,
        }
    reply: dict[str, Any] = {
        "is_skipped": False,
        "score": verdict.score,
        "required_score": policy.required_score,
        "action": verdict.action,
        "thresholds": policy.thresholds(),
        "symbols": symbols,
        "messages": {},
        "message-id": mid,
        "time_real": seconds,
        "milter": _milter(verdict, verdict_header),
        "streamnb": {
            "label": verdict.label,
            "margin": verdict.margin,
            "log_probabilities": {label: _finite(lp) for label, lp in log_proba.items()},
            "probabilities": probabilities,
            "model_updates": model_updates,
        },
    }
    if explanation:
        reply["streamnb"]["explanation"] = dict(explanation)
    return reply


#: The header rspamd's proxy adds for "add header" (its ``spam_header``, by default).
PROXY_SPAM_HEADER = "X-Spam"


def _milter(verdict: Verdict, header: str) -> dict[str, Any]:
    """The headers rspamd's proxy (milter mode) adds to the mail, and those it removes
    first: a copy already in the mail is a forgery. The proxy adds its own ``X-Spam: Yes``
    for "add header", but removes a forged ``X-Spam`` only then: it is removed here always."""
    if not header:
        return {}
    margin = "" if verdict.margin is None else f" log-odds={verdict.margin:.3f}"
    value = f"{verdict.label or 'unknown'}; score={verdict.score:.3f}{margin}"
    return {"add_headers": {header: {"value": value, "order": 0}},
            "remove_headers": {header: 0, PROXY_SPAM_HEADER: 0}}
