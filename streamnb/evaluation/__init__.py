"""Offline evaluation: replay a labelled corpus through the daemon's pipeline and score it.

``streamnb evaluate`` and ``streamnb crossval`` are built from these pieces, which scripts can
use directly (for instance to compare many model options on one stream):

>>> from streamnb.evaluation import Tables, read_corpus, evaluate_corpus
>>> corpus = read_corpus(DATA / "sms-spam-collection", shuffle=1, limit=300)  # doctest: +SKIP
>>> runs = evaluate_corpus(corpus, [("alpha 0.1", Tables().with_overrides(["model.alpha=0.1"]))])
... # doctest: +SKIP
>>> runs[0].figures["one_minus_auc_pct"]  # doctest: +SKIP

* :mod:`~streamnb.evaluation.corpora` reads corpora into :class:`~streamnb.codec.Message` lists;
* :mod:`~streamnb.evaluation.replay` scores then learns each message (immediate feedback);
* :mod:`~streamnb.evaluation.scoring` computes ROC area, lam%, recall at a false-positive rate;
* :mod:`~streamnb.evaluation.crossval` runs k-fold cross-validation;
* :mod:`~streamnb.evaluation.options` reads ``[model]``/``[features]`` and ``--set`` overrides.
"""

from streamnb.evaluation.corpora import Corpus, CorpusError, read_corpus
from streamnb.evaluation.crossval import cross_validate, kfold_indices
from streamnb.evaluation.evaluate import EvaluationRun, evaluate_corpus
from streamnb.evaluation.options import OptionsError, Tables
from streamnb.evaluation.replay import ReplayResult, class_scores, featurize_all, replay

__all__ = [
    "Corpus",
    "CorpusError",
    "EvaluationRun",
    "OptionsError",
    "ReplayResult",
    "Tables",
    "class_scores",
    "cross_validate",
    "evaluate_corpus",
    "featurize_all",
    "kfold_indices",
    "read_corpus",
    "replay",
]
