"""The filters compared on one stream: streamnb, river, scikit-learn, bogofilter, crm114,
spamprobe and rspamd's Bayes.

Every filter sees the same messages in the same order under TREC's immediate-feedback protocol:
score the message, then learn it with its gold label. Each returns, per message, the predicted
label and a spamminess score (higher = more spam), and the evaluation's scoring turns those into
the same figures for all of them.

The Python peers get their tokens from streamnb's featurizer (they have no mail parser of their
own), so their rows compare the models on identical input; bogofilter parses the raw mail itself.
Scores are log-odds from each library's joint log-likelihoods where it has them, so saturated
probabilities do not tie.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from streamnb.codec import Message

SPAM = "spam"

# scikit-learn's partial_fit needs a fixed input width: tokens are hashed into this many buckets.
# Laplace smoothing spreads mass over every bucket, so a width far above the real vocabulary
# (2**20, HashingVectorizer's default) drowns the few words a young model has seen; 2**16 is
# near the vocabulary of these streams and keeps partial_fit (O(width) per call) bearable.
SKLEARN_BUCKETS = 2**16


@dataclass
class PeerRun:
    """What a filter did on the stream (possibly cut short by the time budget)."""

    labels: list[str] = field(default_factory=list)
    predicted: list[str | None] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    seconds: float = 0.0  # everything: featurizing/parsing, scoring, learning
    seconds_model: float | None = None  # scoring + learning only, where it can be separated
    finished: bool = True
    notes: dict = field(default_factory=dict)


def _log_odds(joint: dict, positive: str = SPAM) -> float:
    """The ranking score, by the same rule as streamnb's own (``class_scores``)."""
    from streamnb.evaluation.replay import class_scores

    return float(class_scores([joint], positive)[0])


def _argmax(joint: dict) -> str | None:
    return max(sorted(joint), key=joint.__getitem__) if joint else None


def _touch_featurizer(featurizer) -> None:
    # Imports and lazy set-up (HTML parser, Chinese dictionary) happen before memory is measured.
    featurizer.from_raw("Subject: 你好\n\n<html><b>hi</b> 发票 http://example.com</html>".encode())
    featurizer.from_text("warm up")


class StreamnbFilter:
    """streamnb's pipeline, built from ``config.toml`` (or the built-in defaults)."""

    name = "streamnb"

    def __init__(self, tables=None):
        from streamnb.evaluation.options import Tables

        self.tables = tables or Tables.load(None)

    def warm_up(self) -> None:
        from streamnb.evaluation import replay  # noqa: F401

        self.pipeline = self.tables.build_pipeline()
        _touch_featurizer(self.pipeline.featurizer)

    def run(self, messages: list[Message], budget: float) -> PeerRun:
        from streamnb.evaluation.replay import class_scores, replay

        result = replay(self.pipeline, messages)
        return PeerRun(
            labels=result.labels,
            predicted=result.predicted,
            scores=class_scores(result.log_proba, SPAM).tolist(),
            seconds=result.seconds,
            seconds_model=result.seconds_model,
            notes={"options": self.tables.describe(), "skipped": dict(result.skipped)},
        )


class _TokenPeer:
    """A Python model fed streamnb's token counts."""

    name = "?"

    def warm_up(self) -> None:
        from streamnb.pipeline import build_pipeline

        self.featurizer = build_pipeline({"kind": "multinomial"}, {}).featurizer
        _touch_featurizer(self.featurizer)

    def run(self, messages: list[Message], budget: float) -> PeerRun:
        featurizer = self.featurizer
        out = PeerRun()
        model_seconds = 0.0
        started = time.perf_counter()
        for message in messages:
            if message.raw is not None:
                x = featurizer.from_raw(message.raw).tokens
            else:
                x = featurizer.from_text(message.text).tokens
            before = time.perf_counter()
            predicted, score = self.score(x)
            self.learn(x, message.label)
            model_seconds += time.perf_counter() - before
            out.labels.append(message.label)
            out.predicted.append(predicted)
            out.scores.append(score)
            if time.perf_counter() - started > budget:
                out.finished = len(out.labels) == len(messages)
                break
        out.seconds = time.perf_counter() - started
        out.seconds_model = model_seconds
        return out


class RiverFilter(_TokenPeer):
    def __init__(self, kind: str):
        from river import naive_bayes

        self.name = f"river-{kind}"
        cls = {"multinomial": naive_bayes.MultinomialNB, "bernoulli": naive_bayes.BernoulliNB}
        self.model = cls[kind](alpha=1.0)

    def score(self, x):
        joint = self.model.joint_log_likelihood(x) if self.model.class_counts else {}
        return _argmax(joint), _log_odds(joint)

    def learn(self, x, y):
        self.model.learn_one(x, y)


class SklearnFilter(_TokenPeer):
    """``partial_fit`` one message at a time on hashed token counts (fixed width)."""

    def __init__(self, kind: str, classes: list[str]):
        from sklearn import naive_bayes
        from sklearn.feature_extraction import FeatureHasher

        self.name = f"sklearn-{kind}"
        cls = {"multinomial": naive_bayes.MultinomialNB, "bernoulli": naive_bayes.BernoulliNB}
        self.model = cls[kind](alpha=1.0)
        self.hasher = FeatureHasher(
            n_features=SKLEARN_BUCKETS, input_type="dict", alternate_sign=False
        )
        self.classes = sorted(classes)
        self.fitted = False

    def score(self, x):
        if not self.fitted:
            return None, 0.0
        row = self.hasher.transform([x])
        joint_row = self.model.predict_joint_log_proba(row)[0]
        # Classes not seen yet keep zero counts but a -inf prior; leave them out.
        joint = {
            c: float(v)
            for c, v, n in zip(self.model.classes_, joint_row, self.model.class_count_, strict=True)
            if n > 0
        }
        return _argmax(joint), _log_odds(joint)

    def learn(self, x, y):
        self.model.partial_fit(self.hasher.transform([x]), [y], classes=self.classes)
        self.fitted = True


class CommandPeer:
    """A filter that runs outside Python, driven one message at a time: score, then learn.

    A subclass says how to start a fresh state in a temporary folder, how to score one raw
    message (a spamminess, higher = more spam, and its own decision) and how to learn it; this
    class runs the immediate-feedback loop, the time budget and the clean-up, so every outside
    filter is driven the same way. A text message (SMS) is sent as the body of a mail with no
    headers.
    """

    name = "?"
    programs: tuple[str, ...] = ()  # executables that must be on PATH
    install = ""  # how to get them, for the line that says the filter was skipped

    def missing(self) -> str | None:
        """Why this filter cannot run here (a program not installed), or None."""
        absent = [p for p in self.programs if shutil.which(p) is None]
        if absent:
            return f"{', '.join(absent)} not found ({self.install})"
        return None

    def warm_up(self) -> None:
        if (why := self.missing()) is not None:
            raise RuntimeError(f"{self.name} skipped: {why}")

    # --- what a subclass provides ---------------------------------------------------------
    def start(self, folder: str) -> None:
        """Begin with an empty state kept in ``folder``."""

    def stop(self) -> None:
        """Stop whatever :meth:`start` started (called even when the run failed)."""

    def score(self, data: bytes) -> tuple[float, bool]:
        raise NotImplementedError

    def learn(self, data: bytes, is_spam: bool, score: float) -> None:
        raise NotImplementedError

    def state_bytes(self, folder: str) -> int:
        """Size of the learnt state (by default: the files in ``folder``)."""
        return sum(
            os.path.getsize(os.path.join(root, f))
            for root, _, files in os.walk(folder)
            for f in files
        )

    def version(self) -> str:
        return "?"

    # --- the loop, the same for every outside filter ---------------------------------------
    def run(self, messages: list[Message], budget: float) -> PeerRun:
        out = PeerRun(seconds_model=None)
        folder = tempfile.mkdtemp(prefix=f"{self.name}-")
        try:
            self.start(folder)
            started = time.perf_counter()
            for message in messages:
                data = message.raw if message.raw is not None else b"\n" + message.text.encode()
                score, is_spam = self.score(data)
                self.learn(data, message.label == SPAM, score)
                out.labels.append(message.label)
                out.predicted.append(SPAM if is_spam else "ham")
                out.scores.append(score)
                if time.perf_counter() - started > budget:
                    out.finished = len(out.labels) == len(messages)
                    break
            out.seconds = time.perf_counter() - started
            out.notes["wordlist_bytes"] = self.state_bytes(folder)
            out.notes["version"] = self.version()
            out.notes.update(self.settings())
        finally:
            self.stop()
            shutil.rmtree(folder, ignore_errors=True)
        return out

    def settings(self) -> dict:
        """The filter's parameters worth printing beside its row."""
        return {}


def _first_line(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return ((done.stdout or done.stderr).strip().splitlines() or ["?"])[0].strip()


class BogofilterFilter(CommandPeer):
    """bogofilter 1.2.x, one process per step: ``-TT`` to score, then ``-s`` / ``-n`` to learn.

    Its own defaults (``-C``: no config file), a fresh word list in a temporary folder, and its
    own decision (spam when the score reaches its ``spam_cutoff``, 0.99; "unsure" counts as not
    spam, as the message is delivered).
    """

    name = "bogofilter"
    programs = ("bogofilter",)
    install = "apt-get install bogofilter"
    SPAM_CUTOFF = 0.99

    def start(self, folder: str) -> None:
        self.base = ["bogofilter", "-C", "-d", folder]
        self.wordlist = os.path.join(folder, "wordlist.db")

    def score(self, data: bytes) -> tuple[float, bool]:
        if not os.path.exists(self.wordlist):
            return 0.5, False  # nothing registered yet: bogofilter refuses to score; unsure
        scored = subprocess.run([*self.base, "-TT"], input=data, capture_output=True, check=False)
        # Exit status: 0 spam, 1 ham, 2 unsure, 3 error.
        if scored.returncode == 3:
            raise RuntimeError(f"bogofilter failed: {scored.stderr.decode()[:200]}")
        score = float(scored.stdout.split()[-1])
        return score, score >= self.SPAM_CUTOFF

    def learn(self, data: bytes, is_spam: bool, score: float) -> None:
        subprocess.run(
            [*self.base, "-s" if is_spam else "-n"], input=data, capture_output=True, check=True
        )

    def version(self) -> str:
        return _first_line(["bogofilter", "-V"])


class Crm114Filter(CommandPeer):
    """crm114 (20100106) with its OSB or OSBF classifier, through the classic one-line programs.

    ``learn <osb unique microgroom> (spam.css)`` (or ``ham.css``) and ``classify`` with the
    same flags; OSBF (``<osbf unique microgroom>``, crm114's "orthogonal sparse bigrams with
    confidence factors", its own ``.cfc`` file format) the same way. The score is the spam
    side's pR (log10 of the odds, the first line of its statistics), the decision pR > 0.
    ``thick`` is crm114's thick-threshold training: a message is learnt only when it was
    misclassified or scored within ``THICK`` of 0 (|pR| < 5, for both classifiers); otherwise
    every message is learnt.
    """

    programs = ("crm",)
    install = "apt-get install crm114"
    THICK = 5.0
    _PR = re.compile(rb"pR:\s*(-?[0-9.]+(?:e[-+]?[0-9]+)?|-?inf|nan)", re.IGNORECASE)
    # classifier -> (flags, statistics file extension)
    CLASSIFIERS = {"osb": ("<osb unique microgroom>", "css"),
                   "osbf": ("<osbf unique microgroom>", "cfc")}

    def __init__(self, thick: bool, classifier: str = "osb"):
        self.thick = thick
        self.classifier = classifier
        self.flags, self.extension = self.CLASSIFIERS[classifier]
        self.name = f"crm114-{classifier}" + ("-thick" if thick else "")

    def start(self, folder: str) -> None:
        self.folder = folder
        self.learnt = {True: 0, False: 0}
        # classify "fails" (jumps past the end of its block) when the first file loses, so it
        # sits in a block of its own and the statistics are printed either way.
        spam, ham = f"spam.{self.extension}", f"ham.{self.extension}"
        self.files = {True: spam, False: ham}
        self.classify = (
            f"-{{ isolate (:s:); {{ classify {self.flags} ({spam} | {ham}) (:s:) }};"
            " output /:*:s:/ }"
        )

    def _crm(self, program: str, data: bytes) -> bytes:
        done = subprocess.run(
            ["crm", program], input=data, capture_output=True, cwd=self.folder, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"crm114 failed: {done.stderr.decode(errors='replace')[:200]}")
        return done.stdout

    def score(self, data: bytes) -> tuple[float, bool]:
        if not all(self.learnt.values()):
            return 0.0, False  # classify needs both statistics files; until then pR 0 (unsure)
        found = self._PR.search(self._crm(self.classify, data))
        if found is None:
            raise RuntimeError("crm114 printed no pR")
        pr = float(found.group(1))
        return pr, pr > 0

    def learn(self, data: bytes, is_spam: bool, score: float) -> None:
        if self.thick and all(self.learnt.values()):
            correct = (score > 0) == is_spam
            if correct and abs(score) >= self.THICK:
                return
        self._crm(f"-{{ learn {self.flags} ({self.files[is_spam]}) }}", data)
        self.learnt[is_spam] += 1

    def version(self) -> str:
        return _first_line(["crm", "-v"])

    def settings(self) -> dict:
        return {"learnt": self.learnt[True] + self.learnt[False]}


class SpamprobeFilter(CommandPeer):
    """SpamProbe 1.4: ``score``, then ``train-spam`` or ``train-good``, a fresh database.

    ``train-*`` is SpamProbe's own training mode: it updates the database only for a message
    it misclassified or found "difficult" (its documented use with a gold label). The score is
    its spam probability (7 decimals), the decision its own SPAM/GOOD verdict.
    """

    name = "spamprobe"
    programs = ("spamprobe",)
    install = "apt-get install spamprobe"

    def start(self, folder: str) -> None:
        self.base = ["spamprobe", "-d", folder]
        self.words = os.path.join(folder, "sp_words")

    def score(self, data: bytes) -> tuple[float, bool]:
        if not os.path.exists(self.words):
            return 0.5, False  # no database before the first training: unsure
        done = subprocess.run([*self.base, "score"], input=data, capture_output=True, check=False)
        fields = done.stdout.split()
        if done.returncode == 0 and not fields and not data.strip():
            # An empty message (the body-only view of a mail without text): spamprobe reads no
            # message in it and prints nothing; it scores an empty mail 0.5, GOOD.
            return 0.5, False
        if done.returncode != 0 or len(fields) < 2:
            raise RuntimeError(f"spamprobe failed: {done.stderr.decode(errors='replace')[:200]}")
        return float(fields[1]), fields[0] == b"SPAM"

    def learn(self, data: bytes, is_spam: bool, score: float) -> None:
        command = "train-spam" if is_spam else "train-good"
        subprocess.run([*self.base, command], input=data, capture_output=True, check=True)

    def version(self) -> str:
        return "spamprobe " + _debian_version("spamprobe")


def _debian_version(package: str) -> str:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RspamdBayesFilter(CommandPeer):
    """rspamd 3.4's Bayes classifier alone, its statistics in a private redis-server.

    A fresh ``redis-server`` (no persistence) and ``rspamd`` with a configuration of nothing
    but the Bayes classifier (OSB tokenizer, redis backend, ``new_schema``) and a controller
    worker, both bound to 127.0.0.1 on free ports. Each message is scanned with the
    controller's ``/checkv2`` and learnt with ``/learnspam`` or ``/learnham`` (what ``rspamc
    learn_spam`` sends), every message, as the gold label says (no ``learn_condition``: the
    shipped one skips messages already classified with 95% confidence).

    ``MIN_LEARNS`` = 1: rspamd classifies as soon as each class has one learnt message (its
    default, 200, would leave the first few hundred messages unscored). rspamd reads the
    learn counts from redis periodically, so the first messages after a start stay unscored
    (0) until that refresh, a second or so. ``MIN_TOKENS`` = 1: its
    default, 11, skips short messages, which are most of an SMS stream. The score is the
    BAYES_SPAM symbol's normalised probability, minus BAYES_HAM's (symbol weights ±1), 0 when
    rspamd gives neither; the decision is BAYES_SPAM.
    """

    name = "rspamd-bayes"
    programs = ("rspamd", "redis-server")
    install = "apt-get install rspamd redis-server"
    MIN_LEARNS = 1
    MIN_TOKENS = 1
    STARTUP_SECONDS = 120.0
    # The controller's answer for a message whose token set it has learnt already. On the
    # Chinese views (no Content-Type left, so no charset) rspamd 3.4 reads 1 to 6 tokens from
    # many GB2312 texts, so different messages share a token set and are refused this way;
    # the same texts with "charset=gb2312" declared give hundreds of tokens each
    # (docs/benchmarks.md, "Notes on the peers").
    ALREADY_LEARNED = "has been already learned"

    CONFIG = """\
options {{
  pidfile = "{folder}/rspamd.pid";
  filters = "";
  tempdir = "{folder}";
  hs_cache_dir = "{folder}";
  control_socket = "{folder}/rspamd.sock mode=0600";
  stats_file = "{folder}/stats.ucl";
  url_tld = "/usr/share/rspamd/effective_tld_names.dat";
  dns {{ nameserver = ["127.0.0.1:53"]; timeout = 0.1s; retransmits = 0; }}
}}
logging {{ type = "file"; filename = "{folder}/rspamd.log"; level = "warning"; }}
group "bayes" {{
  symbols {{
    "BAYES_SPAM" {{ weight = 1.0; }}
    "BAYES_HAM" {{ weight = -1.0; }}
  }}
}}
classifier "bayes" {{
  tokenizer {{ name = "osb"; }}
  backend = "redis";
  servers = "127.0.0.1:{redis_port}";
  new_schema = true;
  min_tokens = {min_tokens};
  min_learns = {min_learns};
  statfile {{ symbol = "BAYES_HAM"; spam = false; }}
  statfile {{ symbol = "BAYES_SPAM"; spam = true; }}
}}
worker "controller" {{
  bind_socket = "127.0.0.1:{controller_port}";
  count = 1;
  secure_ip = "127.0.0.1";
}}
"""

    def start(self, folder: str) -> None:
        self.processes: list[subprocess.Popen] = []
        self.redis_port, controller_port = _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{controller_port}"
        self.processes.append(subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port),
             "--save", "", "--appendonly", "no", "--dir", folder],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        config = os.path.join(folder, "rspamd.conf")
        with open(config, "w", encoding="utf-8") as f:
            f.write(self.CONFIG.format(
                folder=folder, redis_port=self.redis_port, controller_port=controller_port,
                min_tokens=self.MIN_TOKENS, min_learns=self.MIN_LEARNS,
            ))
        self.processes.append(subprocess.Popen(
            ["rspamd", "-f", "-u", "root", "-g", "root", "-c", config]
            if os.geteuid() == 0 else ["rspamd", "-f", "-c", config],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        deadline = time.monotonic() + self.STARTUP_SECONDS
        while True:  # rspamd compiles its regular expressions before the controller answers
            try:
                self._post("/ping", b"")
                return
            except OSError:
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                    raise RuntimeError(
                        f"rspamd did not start; see its log in {folder}/rspamd.log"
                    ) from None
                time.sleep(0.5)

    def stop(self) -> None:
        for process in reversed(getattr(self, "processes", [])):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _post(self, path: str, data: bytes) -> bytes:
        request = urllib.request.Request(self.url + path, data=data, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read()

    def score(self, data: bytes) -> tuple[float, bool]:
        symbols = json.loads(self._post("/checkv2", data)).get("symbols", {})
        spam = symbols.get("BAYES_SPAM", {}).get("score", 0.0)
        ham = symbols.get("BAYES_HAM", {}).get("score", 0.0)  # weight -1: already negative
        return float(spam + ham), "BAYES_SPAM" in symbols

    def learn(self, data: bytes, is_spam: bool, score: float) -> None:
        # rspamd declines some learns with an error in a 2xx answer: "<id> has been already
        # learned as ham, ignore it" for a message whose Bayes tokens hash to a learnt one's
        # (its learn cache keys a message by its token set: a duplicate text, or a message it
        # read almost no tokens from, see ALREADY_LEARNED), or one with no tokens at all. The
        # filter goes on, as a mail server would, and the counts say how often and why.
        try:
            answer = json.loads(self._post("/learnspam" if is_spam else "/learnham", data))
        except urllib.error.HTTPError as error:
            if error.code >= 500:
                raise
            answer = {"error": error.code}
        if "error" in answer:
            self.refused = getattr(self, "refused", 0) + 1
            if self.ALREADY_LEARNED in str(answer["error"]):
                self.already_learned = getattr(self, "already_learned", 0) + 1

    def state_bytes(self, folder: str) -> int:
        info = subprocess.run(
            ["redis-cli", "-p", str(self.redis_port), "info", "memory"],
            capture_output=True, text=True, check=False,
        ).stdout
        for line in info.splitlines():
            if line.startswith("used_memory:"):
                return int(line.split(":")[1])
        return 0

    def version(self) -> str:
        return _first_line(["rspamd", "--version"])

    def settings(self) -> dict:
        return {
            "min_learns": self.MIN_LEARNS,
            "min_tokens": self.MIN_TOKENS,
            "refused_learns": getattr(self, "refused", 0),
            "refused_as_already_learned": getattr(self, "already_learned", 0),
        }


# Filters whose cost per message grows with the vocabulary: only these are cut off by the time
# budget; every other filter runs the whole stream.
BUDGETED = ("river-bernoulli",)

PEERS = (
    "streamnb",
    "river-multinomial",
    "river-bernoulli",
    "sklearn-multinomial",
    "sklearn-bernoulli",
    "bogofilter",
    "crm114-osb",
    "crm114-osb-thick",
    "crm114-osbf",
    "crm114-osbf-thick",
    "spamprobe",
    "rspamd-bayes",
)

# The mail filters users choose between, side by side in the summary table (each a program of
# its own, so a missing one is skipped with a line that says how to install it).
MAIL_FILTERS = (
    "streamnb",
    "bogofilter",
    "crm114-osb",
    "crm114-osb-thick",
    "crm114-osbf",
    "crm114-osbf-thick",
    "spamprobe",
    "rspamd-bayes",
)


def make_filter(name: str, classes: list[str], tables=None):
    """The filter called ``name``; ``tables`` are streamnb's options (default: ./config.toml)."""
    if name == "streamnb":
        return StreamnbFilter(tables)
    if name.startswith("river-"):
        return RiverFilter(name.split("-", 1)[1])
    if name.startswith("sklearn-"):
        return SklearnFilter(name.split("-", 1)[1], classes)
    if name == "bogofilter":
        return BogofilterFilter()
    if name in ("crm114-osb", "crm114-osb-thick", "crm114-osbf", "crm114-osbf-thick"):
        return Crm114Filter(thick=name.endswith("-thick"), classifier=name.split("-")[1])
    if name == "spamprobe":
        return SpamprobeFilter()
    if name == "rspamd-bayes":
        return RspamdBayesFilter()
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
