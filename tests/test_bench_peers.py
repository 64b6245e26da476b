"""bench.peers' outside filters: a missing program is skipped with one clear line; an installed
one runs the immediate-feedback loop (these peers are benchmark-only: CI need not have them)."""

import argparse

import pytest

from bench.peers import __main__ as peers_main
from bench.peers.filters import MAIL_FILTERS, CommandPeer, make_filter
from streamnb.codec import Message

OUTSIDE = [name for name in MAIL_FILTERS if isinstance(make_filter(name, []), CommandPeer)]


@pytest.mark.parametrize("name", OUTSIDE)
def test_a_missing_program_skips_the_filter_with_a_line_saying_how_to_install_it(
    name, monkeypatch, capsys
):
    monkeypatch.setenv("PATH", "/nonexistent")
    args = argparse.Namespace(cache=None, data=None, budget=1.0, config=None, overrides=[])
    row = peers_main._run_one(args, "sms", name, 10)
    assert row["stream"] == "sms" and row["peer"] == name
    assert "apt-get install" in row["unavailable"]
    assert f"sms / {name}: skipped, " in capsys.readouterr().err
    block = peers_main.render([row], {**_machine(), "load": "0"}, "cmd")
    assert f"| sms | {name} | skipped: " in block


def _machine():
    return {"nproc": 2, "cpu": "?", "python": "3", "numpy": "2", "river": "?",
            "scikit-learn": "?", "os": "?"}


# Each text once (rspamd declines to learn a message it has learnt already).
MESSAGES = [
    Message(id=str(i), label=label, text=f"{text} {i}")
    for i, (label, text) in enumerate(
        [("ham", "lunch at noon with the team"), ("spam", "win cash now click here")] * 6
    )
]


@pytest.mark.slow  # rspamd takes its seconds to start
@pytest.mark.parametrize("name", OUTSIDE)
def test_an_installed_filter_scores_then_learns_every_message(name):
    flt = make_filter(name, ["ham", "spam"])
    if flt.missing():
        pytest.skip(f"{name}: {flt.missing()}")
    flt.warm_up()
    run = flt.run(MESSAGES, budget=float("inf"))
    assert run.finished and run.labels == [m.label for m in MESSAGES]
    assert all(isinstance(s, float) for s in run.scores)
    if name != "rspamd-bayes":  # rspamd reads its learn counts a second after they change
        # After a few rounds of the same two texts, spam scores above ham.
        assert run.scores[-1] > run.scores[-2]
    assert run.notes["wordlist_bytes"] > 0


def test_the_mail_group_lists_the_side_by_side_filters_once():
    assert peers_main._peer_names("mail,bogofilter") == list(MAIL_FILTERS)


def test_views_add_each_view_after_its_mail_stream_with_the_mail_filters(monkeypatch):
    ran = []

    def fake_run(args, stream, peer, limit):
        ran.append((stream, peer, limit))
        return {"stream": stream, "peer": peer, "unavailable": "not run in this test"}

    monkeypatch.setattr(peers_main, "_run_one", fake_run)
    monkeypatch.setattr(peers_main, "_machine", lambda: {**_machine(), "load": "0"})
    peers_main.main(["--streams", "sms,chinese", "--peers", "streamnb,river-multinomial,spamprobe",
                     "--views", "body-only,html-text", "--stream-limit", "chinese=50"])
    assert ran == [
        ("sms", "streamnb", None), ("sms", "river-multinomial", None), ("sms", "spamprobe", None),
        ("chinese", "streamnb", 50), ("chinese", "river-multinomial", 50),
        ("chinese", "spamprobe", 50),
        # views of the mail stream only (SMS is text), with the mail filters of --peers
        ("chinese+body-only", "streamnb", 50), ("chinese+body-only", "spamprobe", 50),
        ("chinese+html-text", "streamnb", 50), ("chinese+html-text", "spamprobe", 50),
    ]


def test_an_unknown_view_is_refused_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit):
        peers_main.main(["--views", "headers-only"])
    assert "unknown view 'headers-only'" in capsys.readouterr().err


def test_spamprobe_gives_an_empty_message_its_unsure_score():
    # The body-only view of a mail without text parts is empty: spamprobe prints nothing then.
    flt = make_filter("spamprobe", ["ham", "spam"])
    if flt.missing():
        pytest.skip(f"spamprobe: {flt.missing()}")
    run = flt.run([MESSAGES[0], Message(id="e", label="spam", raw=b""), MESSAGES[1]], budget=60.0)
    assert run.scores[1] == 0.5 and run.predicted[1] == "ham"
    assert run.labels == ["ham", "spam", "spam"]


def test_crm114_runs_osb_and_osbf_each_with_both_training_policies():
    for name, flags, extension, thick in [
        ("crm114-osb", "<osb unique microgroom>", "css", False),
        ("crm114-osb-thick", "<osb unique microgroom>", "css", True),
        ("crm114-osbf", "<osbf unique microgroom>", "cfc", False),
        ("crm114-osbf-thick", "<osbf unique microgroom>", "cfc", True),
    ]:
        flt = make_filter(name, ["ham", "spam"])
        assert (flt.name, flt.flags, flt.extension, flt.thick) == (name, flags, extension, thick)
        assert name in MAIL_FILTERS


@pytest.mark.slow  # rspamd takes its seconds to start
def test_rspamd_counts_a_learn_it_refuses_as_already_learned():
    flt = make_filter("rspamd-bayes", ["ham", "spam"])
    if flt.missing():
        pytest.skip(f"rspamd-bayes: {flt.missing()}")
    flt.warm_up()
    twice = [MESSAGES[0], MESSAGES[1], Message(id="again", label="ham", text=MESSAGES[0].text)]
    run = flt.run(twice, budget=float("inf"))
    assert run.notes["refused_learns"] == run.notes["refused_as_already_learned"] == 1


def test_the_stream_without_message_id_differs_from_chinese_only_by_those_lines(data_dir):
    from bench.peers.streams import STREAMS, load, with_views

    plain = load(STREAMS["chinese"], data_dir, 60)
    masked = load(STREAMS["chinese-no-msgid"], data_dir, 60)
    assert [m.id for m in plain] == [m.id for m in masked]
    dropped = 0
    for a, b in zip(plain, masked, strict=True):
        head = a.raw.split(b"\n\n", 1)[0]
        kept = b"\n".join(
            line for line in head.split(b"\n") if not line.lower().startswith(b"message-id:")
        )
        dropped += kept != head
        assert b.raw == kept + a.raw[len(head):]
        assert b"\nmessage-id:" not in b"\n" + b.raw.split(b"\n\n", 1)[0].lower()
    assert dropped > 50  # nearly every message had one
    # a view keeps no Message-ID anyway: the stream has no views of its own
    assert with_views(["chinese-no-msgid"], ["body-only"]) == ["chinese-no-msgid"]
