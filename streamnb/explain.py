"""``streamnb explain``: why a saved model marks a message — the tokens that weighed most.

The message (a raw mail, or plain text with ``--text``) is featurized as the daemon would and
scored by a saved model: a model file written by ``streamnb evaluate --save-model`` (it holds
the ``[features]`` it was trained with) or, with ``--changelog``, the state of a group of
daemons in Kafka (every partition's slice, read from the changelog topics and summed: the model
the daemons predict with; ``[kafka]``, ``[model]`` and ``[features]`` come from ``--config``).
It prints the
log-odds of the predicted class against the runner-up and its exact parts: the prior, for
Bernoulli the absent-word term, the k strongest tokens and the sum of the others
(``TextModel.explain_log_odds``; the same as ``output.explain`` adds to each prediction).

    streamnb evaluate ../shared/data/spamassassin --save-model model.json
    streamnb explain --model model.json message.eml
    streamnb explain --changelog --config config.toml -k 20 < message.eml
    echo "WINNER! claim your prize" | streamnb explain --model sms.json --text --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["ExplainError", "add_arguments", "format_explanation", "load_model", "main",
           "write_model_file"]

MODEL_FORMAT = "streamnb-model"
MODEL_VERSION = 1


class ExplainError(ValueError):
    """A model file, checkpoint, config or message that cannot be used, naming it."""


def write_model_file(path: str | os.PathLike, model: Any, features: Mapping[str, Any]) -> None:
    """Save ``model`` with the featurizer options it was fed with (JSON, replaced atomically)."""
    path = Path(path)
    document = {"format": MODEL_FORMAT, "version": MODEL_VERSION, "features": dict(features),
                "model": model.to_state()}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ExplainError(f"{path}: {error.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExplainError(f"{path}: not a JSON model file: {error}") from None


def _model_of(state: Any, where: str):
    from streamnb.models import StateError, model_from_state

    try:
        return model_from_state(state)
    except StateError as error:
        raise ExplainError(f"{where}: {error}") from None


def _read_model_file(path: Path) -> tuple[Any, dict[str, Any]]:
    document = _read_json(path)
    if not isinstance(document, dict) or document.get("format") != MODEL_FORMAT:
        raise ExplainError(f"{path}: not a streamnb model file (streamnb evaluate --save-model)")
    if document.get("version") != MODEL_VERSION:
        raise ExplainError(f"{path}: model file version {document.get('version')!r}, "
                           f"this streamnb reads {MODEL_VERSION}")
    features = document.get("features")
    if not isinstance(features, dict):
        raise ExplainError(f"{path}: 'features' must be a table")
    return _model_of(document.get("model"), str(path)), features


def _read_group_model(config: str | None):
    """The model the daemons of ``config``'s group predict with: every partition's slice, read
    from the changelog topics in Kafka and summed; and the group's ``[features]``."""
    from streamnb.config import ConfigError, load_settings
    from streamnb.daemon.changelog import ChangelogError, apply_records, changelog_topic
    from streamnb.daemon.kafka_io import KafkaReadError, read_to_end
    from streamnb.models import make_model
    from streamnb.models.presets import resolve

    try:
        settings = load_settings(config or "config.toml")
    except ConfigError as error:
        raise ExplainError(str(error)) from None
    kind, options = resolve(settings.model.table())
    model = make_model(kind, **options)
    for topic in settings.kafka.input_topics:
        changelog = changelog_topic(settings.kafka.group_id, topic)
        try:
            partitions = read_to_end(settings.kafka, changelog)
            for partition, records in sorted(partitions.items()):
                piece = make_model(kind, **options)
                apply_records(piece, None, f"{topic}:{partition}", records,
                              where=f"{changelog}:{partition}")
                model += piece
        except (KafkaReadError, ChangelogError) as error:
            raise ExplainError(str(error)) from None
    if not model.n_updates:
        raise ExplainError(f"the changelog of group {settings.kafka.group_id} holds no "
                           "learned message yet")
    return model, dict(settings.features)


def load_model(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The model and the featurizer options named by ``--model`` or ``--changelog``."""
    if args.model is not None:
        return _read_model_file(Path(args.model))
    return _read_group_model(args.config)


def _featurize(features: Mapping[str, Any], data: bytes, as_text: bool):
    from streamnb.features import Featurizer, FeaturizerOptions

    try:
        featurizer = Featurizer(FeaturizerOptions(**features))
    except (TypeError, ValueError) as error:
        raise ExplainError(f"features: {error}") from None
    if as_text:
        return featurizer.from_text(data.decode("utf-8", "replace"))
    return featurizer.from_raw(data)


def format_explanation(why: dict[str, Any] | None, proba: Mapping[str, float]) -> str:
    """The explanation as aligned lines, the parts summing to the log-odds on the last."""
    if why is None:
        known = ", ".join(sorted(proba)) or "none"
        return f"nothing to weigh: the model knows fewer than two classes ({known})"
    label, versus = why["label"], why["versus"]
    lines = [f"prediction: {label} (P = {proba[label]:.6g}), against {versus} "
             f"(P = {proba[versus]:.6g})",
             f"log-odds {label} : {versus} = {why['log_odds']:+.4f}, made of"]
    for token, contribution in why["tokens"]:
        lines.append(f"  {contribution:+10.4f}  {token}")
    lines.append(f"  {why['prior']:+10.4f}  (prior)")
    if "absent_words" in why:
        lines.append(f"  {why['absent_words']:+10.4f}  (the vocabulary's absent words)")
    others = why["n_tokens"] - len(why["tokens"])
    lines.append(f"  {why['rest']:+10.4f}  ({others} other token{'s' * (others != 1)})")
    lines.append(f"= {why['log_odds']:+10.4f}")
    if "offset" in why:  # model.options.class_offsets moved the decision line
        lines.append(f"  {why['offset']:+10.4f}  (the offset of class_offsets: log-odds + "
                     f"offset = {why['log_odds'] + why['offset']:+.4f} >= 0, so {label})")
    if why["n_ignored"]:
        lines.append(f"{why['n_ignored']} token(s) contributed nothing (not in the vocabulary, "
                     "or left out by min_spread / top_k)")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 2)[2]
    parser.add_argument("message", nargs="?", default="-",
                        help="file holding the message (default: - , standard input)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="FILE",
                        help="a model file written by `streamnb evaluate --save-model`")
    source.add_argument("--changelog", action="store_true",
                        help="the model the daemons of a group predict with, read from its "
                        "changelog topics in Kafka ([kafka], [model] and [features] of --config)")
    parser.add_argument("--config", metavar="FILE",
                        help="with --changelog: the daemons' config.toml (default: ./config.toml)")
    parser.add_argument("--text", action="store_true",
                        help="the message is plain text (an SMS, say), not a raw mail")
    parser.add_argument("-k", type=int, default=10, metavar="K",
                        help="tokens to list (default 10); the others are summed")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def main(args: argparse.Namespace) -> int:
    try:
        if args.k < 0:
            raise ExplainError(f"-k must be >= 0, got {args.k}")
        if args.config is not None and args.model is not None:
            raise ExplainError("--config goes with --changelog: a model file holds its "
                               "own [features]")
        model, features = load_model(args)
        unavailable = getattr(model, "explanation_unavailable",
                              lambda: f"a {model.kind} model has no per-token explanation")()
        if unavailable is not None:
            raise ExplainError(unavailable)
        if args.message == "-":
            data = sys.stdin.buffer.read()
        else:
            try:
                data = Path(args.message).read_bytes()
            except OSError as error:
                raise ExplainError(f"{args.message}: {error.strerror}") from None
        featurized = _featurize(features, data, args.text)
        proba = model.predict_proba_one(featurized.tokens)
        why = model.explain_log_odds(featurized.tokens, args.k)
    except ExplainError as error:
        print(f"streamnb explain: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"probabilities": proba, "explanation": why,
                          "truncated": list(featurized.truncated)}, ensure_ascii=False))
    else:
        print(format_explanation(why, proba))
        if featurized.truncated:
            print(f"the reader cut the message short: {', '.join(featurized.truncated)}")
    return 0
