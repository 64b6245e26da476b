"""``streamnb evaluate --save-model`` and ``streamnb explain``, as a user runs them."""

from __future__ import annotations

import json
import math

import pytest

from streamnb.cli import main as cli_main
from streamnb.explain import write_model_file
from streamnb.features import Featurizer, FeaturizerOptions
from streamnb.models import make_model, model_from_state

SPAM_MAIL = (b"From: Prize Desk <win@prizes.example>\nSubject: You are a WINNER\n\n"
             b"Claim your free cash prize now! Call 0800 123 or visit http://prizes.example/\n")


def explain(capsys, *argv):
    code = cli_main(["explain", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_saved_model_explains_a_message_exactly(data_dir, tmp_path, capsys, monkeypatch):
    saved = tmp_path / "sms.json"
    monkeypatch.chdir(tmp_path)  # no config.toml here: the built-in defaults (mail preset)
    corpus = data_dir / "sms-spam-collection" / "SMSSpamCollection"
    assert cli_main(["evaluate", str(corpus), "--limit", "1500", "--quiet",
                     "--save-model", str(saved)]) == 0
    capsys.readouterr()
    document = json.loads(saved.read_text())
    assert document["format"] == "streamnb-model" and document["features"] == {}
    model = model_from_state(document["model"])
    assert model.n_updates == 1500
    assert model.options() == make_model("multinomial", preset="mail").options()

    message = tmp_path / "sms.txt"
    message.write_text("WINNER!! claim your free prize now, call 09061701461")
    code, out, err = explain(capsys, "--model", str(saved), "--text", "-k", "4", "--json",
                             str(message))
    assert code == 0, err
    shown = json.loads(out)
    tokens = Featurizer(FeaturizerOptions()).from_text(message.read_text()).tokens
    assert shown["explanation"] == json.loads(json.dumps(model.explain_log_odds(tokens, 4)))
    assert shown["probabilities"] == pytest.approx(model.predict_proba_one(tokens))
    why = shown["explanation"]
    assert why["label"] == "spam" and len(why["tokens"]) == 4
    parts = [why["prior"], why["rest"], *(c for _, c in why["tokens"])]
    assert math.isclose(math.fsum(parts), why["log_odds"], abs_tol=1e-9)

    code, out, _ = explain(capsys, "--model", str(saved), "--text", "-k", "4", str(message))
    assert code == 0
    assert f"log-odds spam : ham = {why['log_odds']:+.4f}" in out
    assert f"= {why['log_odds']:+10.4f}" in out
    assert f"{why['tokens'][0][1]:+10.4f}  {why['tokens'][0][0]}" in out


def test_unusable_inputs_say_what_is_wrong(tmp_path, capsys):
    gda = make_model("gda")
    gda.learn_one([0.0, 1.0], "ham")
    write_model_file(tmp_path / "gda.json", gda, {})
    write_model_file(tmp_path / "nb.json", make_model("multinomial"), {"colour": "red"})
    (tmp_path / "junk.json").write_text('{"format": "something"}')
    (tmp_path / "m.eml").write_bytes(SPAM_MAIL)
    message = str(tmp_path / "m.eml")
    cases = [
        (["--model", str(tmp_path / "gda.json"), message], "gda model has no per-token"),
        (["--model", str(tmp_path / "junk.json"), message], "not a streamnb model file"),
        (["--model", str(tmp_path / "missing.json"), message], "No such file"),
        (["--changelog", "--config", str(tmp_path / "none.toml"), message], "cannot read"),
        (["--model", str(tmp_path / "nb.json"), str(tmp_path / "nothing.eml")],
         "nothing.eml: No such file"),
        (["--model", str(tmp_path / "nb.json"), message], "features: "),
        (["--model", str(tmp_path / "nb.json"), "-k", "-1", message], "-k must be >= 0"),
        (["--model", str(tmp_path / "gda.json"), "--config", "c.toml", message],
         "--config goes with --changelog"),
    ]
    for argv, expected in cases:
        code, out, err = explain(capsys, *argv)
        assert code == 2 and out == ""
        assert err.startswith("streamnb explain: ") and expected in err, err
