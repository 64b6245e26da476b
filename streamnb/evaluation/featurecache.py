"""A disk cache of featurized corpora, so repeated runs with the same featurizer skip featurizing.

Tuning model options means replaying one stream many times; featurizing raw mail is often more
than half of a replay. ``streamnb evaluate --feature-cache DIR`` keeps each stream's pipeline
outputs in DIR, keyed by everything that could change them: the corpus files (path, size,
modification time), the message order (shuffle, limit), the view, the ``[features]`` table,
whether the model takes numeric input, and the source code of the featurizer, pipeline and
codec. Change any of them and the entry is simply not found.

Entries are JSON (never pickle, so a cache folder others can write to cannot run code): token
counts, numeric vectors, what the featurizer truncated, the mail's defects, and rejection
reasons. An entry that
cannot be read is featurized again and replaced.

>>> key_of({"corpus": "x"}) == key_of({"corpus": "x"}) != key_of({"corpus": "y"})
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
from pathlib import Path

import orjson

from streamnb.evaluation.corpora import Corpus
from streamnb.evaluation.replay import Featurizations, featurize_all
from streamnb.pipeline import Prepared

log = logging.getLogger("streamnb.evaluation")

#: Bumped when the layout of an entry changes; part of every key.
ENTRY_VERSION = 2

__all__ = ["cached_featurize", "key_of"]

_PACKAGE = Path(__file__).resolve().parent.parent
# The code whose output is cached: a change to any of it invalidates every entry.
_CODE = ("features", "pipeline.py", "codec.py", "hashing.py")


def _code_digest() -> str:
    digest = hashlib.sha256()
    for name in _CODE:
        path = _PACKAGE / name
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(_PACKAGE)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def _corpus_files(corpus: Corpus) -> list[list]:
    folder = corpus.path if corpus.path.is_dir() else None
    files = sorted(folder.iterdir()) if folder else [corpus.path]
    return [
        [str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()
    ]


def key_of(description: dict) -> str:
    return hashlib.sha256(json.dumps(description, sort_keys=True, default=str).encode()).hexdigest()


def cached_featurize(pipeline, corpus: Corpus, features: dict, directory: Path) -> Featurizations:
    """``featurize_all(pipeline, corpus.messages)``, read from ``directory`` when possible."""
    order = hashlib.sha256("\n".join(m.id for m in corpus.messages).encode()).hexdigest()
    key = key_of(
        {
            "corpus": _corpus_files(corpus),
            "format": corpus.format,
            "view": corpus.view,
            "order": order,
            "features": features,
            "numeric": pipeline.numeric,
            "code": _code_digest(),
            "entry": ENTRY_VERSION,
        }
    )
    directory = Path(directory)
    entry = directory / f"{key}.json"
    if entry.is_file():
        try:
            return _decode(orjson.loads(entry.read_bytes()))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            log.warning("feature cache entry %s unreadable (%s): featurizing again", entry, error)
    featurized = featurize_all(pipeline, corpus.messages)
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(orjson.dumps(_encode(featurized)))
        os.replace(temporary, entry)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return featurized


def _number(value: float) -> float | str:
    """JSON has no NaN or infinity: those travel as their str()."""
    return value if math.isfinite(value) else str(value)


def _encode(featurized: Featurizations) -> dict:
    prepared = []
    for item in featurized.prepared:
        if isinstance(item, str):  # the reason the message was rejected
            prepared.append({"rejected": item})
        elif isinstance(item.x, dict):
            prepared.append({"tokens": item.x, "truncated": list(item.truncated),
                             "defects": list(item.defects)})
        else:
            prepared.append({"numeric": [_number(float(v)) for v in item.x],
                             "truncated": list(item.truncated), "defects": list(item.defects)})
    return {"version": ENTRY_VERSION, "prepared": prepared, "seconds": featurized.seconds}


def _decode(body: dict) -> Featurizations:
    if body["version"] != ENTRY_VERSION:
        raise ValueError(f"entry version {body['version']!r}")
    prepared = []
    for item in body["prepared"]:
        if "rejected" in item:
            prepared.append(str(item["rejected"]))
        elif "tokens" in item:
            prepared.append(Prepared(dict(item["tokens"]), tuple(item["truncated"]),
                                     tuple(item["defects"])))
        else:
            prepared.append(Prepared([float(v) for v in item["numeric"]],
                                     tuple(item["truncated"]), tuple(item["defects"])))
    return Featurizations(prepared, [float(v) for v in body["seconds"]])
