"""Corpus readers on the real corpora: counts match the READMEs, bytes are untouched."""

from __future__ import annotations

import hashlib

import pytest

from streamnb.evaluation.corpora import CorpusError, detect_format, read_corpus


@pytest.fixture(scope="module")
def spamassassin(data_dir):
    return read_corpus(data_dir / "spamassassin")


def test_spamassassin_counts_and_order(spamassassin):
    assert spamassassin.format == "mail-folder"
    assert spamassassin.label_counts() == {"ham": 4150, "spam": 1896}
    # Index order: easy_ham first, spam_2 last.
    assert spamassassin.messages[0].id == "easy_ham/00001.7c53336b37003a9286aba55d2945844c"
    assert spamassassin.messages[-1].id.startswith("spam_2/")


def test_spamassassin_members_are_read_byte_for_byte(spamassassin):
    # Each file is named NNNNN.<md5 of its bytes>; one hard_ham file is a known exception.
    mismatched = [
        m.id for m in spamassassin.messages
        if hashlib.md5(m.raw).hexdigest() != m.id.rsplit(".", 1)[1]
    ]
    assert mismatched == ["hard_ham/00230.244a63cd74c81123ef26129453e32c95"]


def test_sms_counts(data_dir):
    corpus = read_corpus(data_dir / "sms-spam-collection" / "SMSSpamCollection")
    assert corpus.format == "tsv-text"
    assert corpus.label_counts() == {"ham": 4827, "spam": 747}
    assert corpus.messages[0].text.startswith("Go until jurong point")


def test_folder_with_one_flat_file_reads_that_file(data_dir):
    corpus = read_corpus(data_dir / "sms-spam-collection")
    assert corpus.path.name == "SMSSpamCollection"
    assert len(corpus) == 5574


def test_spambase_counts_and_width(data_dir):
    corpus = read_corpus(data_dir / "spambase")
    assert corpus.format == "csv-numeric"
    assert corpus.label_counts() == {"0": 2788, "1": 1813}
    assert {len(m.features) for m in corpus.messages} == {57}


def test_webkb_counts_and_tokens(data_dir):
    corpus = read_corpus(data_dir / "webkb")
    assert corpus.format == "tsv-tokens"
    assert corpus.label_counts() == {"course": 310, "faculty": 374, "project": 168, "student": 544}
    assert corpus.messages[0].tokens[:3] == ["eric", "homepag", "eric"]


def test_chinese_counts(data_dir):
    corpus = read_corpus(data_dir / "chinese-spam")
    assert corpus.label_counts() == {"ham": 2902, "spam": 3190}
    assert all(isinstance(m.raw, bytes) for m in corpus.messages[:10])


def test_shuffle_is_a_seeded_permutation_applied_before_limit(data_dir):
    path = data_dir / "sms-spam-collection" / "SMSSpamCollection"
    plain = read_corpus(path)
    once = read_corpus(path, shuffle=1)
    again = read_corpus(path, shuffle=1)
    other = read_corpus(path, shuffle=2)
    assert [m.id for m in once.messages] == [m.id for m in again.messages]
    assert [m.id for m in once.messages] != [m.id for m in other.messages]
    assert sorted(m.id for m in once.messages) == sorted(m.id for m in plain.messages)
    sample = read_corpus(path, shuffle=1, limit=50)
    assert [m.id for m in sample.messages] == [m.id for m in once.messages[:50]]


def test_unknown_layouts_are_clear_errors(tmp_path, data_dir):
    (tmp_path / "notes.txt").write_text("just some words\nand more\n")
    with pytest.raises(CorpusError, match="unknown layout"):
        detect_format(tmp_path / "notes.txt")
    with pytest.raises(CorpusError, match="no such file"):
        read_corpus(tmp_path / "missing")
    with pytest.raises(CorpusError, match="not a corpus folder"):
        read_corpus(data_dir)  # the folder of corpora, not one corpus
    (tmp_path / "index").write_text("ham a/1\n")
    with pytest.raises(CorpusError, match="no messages"):
        read_corpus(tmp_path)


def test_bad_lines_name_the_line(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text("1,2,0\n3,4,1\n5,6\n")
    with pytest.raises(CorpusError, match=r"mixed.csv:3"):
        read_corpus(path, "csv-numeric")
    tsv = tmp_path / "sms.txt"
    tsv.write_text("ham\thello\nno tab here\n")
    with pytest.raises(CorpusError, match=r"sms.txt:2"):
        read_corpus(tsv, "tsv-text")


def test_index_member_missing_from_archive(tmp_path):
    import io
    import tarfile

    with tarfile.open(tmp_path / "messages.tar.gz", "w:gz") as tar:
        data = b"Subject: hi\n\nhello"
        info = tarfile.TarInfo("a/1")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "index").write_text("ham a/1\nspam a/2\n")
    with pytest.raises(CorpusError, match="1 indexed members are in no archive"):
        read_corpus(tmp_path)
    (tmp_path / "index").write_text("ham a/1\n")
    assert read_corpus(tmp_path).messages[0].raw == b"Subject: hi\n\nhello"
