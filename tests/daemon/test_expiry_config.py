"""model.max_tokens: a default budget for the text models, validated at start, one line naming
the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import orjson
import pytest

from streamnb.config import (
    DEFAULT_MAX_TOKENS,
    CheckpointSettings,
    ConfigError,
    ModelSettings,
    load_settings,
)
from streamnb.daemon import build_daemon
from tests.daemon.fakes import FakeIO, FakeKafka, drain, settings_for

REPO = Path(__file__).resolve().parents[2]


def test_max_tokens_and_the_kept_share():
    settings = load_settings(text="[model]\nmax_tokens = 150000\n")
    assert settings.model.max_tokens == 150000
    assert settings.model.expiry_keep() == 112500  # max(75 %, 100,000), as SpamAssassin
    small = load_settings(text="[model]\nmax_tokens = 1000\n")
    assert small.model.expiry_keep() == 1000  # the floor caps at the budget: no hysteresis
    no_floor = load_settings(text="[model]\nmax_tokens = 1000\nexpiry_floor = 0\n")
    assert no_floor.model.expiry_keep() == 750
    assert load_settings(text="[model]\nmax_tokens = 0\n").model.max_tokens == 0  # off


@pytest.mark.parametrize("text, budget", [
    ("", 150_000),  # no config at all: the multinomial default, bounded
    ('[model]\nkind = "bernoulli"\n', 150_000),
    ('[model]\nkind = "gda"\n', 0),  # no vocabulary: nothing to bound, and no error
])
def test_a_text_model_without_a_configured_budget_gets_the_default(text, budget):
    assert load_settings(text=text).model.max_tokens == budget
    assert DEFAULT_MAX_TOKENS == 150_000


def test_the_shipped_config_sets_the_code_default():
    shipped = tomllib.loads((REPO / "config.toml").read_text())["model"]
    assert shipped["max_tokens"] == DEFAULT_MAX_TOKENS
    assert shipped["expiry_floor"] == ModelSettings().expiry_floor


@pytest.mark.parametrize("text, message", [
    ("[model]\nmax_tokens = -1\n", "config: model.max_tokens must be an integer >= 0, got -1"),
    ("[model]\nmax_tokens = 'lots'\n", "config: model.max_tokens must be an integer >= 0"),
    ('[model]\nkind = "gda"\nmax_tokens = 10\n',
     "config: model.max_tokens applies to the text models"),
])
def test_a_bad_budget_fails_naming_the_key(text, message):
    with pytest.raises(ConfigError) as error:
        load_settings(text=text)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_daemon_with_the_default_budget_expires_at_a_commit(tmp_path):
    """Without max_tokens in its config, a multinomial daemon holds at most the default
    budget after a commit: 1,700 messages of 100 new tokens each pass it once."""
    kafka = FakeKafka({"in": 1})
    for i in range(1700):
        text = " ".join(f"t{i}x{j}" for j in range(100))
        kafka.append("in", orjson.dumps({"id": f"m{i}", "text": text,
                                         "label": "spam" if i % 3 else "ham"}))
    settings = settings_for(tmp_path, model=ModelSettings(kind="multinomial",
                                                           labels=("ham", "spam")),
                            checkpoint=CheckpointSettings(every_messages=500,
                                                          every_seconds=3600.0))

    def io_factory(on_assigned, on_revoked):
        return FakeIO(kafka, settings.kafka, on_assigned, on_revoked, batch=100)

    daemon = build_daemon(settings, io_factory=io_factory)
    sizes = []
    checkpoint = daemon.checkpoint

    def recording(why):
        result = checkpoint(why)
        sizes.append(daemon.live.vocabulary_size)
        return result

    daemon.checkpoint = recording
    drain(daemon)
    daemon.checkpoint("test")
    assert daemon.live.tracks_last_seen
    assert max(sizes) <= DEFAULT_MAX_TOKENS
    assert sizes[-1] == settings.model.expiry_keep() == 112_500  # it passed once, and expired
