"""Corpora as the text models see them: token -> count mappings, and Spambase vectors."""

from __future__ import annotations

import re
import tarfile
from collections import Counter

import numpy as np
import pytest
import scipy.sparse

WORD = re.compile(r"\w+")


def tokenize(text: str) -> dict[str, int]:
    return dict(Counter(WORD.findall(text.lower())))


@pytest.fixture(scope="session")
def sms(data_dir):
    """SMS Spam Collection: (token counts, labels) in file order."""
    lines = (data_dir / "sms-spam-collection" / "SMSSpamCollection").read_text("utf-8")
    rows = [line.split("\t", 1) for line in lines.splitlines() if "\t" in line]
    return [tokenize(text) for _, text in rows], [label for label, _ in rows]


@pytest.fixture(scope="session")
def spamassassin(data_dir):
    """Every third SpamAssassin message (2,016 of 6,046, both labels), tokenized raw text."""
    folder = data_dir / "spamassassin"
    index = [line.split() for line in (folder / "index").read_text().splitlines()][::3]
    X, y = [], []
    with tarfile.open(folder / "messages.tar.gz") as archive:
        for label, member in index:
            raw = archive.extractfile(member).read()
            X.append(tokenize(raw.decode("utf-8", "replace")))
            y.append(label)
    return X, y


@pytest.fixture(scope="session")
def spambase(data_dir):
    """Spambase: 4,601 x 57 features and labels "0"/"1"."""
    table = np.loadtxt(data_dir / "spambase" / "spambase.data", delimiter=",")
    return table[:, :-1], table[:, -1].astype(int).astype(str)


def count_matrix(docs, vocabulary, *, binary=False):
    """A sparse document x vocabulary count matrix (tokens outside ``vocabulary`` dropped)."""
    column = {token: j for j, token in enumerate(vocabulary)}
    data, indices, indptr = [], [], [0]
    for doc in docs:
        for token, count in doc.items():
            j = column.get(token)
            if j is not None:
                indices.append(j)
                data.append(1.0 if binary else float(count))
        indptr.append(len(indices))
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=(len(docs), len(vocabulary)))
