"""Message -> model input: the one place where the featurizer meets the model.

The daemon (``streamnb run``) and the evaluator (``streamnb evaluate``) both go through
:class:`Pipeline`, so an offline replay sees exactly the inputs the daemon would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamnb.codec import Message

__all__ = ["Pipeline", "PipelineError", "Prepared", "build_pipeline"]


class PipelineError(ValueError):
    """A message the configured model cannot use; ``reason`` is a short, stable code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(slots=True)
class Prepared:
    """The model input for one message, what the featurizer had to cut short (the limits, as
    in :attr:`Features.truncated`) and what was malformed in the mail (:attr:`Features.defects`)."""

    x: Any
    truncated: tuple[str, ...] = field(default_factory=tuple)
    defects: tuple[str, ...] = field(default_factory=tuple)


class Pipeline:
    """Turns a decoded :class:`~streamnb.codec.Message` into the input of ``model``.

    Text models (``numeric = False``) take token counts; numeric models (GDA) take the
    ``features`` vector, or the featurizer's numeric meta-features of a mail or text.
    """

    def __init__(self, featurizer, model):
        self.featurizer = featurizer
        self.model = model
        self.numeric = bool(getattr(model, "numeric_input", False))

    def prepare(self, message: Message) -> Prepared:
        if message.features is not None:
            if not self.numeric:
                raise PipelineError(
                    "wrong_body", "a numeric 'features' vector was sent to a text model"
                )
            return Prepared(list(message.features))
        if message.raw is not None:
            result = self.featurizer.from_raw(message.raw)
        elif message.text is not None:
            result = self.featurizer.from_text(message.text)
        elif message.tokens is not None:
            result = self.featurizer.from_tokens(message.tokens)
        else:
            raise PipelineError("missing_body", f"message {message.id!r} has no body")
        if self.numeric:
            if result.numeric is None:
                raise PipelineError(
                    "wrong_body", "a GDA model needs 'features' or featurizer meta-features"
                )
            return Prepared(list(result.numeric), tuple(result.truncated), result.defects)
        return Prepared(result.tokens, tuple(result.truncated), result.defects)

    def prepare_many(self, messages: Sequence[Message]) -> list[Prepared]:
        return [self.prepare(m) for m in messages]


def build_pipeline(model: Mapping[str, Any], features: Mapping[str, Any]) -> Pipeline:
    """A pipeline from the ``[model]`` and ``[features]`` tables of ``config.toml``.

    ``model`` holds ``kind``, ``preset`` and the model's options (see
    :func:`streamnb.models.presets.resolve`: without ``preset``, a multinomial model is the
    tuned ``"mail"`` one); ``features`` holds the featurizer's options. An unknown kind, preset
    or option raises ``ValueError`` naming it.
    """
    from streamnb.features import Featurizer, FeaturizerOptions
    from streamnb.models import make_model
    from streamnb.models.presets import resolve

    kind, model_options = resolve(model)
    try:
        featurizer_options = FeaturizerOptions(**features)
    except TypeError as error:
        raise ValueError(f"features: {error}") from None
    return Pipeline(Featurizer(featurizer_options), make_model(kind, **model_options))
