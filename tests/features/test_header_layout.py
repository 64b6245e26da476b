"""Header layout tokens (``header_order``, ``header_shapes``): the tokens, worked by hand, and
the model statistics still exact with them on."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.features.header_layout import (
    MAX_FIELDS,
    SHAPE_CHARS,
    header_order_tokens,
    header_shape_tokens,
    value_shape,
)
from streamnb.models import make_model

MAIL = (
    b"Return-Path: <ding@163.com>\n"
    b"From: =?GB2312?B?wfW4x8rA?= <ding@163.com>\n"
    b"Subject: Re: 2 offers\n"
    b"Content-Type: text/plain;\n"
    b'\tcharset="GB2312"\n'
    b"\n"
    b"buy now\n"
)


def layout(raw: bytes, **options) -> Counter:
    tokens = Featurizer(FeaturizerOptions(**options)).from_raw(raw).tokens
    return Counter({t: n for t, n in tokens.items() if t.startswith(("order:", "shape:"))})


def test_the_layout_tokens_of_a_short_mail_worked_by_hand():
    # Four fields: runs of 3 and 4 of "^ return-path from subject content-type $", and each
    # value with letters -> a, digits -> 0, white space (the folding too) -> one space.
    assert layout(MAIL) == Counter({
        "order:^>return-path>from": 1,
        "order:return-path>from>subject": 1,
        "order:from>subject>content-type": 1,
        "order:subject>content-type>$": 1,
        "order:^>return-path>from>subject": 1,
        "order:return-path>from>subject>content-type": 1,
        "order:from>subject>content-type>$": 1,
        "shape:return-path:<a@0.a>": 1,
        "shape:from:=?a0?a?a0a0a?= <a@0.a>": 1,  # wfW4x8rA: a0a0a
        "shape:subject:a: 0 a": 1,
        'shape:content-type:a/a; a="a0"': 1,
    })


def test_the_body_and_the_other_tokens_are_what_they_were_without_layout():
    with_layout = Featurizer(FeaturizerOptions()).from_raw(MAIL).tokens
    without = Featurizer(FeaturizerOptions(header_order=0, header_shapes=False)).from_raw(MAIL)
    assert {t: n for t, n in with_layout.items() if t not in layout(MAIL)} == dict(without.tokens)


def test_a_repeated_field_and_its_runs_count_each_time():
    block = b"Received: a\nReceived: b\nReceived: c\nSubject: x"
    assert Counter(header_order_tokens(block, 2, 2)) == Counter({
        "order:^>received": 1, "order:received>received": 2, "order:received>subject": 1,
        "order:subject>$": 1,
    })
    assert Counter(header_shape_tokens(block)) == Counter(
        {"shape:received:a": 3, "shape:subject:a": 1}
    )


def test_eight_bit_bytes_and_case_of_names():
    assert value_shape("张三 <z@a.cn>".encode("gb18030")) == "h <a@a.a>"
    assert header_order_tokens(b"X-Mailer: m\nMIME-Version: 1.0", 1, 1) == [
        "order:^", "order:x-mailer", "order:mime-version", "order:$"
    ]


def test_a_mail_without_headers_gives_no_layout_tokens():
    assert layout(b"\nonly a body\n") == Counter()
    assert Featurizer().from_text("Subject: not a header, an SMS").tokens.keys().isdisjoint(
        {"order:^>subject>$"}
    )


def test_the_options_turn_each_kind_off():
    assert not [t for t in layout(MAIL, header_order=0) if t.startswith("order:")]
    assert not [t for t in layout(MAIL, header_shapes=False) if t.startswith("shape:")]
    assert layout(MAIL, header_order=0, header_shapes=False) == Counter()
    two = layout(MAIL, header_order=2, min_header_order=2, header_shapes=False)
    assert set(two) == {"order:^>return-path", "order:return-path>from", "order:from>subject",
                        "order:subject>content-type", "order:content-type>$"}


def test_bounded_for_a_hostile_header_block():
    raw = b"X-F: %s\n" % (b"v" * 10_000) * (5 * MAX_FIELDS) + b"\nbody"
    tokens = layout(raw)
    assert tokens["shape:x-f:a"] == MAX_FIELDS  # the fields past MAX_FIELDS are not read
    assert sum(n for t, n in tokens.items() if t.startswith("order:")) == 2 * MAX_FIELDS - 1
    assert all(len(t) <= len("shape:x-f:") + SHAPE_CHARS for t in tokens)


@pytest.mark.parametrize("options", [
    {"header_order": -1}, {"header_order": True}, {"header_order": 2, "min_header_order": 3},
    {"header_order": 4, "min_header_order": 0},
])
def test_a_bad_order_is_refused_naming_the_option(options):
    with pytest.raises(ValueError, match="header_order"):
        FeaturizerOptions(**options)


# --- the models are token-agnostic: counts, unlearn and merge stay exact with layout on --------

FIELDS = [b"From: a@b.example", b"To: c@d.example", b"Subject: win 100", b"X-Mailer: M 1.0",
          b"Received: from x", b"Date: Mon, 1 Jul 2024"]
mails = st.lists(st.sampled_from(FIELDS), max_size=8).map(lambda fs: b"\n".join(fs) + b"\n\nhi\n")
streams = st.lists(st.tuples(mails, st.sampled_from(["ham", "spam"])), max_size=12)
MODEL_OPTIONS = [{"repeated_words": "count"}, {}]  # occurrence counts; the default (binary)
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEATURIZER = Featurizer()


def learned(options: dict, stream) -> object:
    model = make_model("multinomial", **options)
    for raw, label in stream:
        model.learn_one(FEATURIZER.from_raw(raw).tokens, label)
    return model


@SETTINGS
@given(streams)
def test_the_model_holds_exactly_the_layout_counts_worked_out_from_the_fields(stream):
    model = learned({"repeated_words": "count"}, stream)
    expected: dict[str, Counter] = {"ham": Counter(), "spam": Counter()}
    for raw, label in stream:
        block = raw.split(b"\n\n", 1)[0]
        names = [line.split(b":", 1)[0].decode().lower() for line in block.split(b"\n") if line]
        if not names:
            continue
        framed = ["^", *names, "$"]
        for n in (3, 4):
            expected[label].update(
                "order:" + ">".join(framed[i : i + n]) for i in range(len(framed) - n + 1)
            )
        expected[label].update(header_shape_tokens(block))
    state = model.to_state()
    for c, label in enumerate(state["classes"]):
        got = {t: n for t, n in zip(state["vocabulary"], state["counts"][c], strict=True)
               if n and t.startswith(("order:", "shape:"))}
        assert got == dict(expected[label])


@SETTINGS
@given(st.sampled_from(MODEL_OPTIONS), streams, streams, mails)
def test_merge_and_unlearn_stay_exact_with_layout_tokens(options, a, b, probe):
    one_stream = learned(options, a + b)
    merged = learned(options, a) + learned(options, b)
    assert merged.to_state() == one_stream.to_state()
    x = FEATURIZER.from_raw(probe).tokens
    assert merged.predict_log_proba_one(x) == one_stream.predict_log_proba_one(x)
    before = one_stream.to_state()
    one_stream.learn_one(x, "spam")
    one_stream.unlearn_one(x, "spam")
    assert one_stream.to_state() == before


def shaped_by_hand(value: bytes) -> str:
    """The shape rule, one byte at a time: a run of letters, digits, 8-bit bytes or white
    space is one character; every other byte is itself."""
    out: list[str] = []
    for byte in value[: 4 * SHAPE_CHARS].strip():
        char = chr(byte)
        kind = ("a" if char.isascii() and char.isalpha() else "0" if char.isdigit() and byte < 128
                else "h" if byte >= 0x80 else " " if char in " \t\n\r\x0b\x0c" else char)
        if not (kind in "a0h " and out and out[-1] == kind):
            out.append(kind)
    return "".join(out)[:SHAPE_CHARS]


field_values = st.binary(max_size=300).map(lambda v: v.replace(b"\n", b" ").replace(b"\r", b" "))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"From", b"To", b"X-A"]), field_values), max_size=8))
def test_the_shapes_of_a_block_are_each_value_shaped_alone(fields):
    # The values are shaped together (joined by NUL) for speed: NUL bytes, 8-bit bytes, runs of
    # white space and long values must come out as the byte-by-byte rule gives for each.
    block = b"".join(name + b": " + value + b"\n" for name, value in fields)
    values = [value.lstrip(b" \t") for _, value in fields]  # the reader's field rule
    assert header_shape_tokens(block) == [
        f"shape:{name.decode().lower()}:{shaped_by_hand(value)}"
        for (name, _), value in zip(fields, values, strict=True)]
    assert [value_shape(value) for value in values] == [shaped_by_hand(v) for v in values]
