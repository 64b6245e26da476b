"""Parity with scikit-learn on real corpora: same α, same priors, same numbers to ~1e-9."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.naive_bayes import BernoulliNB as SkBernoulliNB
from sklearn.naive_bayes import GaussianNB as SkGaussianNB
from sklearn.naive_bayes import MultinomialNB as SkMultinomialNB

from streamnb.hashing import stable_bucket
from streamnb.models import GDA, BernoulliNB, MultinomialNB, make_model
from tests.models.conftest import count_matrix


def ours_as_matrix(model, X, classes):
    return np.array([[lp[c] for c in classes] for lp in model.predict_log_proba_many(X)])


def split(corpus, n_train):
    X, y = corpus
    return X[:n_train], y[:n_train], X[n_train:]


CORPORA = {"sms": 4000, "spamassassin": 1400}  # name -> messages used for training


@pytest.mark.parametrize("corpus_name", sorted(CORPORA))
@pytest.mark.parametrize("ours, theirs", [(MultinomialNB, SkMultinomialNB),
                                          (BernoulliNB, SkBernoulliNB)])
def test_default_models_are_sklearns_default_models(request, corpus_name, ours, theirs):
    """Both sides built with their defaults, fitted on the same token counts."""
    X_train, y_train, X_test = split(request.getfixturevalue(corpus_name), CORPORA[corpus_name])
    model = ours()
    model.learn_many(X_train, y_train)
    vocabulary = sorted({token for doc in X_train for token in doc})
    reference = theirs().fit(count_matrix(X_train, vocabulary), y_train)
    test_matrix = count_matrix(X_test, vocabulary)
    np.testing.assert_allclose(ours_as_matrix(model, X_test, reference.classes_),
                               reference.predict_log_proba(test_matrix), rtol=1e-9, atol=1e-9)
    assert model.predict_many(X_test) == reference.predict(test_matrix).tolist()


@pytest.mark.parametrize("corpus_name, alpha", [("sms", 1.0), ("sms", 0.1), ("spamassassin", 1.0)])
@pytest.mark.parametrize("repeated_words", ["count", "mixed", "binary"])
def test_multinomial_matches_sklearn(request, corpus_name, repeated_words, alpha):
    n_train = CORPORA[corpus_name]
    X_train, y_train, X_test = split(request.getfixturevalue(corpus_name), n_train)
    model = MultinomialNB(alpha=alpha, repeated_words=repeated_words)
    model.learn_many(X_train, y_train)
    vocabulary = sorted({token for doc in X_train for token in doc})
    assert model.vocabulary_size == len(vocabulary)
    reference = SkMultinomialNB(alpha=alpha).fit(
        count_matrix(X_train, vocabulary, binary=repeated_words == "binary"), y_train)
    # "mixed" scores each word once: sklearn's counts model applied to binarised messages
    test_matrix = count_matrix(X_test, vocabulary, binary=repeated_words != "count")
    expected = reference.predict_log_proba(test_matrix)
    got = ours_as_matrix(model, X_test, reference.classes_)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    assert model.predict_many(X_test) == reference.predict(test_matrix).tolist()


@pytest.mark.parametrize("corpus_name, alpha", [("sms", 1.0), ("sms", 0.1), ("spamassassin", 1.0)])
def test_bernoulli_matches_sklearn(request, corpus_name, alpha):
    n_train = CORPORA[corpus_name]
    X_train, y_train, X_test = split(request.getfixturevalue(corpus_name), n_train)
    model = BernoulliNB(alpha=alpha)
    model.learn_many(X_train, y_train)
    vocabulary = sorted({token for doc in X_train for token in doc})
    reference = SkBernoulliNB(alpha=alpha, binarize=0.0).fit(
        count_matrix(X_train, vocabulary), y_train)
    test_matrix = count_matrix(X_test, vocabulary)
    expected = reference.predict_log_proba(test_matrix)
    got = ours_as_matrix(model, X_test, reference.classes_)
    # the absent-word sum runs over ~50k words: compare relative to its size
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    assert model.predict_many(X_test) == reference.predict(test_matrix).tolist()


def test_bernoulli_matches_sklearn_after_unlearning(sms):
    """The absent-word histogram stays exact when words leave the vocabulary again."""
    X, y = sms
    model = BernoulliNB()
    model.learn_many(X[:3000], y[:3000])
    model.unlearn_many(X[1000:2000], y[1000:2000])
    kept_X, kept_y = X[:1000] + X[2000:3000], y[:1000] + y[2000:3000]
    vocabulary = sorted({token for doc in kept_X for token in doc})
    assert model.vocabulary_size == len(vocabulary)
    reference = SkBernoulliNB(alpha=1.0).fit(count_matrix(kept_X, vocabulary), kept_y)
    expected = reference.predict_log_proba(count_matrix(X[4000:], vocabulary))
    np.testing.assert_allclose(ours_as_matrix(model, X[4000:], reference.classes_), expected,
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", ["multinomial", "bernoulli"])
def test_hashed_models_match_sklearn_on_bucket_counts(sms, kind):
    X, y = sms
    n_buckets = 4096
    model = make_model(kind, n_buckets=n_buckets)
    model.learn_many(X[:4000], y[:4000])

    def hashed(doc):
        buckets: dict[str, int] = {}
        for token, count in doc.items():
            key = str(stable_bucket(token, n_buckets))
            buckets[key] = buckets.get(key, 0) + count
        return buckets

    train = [hashed(doc) for doc in X[:4000]]
    used = sorted({b for doc in train for b in doc})
    assert model.vocabulary_size == len(used) <= n_buckets
    sk = SkMultinomialNB() if kind == "multinomial" else SkBernoulliNB()
    sk.fit(count_matrix(train, used), y[:4000])
    expected = sk.predict_log_proba(count_matrix([hashed(d) for d in X[4000:]], used))
    np.testing.assert_allclose(ours_as_matrix(model, X[4000:], sk.classes_), expected,
                               rtol=1e-9, atol=1e-9)


def test_gda_matches_linear_discriminant_analysis_lsqr(spambase):
    X, y = spambase
    model = GDA()
    for x, label in zip(X, y, strict=True):
        model.learn_one(x, label)
    reference = LinearDiscriminantAnalysis(solver="lsqr").fit(X, y)
    assert model.classes == reference.classes_.tolist()
    means = np.array([model.means()[c] for c in reference.classes_])
    np.testing.assert_allclose(means, reference.means_, rtol=1e-10, atol=1e-12)
    # sklearn's lsqr covariance is Σ_c prior_c · (biased covariance of class c) = Σ_c S_c / m
    np.testing.assert_allclose(model.covariance(), reference.covariance_, rtol=1e-9, atol=1e-12)
    biased = [np.cov(X[y == c].T, bias=True) for c in reference.classes_]
    priors = [np.mean(y == c) for c in reference.classes_]
    np.testing.assert_allclose(reference.covariance_, sum(p * s for p, s in zip(priors, biased,
                                                                                  strict=True)),
                               rtol=1e-9)
    assert not model.regularized
    proba = np.array([[p[c] for c in reference.classes_] for p in model.predict_proba_many(X)])
    np.testing.assert_allclose(proba, reference.predict_proba(X), rtol=1e-7, atol=1e-9)
    assert model.predict_many(X) == reference.predict(X).tolist()


def test_diagonal_gda_matches_gaussian_nb(spambase):
    X, y = spambase
    model = GDA(covariance="diagonal")
    model.learn_many(X, y)
    reference = SkGaussianNB(var_smoothing=0.0).fit(X, y)
    expected = reference.predict_log_proba(X)
    got = np.array([[lp[c] for c in reference.classes_] for lp in model.predict_log_proba_many(X)])
    finite = np.isfinite(expected)  # sklearn saturates to -inf where we keep the log value
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-9, atol=1e-9)
    assert model.predict_many(X) == reference.predict(X).tolist()
