"""model.max_tokens: validated at start, one line naming the key."""

from __future__ import annotations

import pytest

from streamnb.config import ConfigError, load_settings


def test_max_tokens_and_the_kept_share():
    settings = load_settings(text="[model]\nmax_tokens = 150000\n")
    assert settings.model.max_tokens == 150000
    assert settings.model.expiry_keep() == 112500  # max(75 %, 100,000), as SpamAssassin
    small = load_settings(text="[model]\nmax_tokens = 1000\n")
    assert small.model.expiry_keep() == 1000  # the floor caps at the budget: no hysteresis
    no_floor = load_settings(text="[model]\nmax_tokens = 1000\nexpiry_floor = 0\n")
    assert no_floor.model.expiry_keep() == 750
    assert load_settings(text="").model.max_tokens == 0  # off unless configured


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
