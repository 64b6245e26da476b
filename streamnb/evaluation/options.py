"""Model and featurizer options for offline runs: ``config.toml`` tables plus overrides.

The ``[model]`` and ``[features]`` tables of the daemon's ``config.toml`` are what
:func:`streamnb.pipeline.build_pipeline` takes, so a replay uses exactly the daemon's settings.
``--set section.key=value`` changes one option (the value is read as TOML: ``0.1``, ``true``,
``"word"``, ``[1, 2]``; anything that is not valid TOML is taken as a plain string).

>>> tables = Tables(model={"kind": "multinomial"}, features={})
>>> tables = tables.with_overrides(["model.alpha=0.1", "features.bigrams=true"], kind="bernoulli")
>>> tables.model, tables.features
({'kind': 'bernoulli', 'alpha': 0.1}, {'bigrams': True})
>>> tables.describe()
'model: kind=bernoulli preset=textbook alpha=0.1; features: bigrams=True'
"""

from __future__ import annotations

import argparse
import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["OptionsError", "Tables", "add_arguments", "add_variant_argument", "tables_from_args"]

SECTIONS = ("model", "features")
DEFAULT_KIND = "multinomial"  # what streamnb.pipeline.build_pipeline uses without a kind


class OptionsError(ValueError):
    """A config file or ``--set`` override that cannot be used, naming the culprit."""


@dataclass
class Tables:
    """The ``[model]`` and ``[features]`` tables a pipeline is built from."""

    model: dict[str, Any] = field(default_factory=dict)
    features: dict[str, Any] = field(default_factory=dict)
    source: str = "built-in defaults"

    @classmethod
    def load(cls, config: str | Path | None) -> Tables:
        """``config``'s tables; without one, ``./config.toml`` if present, else defaults."""
        if config is None:
            default = Path("config.toml")
            if not default.is_file():
                return cls()
            config = default
        path = Path(config)
        try:
            with path.open("rb") as handle:
                document = tomllib.load(handle)
        except FileNotFoundError:
            raise OptionsError(f"--config {path}: no such file") from None
        except tomllib.TOMLDecodeError as error:
            raise OptionsError(f"{path}: not valid TOML: {error}") from None
        tables = {}
        for section in SECTIONS:
            table = document.get(section, {})
            if not isinstance(table, dict):
                raise OptionsError(f"{path}: [{section}] must be a table")
            tables[section] = copy.deepcopy(table)
        return cls(model_table(tables["model"]), tables["features"], source=str(path))

    def with_overrides(self, assignments: list[str] | None, kind: str | None = None) -> Tables:
        model = copy.deepcopy(self.model)
        features = copy.deepcopy(self.features)
        if kind is not None and kind != model.get("kind", DEFAULT_KIND):
            # Options of the configured kind mean nothing to another kind (GDA has no alpha).
            model = {"kind": kind}
        target = {"model": model, "features": features}
        for assignment in assignments or []:
            key, sep, raw_value = assignment.partition("=")
            section, dot, name = key.strip().partition(".")
            if not sep or not dot or not name or section not in target:
                raise OptionsError(
                    f"--set {assignment!r}: expected model.KEY=VALUE or features.KEY=VALUE"
                )
            table = target[section]
            *parents, leaf = name.split(".")
            for parent in parents:
                table = table.setdefault(parent, {})
                if not isinstance(table, dict):
                    raise OptionsError(f"--set {assignment!r}: {parent} is not a table")
            if section == "model" and not parents and leaf == "half_life_messages":
                # config.toml's decay key, given as the model option it becomes
                table.pop("half_life", None)
                leaf = "half_life"
            table[leaf] = parse_value(raw_value.strip())
        return Tables(model, features, source=self.source)

    def describe(self) -> str:
        def one(table: dict) -> str:
            return " ".join(f"{k}={v}" for k, v in table.items()) or "defaults"

        # kind and preset first, whatever order the options were given in
        from streamnb.models.presets import default_preset

        kind = self.model.get("kind", DEFAULT_KIND)
        options = {k: v for k, v in self.model.items() if k not in ("kind", "preset")}
        preset = self.model.get("preset", default_preset(kind))
        model = one({"kind": kind, "preset": preset, **options})
        return f"model: {model}; features: {one(self.features)}"

    def build_pipeline(self):
        from streamnb.pipeline import build_pipeline

        try:
            return build_pipeline(self.model, self.features)
        except (TypeError, ValueError) as error:
            raise OptionsError(f"bad model/features options ({self.describe()}): {error}") from None


def model_table(config_model: dict[str, Any]) -> dict[str, Any]:
    """The flat ``kind`` + options table of a ``config.toml`` ``[model]`` table.

    ``config.toml`` keeps the model's own options in ``[model.options]``, beside daemon-level
    keys such as the fixed ``labels`` set, which an offline replay has no use for.

    >>> model_table({"kind": "bernoulli", "labels": ["ham", "spam"], "options": {"alpha": 0.5}})
    {'kind': 'bernoulli', 'alpha': 0.5}
    """
    # labels and the token budget are the daemon's (an offline replay has no use for them)
    daemon_keys = ("labels", "options", "max_tokens", "expiry_floor", "half_life_messages")
    table = {key: value for key, value in config_model.items() if key not in daemon_keys}
    options = config_model.get("options", {})
    if not isinstance(options, dict):
        raise OptionsError("[model.options] must be a table")
    # decay changes what is learned, so an offline replay measures it as the daemon runs it
    decay = config_model.get("half_life_messages")
    return {**table, **copy.deepcopy(options), **({"half_life": decay} if decay else {})}


def parse_value(text: str) -> Any:
    """A ``--set`` value read as TOML, or the text itself when it is not TOML.

    >>> parse_value("0.5"), parse_value("true"), parse_value("word"), parse_value('"a b"')
    (0.5, True, 'word', 'a b')
    """
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--model`` and ``--set``: the options every offline command shares."""
    group = parser.add_argument_group("model and featurizer")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file whose [model] and [features] tables are used "
        "(default: ./config.toml if present, else built-in defaults)",
    )
    group.add_argument(
        "--model", metavar="KIND", help="model kind, e.g. multinomial, bernoulli, gda"
    )
    group.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one option, e.g. --set model.alpha=0.1 --set features.bigrams=true "
        "(repeatable; VALUE is read as TOML)",
    )


def add_variant_argument(parser: argparse.ArgumentParser, example: str) -> None:
    """``--variant``: one more run with overrides on top of the base options."""
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="OVERRIDES",
        help=f'also run with these overrides on top of the base options, e.g. "{example}" '
        "(repeatable; name=LABEL sets its label)",
    )


def tables_from_args(args: argparse.Namespace) -> Tables:
    return Tables.load(args.config).with_overrides(args.overrides, kind=args.model)
