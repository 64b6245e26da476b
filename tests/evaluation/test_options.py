"""Model and featurizer options: config file tables, --set overrides, errors naming the key."""

from __future__ import annotations

import pytest

from streamnb.evaluation.options import OptionsError, Tables, parse_value


def test_config_tables_are_read_and_overridden(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(
        '[kafka]\nbootstrap = "x:1"\n[model]\nkind = "multinomial"\nalpha = 1.0\n'
        "[features]\nbigrams = false\n"
    )
    tables = Tables.load(config).with_overrides(
        ["model.alpha=0.1", "features.bigrams=true", "features.stop_lists=['english']"],
        kind="bernoulli",
    )
    assert tables.model == {"kind": "bernoulli", "alpha": 0.1}
    assert tables.features == {"bigrams": True, "stop_lists": ["english"]}
    assert tables.source == str(config)


def test_default_is_the_working_directory_config_else_builtin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Tables.load(None).source == "built-in defaults"
    (tmp_path / "config.toml").write_text("[model]\nkind = 'bernoulli'\n")
    assert Tables.load(None).model == {"kind": "bernoulli"}


def test_overrides_build_the_daemon_pipeline():
    pipeline = Tables().with_overrides(["model.alpha=0.25"], kind="bernoulli").build_pipeline()
    assert type(pipeline.model).__name__ == "BernoulliNB"
    assert pipeline.model.alpha == 0.25


@pytest.mark.parametrize(
    "text", ["alpha=1", "model.alpha", "colour.red=1", "model.=1"]
)
def test_bad_overrides(text):
    with pytest.raises(OptionsError):
        Tables().with_overrides([text])


def test_bad_config_files(tmp_path):
    with pytest.raises(OptionsError, match="no such file"):
        Tables.load(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[model\n")
    with pytest.raises(OptionsError, match="not valid TOML"):
        Tables.load(broken)
    with pytest.raises(OptionsError, match="colour"):
        Tables(model={"colour": "red"}).build_pipeline()


def test_values_are_toml_or_plain_strings():
    assert parse_value("3") == 3
    assert parse_value("[1, 2]") == [1, 2]
    assert parse_value("binary") == "binary"
