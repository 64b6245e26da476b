"""``codec.decode`` reads every input value as the message contract (docs/daemon.md) says:
the same message, feedback or error (reason and detail) as a plain reading of each rule in
turn, kept here as the reference, over objects of every shape the fields can take."""

from __future__ import annotations

import base64
import binascii
import math
import tarfile

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamnb.codec import BODY_FIELDS, DecodeError, Feedback, Message, decode


def reference_decode(value: bytes | None, default_id: str | None = None) -> Message | Feedback:
    """Each rule of the contract in turn, in the order their errors are chosen."""
    if value is None:
        raise DecodeError("empty_value", "the record has no value (tombstone)")
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise DecodeError("bad_json", str(error)) from None
    if not isinstance(obj, dict):
        raise DecodeError("bad_json", f"expected a JSON object, got {type(obj).__name__}")
    msg_id = obj.get("id", default_id)
    if isinstance(msg_id, int) and not isinstance(msg_id, bool):
        msg_id = str(msg_id)
    if not isinstance(msg_id, str) or not msg_id:
        raise DecodeError("bad_id", f"id must be a non-empty string, got {msg_id!r:.80}")

    def label(required: bool) -> str | None:
        found = obj.get("label")
        if found is None:
            if required:
                raise DecodeError("missing_label", "feedback needs a label")
            return None
        if not isinstance(found, str) or not found:
            raise DecodeError("bad_label", f"label must be a non-empty string, got {found!r:.80}")
        return found

    kind = obj.get("type", "message")
    if kind == "feedback":
        return Feedback(id=msg_id, label=label(True))
    if kind != "message":
        raise DecodeError("bad_type", f"type must be 'message' or 'feedback', got {kind!r:.80}")
    present = [name for name in BODY_FIELDS if obj.get(name) is not None]
    if not present:
        raise DecodeError("missing_body", "a message needs one of " + ", ".join(BODY_FIELDS))
    if len(present) > 1:
        raise DecodeError("ambiguous_body", "a message has one body field, got "
                          + ", ".join(present))
    message = Message(id=msg_id, label=label(False))
    field = present[0]
    body = obj[field]
    if field == "raw":
        if not isinstance(body, str):
            raise DecodeError("bad_body", "raw must be a string")
        message.raw = body.encode("utf-8", "surrogateescape")
    elif field == "raw_b64":
        if not isinstance(body, str):
            raise DecodeError("bad_body", "raw_b64 must be a base64 string")
        try:
            message.raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as error:
            raise DecodeError("bad_body", f"raw_b64 is not valid base64: {error}") from None
    elif field == "text":
        if not isinstance(body, str):
            raise DecodeError("bad_body", "text must be a string")
        message.text = body
    elif field == "tokens":
        if not isinstance(body, list) or not all(isinstance(t, str) for t in body):
            raise DecodeError("bad_body", "tokens must be a list of strings")
        message.tokens = body
    else:
        if not isinstance(body, list) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in body):
            raise DecodeError("bad_body", "features must be a list of finite numbers")
        message.features = [float(v) for v in body]
    return message


def outcome(read, value: bytes | None, default_id: str | None):
    try:
        return read(value, default_id)
    except DecodeError as error:
        return ("error", error.reason, error.detail)


scalars = (st.none() | st.booleans() | st.integers(-3, 2**63 - 1) | st.floats(allow_nan=False)
           | st.text(max_size=8) | st.sampled_from(["", "m1", "spam", "aGk=", "not base64!"]))
values = scalars | st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=3), scalars,
                                                                     max_size=2)
# Each field absent, usual or odd, so that most objects get far into the rules.
ids = st.sampled_from(["m1", "é", 7, 0, True, "", None, 1.5, ["m1"]])
labels = st.sampled_from(["spam", "ham", "", None, 3, False, ["spam"]])
kinds = st.sampled_from(["message", "feedback", "mail", None, 1])
bodies = {"raw": st.text(max_size=8), "raw_b64": st.sampled_from(["aGk=", "aGk", "!!", ""]),
          "text": st.text(max_size=8), "tokens": st.lists(st.text(max_size=3), max_size=3),
          "features": st.lists(st.integers(-5, 5) | st.floats(allow_nan=False), max_size=3)}
optional_fields = st.fixed_dictionaries({}, optional={
    "id": ids | values, "label": labels | values, "type": kinds | values, "other": values,
    **{name: body | values | st.none() for name, body in bodies.items()}})


@st.composite
def objects(draw) -> dict:
    """Usually one body field of its kind (a message that gets as far as its label and
    body), then any of the fields, usual or odd, on top."""
    obj = {}
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(bodies)))
        obj = {"id": draw(ids), name: draw(bodies[name])}
        if draw(st.booleans()):
            obj["label"] = draw(labels)
        if draw(st.booleans()):
            return obj
    obj.update(draw(optional_fields))
    return obj


@settings(max_examples=1500, deadline=None)
@given(objects(), st.none() | st.sampled_from(["in:0:7", ""]))
def test_decode_reads_every_object_as_the_rules_in_turn(obj, default_id):
    value = orjson.dumps(obj)
    assert outcome(decode, value, default_id) == outcome(reference_decode, value, default_id)


@pytest.mark.parametrize("value", [None, b"", b"[1]", b"not json", b'"text"', b"{}",
                                   b'{"id": "a", "text": "hi", "label": "spam"}',
                                   b'{"id": 7, "raw": "Subject: x\\n\\nbody"}',
                                   b'{"id": "a", "text": null, "tokens": ["x"]}'])
def test_decode_reads_each_kind_of_value_as_the_rules_in_turn(value):
    assert outcome(decode, value, "in:0:1") == outcome(reference_decode, value, "in:0:1")


# Strings near base64: the alphabet, padding anywhere, line breaks, a stray '-' or '_'
# (the URL-safe alphabet), a non-ASCII letter; and real encodings with one character
# inserted. The fast decoder must accept, decode and refuse (with the same words) exactly
# as the standard library's strict decoder the contract names.
_B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@st.composite
def encodings_with_an_insert(draw) -> str:
    encoded = base64.b64encode(draw(st.binary(max_size=24))).decode()
    at = draw(st.integers(0, len(encoded)))
    return encoded[:at] + draw(st.sampled_from(["", "=", "==", "\n", " ", "A", "é"])) + encoded[at:]


near_base64 = st.one_of(st.text(alphabet=_B64_ALPHABET + "= \r\n-_é\x00", max_size=16),
                        encodings_with_an_insert())


@settings(max_examples=3000, deadline=None)
@given(near_base64)
def test_raw_b64_is_read_as_the_standard_librarys_strict_decoder(body):
    value = orjson.dumps({"id": "m", "raw_b64": body})
    assert outcome(decode, value, None) == outcome(reference_decode, value, None)


def test_raw_b64_reads_every_spamassassin_mail_byte_for_byte(data_dir):
    with tarfile.open(data_dir / "spamassassin" / "messages.tar.gz") as tar:
        mails = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
    assert len(mails) > 6000
    for raw in mails:
        value = orjson.dumps({"id": "m", "raw_b64": base64.b64encode(raw).decode()})
        assert decode(value).raw == raw
