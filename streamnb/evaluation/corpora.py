"""Labelled corpora on disk -> :class:`~streamnb.codec.Message` objects, in the corpus' order.

Four layouts are read, and :func:`detect_format` tells them apart from the path alone:

``mail-folder``
    a folder with an ``index`` file (``<label> <member-path>`` per line, TREC's ``full/index``
    layout) and one or more ``messages*.tar.gz`` archives holding the members. Each message is
    the member's bytes, untouched (``Message.raw``), in index order.
``tsv-text``
    a ``label<TAB>text`` file, one message per line (the SMS Spam Collection): ``Message.text``.
``tsv-tokens``
    the same layout, but the text is already tokenized and split on whitespace (WebKB's
    ``*-stemmed.txt``): ``Message.tokens``. Chosen for file names containing ``stemmed``.
``csv-numeric``
    comma-separated numbers with the label in the last column (UCI Spambase): ``Message.features``.
    A 0/1 label is kept as the string ``"0"`` / ``"1"``.

A folder without an ``index`` is accepted when it holds exactly one file of a known layout
(``streamnb evaluate ../shared/data/sms-spam-collection`` reads ``SMSSpamCollection``).

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "sms.txt"
>>> _ = path.write_text("ham\\tsee you at 5\\nspam\\tWIN a prize now\\n")
>>> corpus = read_corpus(path)
>>> corpus.format, len(corpus), corpus.label_counts()
('tsv-text', 2, {'ham': 1, 'spam': 1})
>>> corpus.messages[1]
Message(id='line-2', label='spam', raw=None, text='WIN a prize now', tokens=None, features=None)
"""

from __future__ import annotations

import math
import random
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from streamnb.codec import Message

__all__ = ["FORMATS", "Corpus", "CorpusError", "detect_format", "read_corpus"]

FORMATS = ("mail-folder", "tsv-text", "tsv-tokens", "csv-numeric")

# How many lines of a flat file are sniffed to decide its layout.
_SNIFF_LINES = 20


class CorpusError(ValueError):
    """A path that is not a readable corpus, with the reason in the message."""


@dataclass(slots=True)
class Corpus:
    """The messages of one corpus, in replay order, and where they came from."""

    path: Path
    format: str
    messages: list[Message] = field(default_factory=list)
    view: str = "original"  # the form of the mail (streamnb.evaluation.views)

    def __len__(self) -> int:
        return len(self.messages)

    def labels(self) -> list[str]:
        return [m.label for m in self.messages]

    def label_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(self.labels()).items()))

    def shuffled(self, seed: int) -> Corpus:
        """The same messages in a seeded random order (``random.Random(seed).shuffle``)."""
        messages = list(self.messages)
        random.Random(seed).shuffle(messages)
        return Corpus(self.path, self.format, messages, self.view)

    def head(self, limit: int) -> Corpus:
        return Corpus(self.path, self.format, self.messages[:limit], self.view)

    def in_view(self, view: str) -> Corpus:
        """The same messages with their mail rewritten into ``view`` (see :mod:`.views`)."""
        from streamnb.evaluation.views import view_messages

        return Corpus(self.path, self.format, view_messages(self.messages, view), view)


def read_corpus(
    path: str | Path,
    fmt: str | None = None,
    *,
    shuffle: int | None = None,
    limit: int | None = None,
) -> Corpus:
    """Read the corpus at ``path`` (format detected unless ``fmt`` is given).

    ``shuffle`` reorders the whole corpus with that seed *before* ``limit`` keeps the first
    messages, so ``--shuffle 1 --limit 500`` is a random sample, not the first folder's mail.
    """
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise CorpusError(f"unknown corpus format {fmt!r}; known: {', '.join(FORMATS)}")
    if path.is_dir() and fmt != "mail-folder":
        path = _single_flat_file(path)
    reader = {
        "mail-folder": _read_mail_folder,
        "tsv-text": _read_tsv_text,
        "tsv-tokens": _read_tsv_tokens,
        "csv-numeric": _read_csv_numeric,
    }[fmt]
    corpus = Corpus(path, fmt, reader(path))
    if not corpus.messages:
        raise CorpusError(f"{path}: no messages")
    if shuffle is not None:
        corpus = corpus.shuffled(shuffle)
    if limit is not None:
        if limit < 1:
            raise CorpusError(f"limit must be at least 1, got {limit}")
        corpus = corpus.head(limit)
    return corpus


def detect_format(path: str | Path) -> str:
    """The layout of the corpus at ``path``, from its name and first lines."""
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "index").is_file():
            if not sorted(path.glob("messages*.tar.gz")):
                raise CorpusError(f"{path}: has an index but no messages*.tar.gz archive")
            return "mail-folder"
        return _sniff_file(_single_flat_file(path))
    return _sniff_file(path)


def _single_flat_file(folder: Path) -> Path:
    candidates = []
    for child in sorted(folder.iterdir()):
        if not child.is_file() or child.suffix.lower() in {".md", ".names", ".gz", ".zip"}:
            continue
        try:
            _sniff_file(child)
        except CorpusError:
            continue
        candidates.append(child)
    if len(candidates) != 1:
        found = ", ".join(c.name for c in candidates) or "none"
        raise CorpusError(
            f"{folder}: not a corpus folder (no 'index' + messages*.tar.gz), and not exactly one "
            f"label<TAB>text or numeric CSV file in it (found: {found}); give the file's path"
        )
    return candidates[0]


def _sniff_file(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            head = [handle.readline() for _ in range(_SNIFF_LINES)]
    except OSError as error:
        raise CorpusError(f"{path}: cannot read: {error}") from None
    lines = [line.decode("utf-8", "replace").rstrip("\r\n") for line in head if line.strip()]
    if not lines:
        raise CorpusError(f"{path}: empty file")
    if all(_is_numeric_row(line) for line in lines):
        return "csv-numeric"
    if all("\t" in line and line.split("\t", 1)[0].strip() for line in lines):
        return "tsv-tokens" if "stemmed" in path.name.lower() else "tsv-text"
    raise CorpusError(
        f"{path}: unknown layout; expected 'label<TAB>text' lines or comma-separated numbers "
        f"with the label last (first line: {lines[0][:80]!r})"
    )


def _is_numeric_row(line: str) -> bool:
    fields = line.split(",")
    if len(fields) < 2:
        return False
    try:
        values = [float(v) for v in fields]
    except ValueError:
        return False
    return all(math.isfinite(v) for v in values)


def _read_index(path: Path) -> list[tuple[str, str]]:
    entries = []
    with (path / "index").open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2:
                raise CorpusError(
                    f"{path / 'index'}:{number}: expected '<label> <member-path>', got {line!r:.80}"
                )
            entries.append((parts[0], parts[1]))
    return entries


def _read_mail_folder(path: Path) -> list[Message]:
    entries = _read_index(path)
    wanted = {member for _, member in entries}
    members: dict[str, bytes] = {}
    for archive in sorted(path.glob("messages*.tar.gz")):
        try:
            with tarfile.open(archive, "r:gz") as tar:
                # Stream the archive once; members are small and the index says which we need.
                for info in tar:
                    if info.isfile() and info.name in wanted:
                        members[info.name] = tar.extractfile(info).read()
        except (tarfile.TarError, OSError, EOFError) as error:
            raise CorpusError(f"{archive}: unreadable archive: {error}") from None
    missing = [member for _, member in entries if member not in members]
    if missing:
        raise CorpusError(
            f"{path}: {len(missing)} indexed members are in no archive, e.g. {missing[0]!r}"
        )
    return [Message(id=member, label=label, raw=members[member]) for label, member in entries]


def _tsv_lines(path: Path):
    with path.open("rb") as handle:
        for number, raw_line in enumerate(handle, 1):
            line = raw_line.decode("utf-8", "replace").rstrip("\r\n")
            if not line.strip():
                continue
            label, sep, text = line.partition("\t")
            label = label.strip()
            if not sep or not label:
                raise CorpusError(f"{path}:{number}: expected 'label<TAB>text', got {line!r:.80}")
            yield number, label, text


def _read_tsv_text(path: Path) -> list[Message]:
    return [
        Message(id=f"line-{number}", label=label, text=text)
        for number, label, text in _tsv_lines(path)
    ]


def _read_tsv_tokens(path: Path) -> list[Message]:
    return [
        Message(id=f"line-{number}", label=label, tokens=text.split())
        for number, label, text in _tsv_lines(path)
    ]


def _read_csv_numeric(path: Path) -> list[Message]:
    messages = []
    width = None
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            fields = line.split(",")
            if width is None:
                width = len(fields)
            if len(fields) != width or not _is_numeric_row(line):
                raise CorpusError(
                    f"{path}:{number}: expected {width} comma-separated numbers, got {line!r:.80}"
                )
            *values, label = fields
            label_value = float(label)
            label = str(int(label_value)) if label_value.is_integer() else label.strip()
            messages.append(
                Message(id=f"line-{number}", label=label, features=[float(v) for v in values])
            )
    return messages
