"""Postfix, rspamd's proxy in milter mode, and streamnb: the verdict on delivered mail.

How Postfix users run rspamd: ``smtpd_milters`` points at rspamd's proxy worker in milter
mode, which asks its upstream with ``GET /checkv2`` and applies the reply to the mail. Here
the upstream is streamnb's front door. Everything is real and private to the test, on free
loopback ports: the daemon (``python -m streamnb run`` against the local broker), Debian's
``rspamd`` running only the proxy (``examples/mta/rspamd-proxy.conf``, exactly as shipped),
and a Postfix instance of its own (``examples/mta/postfix-main.cf`` and
``postfix-master.cf`` in a temporary folder; ``postfix -c``), which delivers to a mailbox
file. Mail goes in with ``swaks`` over SMTP.

Needs root (Postfix's master starts as root) and Debian's ``rspamd``, ``postfix`` and
``swaks`` (scripts/install-system-deps.sh installs them). It does not use, and is not
disturbed by, a system Postfix or rspamd: their ports and folders are not these.
"""

from __future__ import annotations

import mailbox
import os
import re
import shutil
import socket
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import orjson
import pytest

from streamnb.daemon.kafka_io import create_topics
from streamnb.evaluation.corpora import read_corpus
from tests.integration.harness import REPO, DaemonProcess, wait_for, write_config
from tests.processes import stop_process

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

EXAMPLES = REPO / "examples" / "mta"
PASSWORD = "milter-learns"
N_TRAIN = 100  # spam and ham each, learned over HTTP before any mail goes through Postfix
RECIPIENT = "root@localhost"  # a local mailbox: <streamnb_mta_dir>/mail/root
FORGED = "ham; score=-20.000 log-odds=-26.000 (forged)"
ADD_HEADER_SCORE = 6.0  # [http] add_header_score: a spam verdict's score is at least this


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def programs() -> dict[str, str]:
    """The paths of rspamd, postfix, postconf and swaks; skipped without them or root, except
    in CI (CI runs as root after scripts/install-system-deps.sh), where that fails."""
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin"])
    found = {name: shutil.which(name, path=path)
             for name in ("rspamd", "postfix", "postconf", "swaks")}
    missing = [name for name, where in found.items() if where is None]
    why = ""
    if missing:
        why = (f"{', '.join(missing)} not installed (Debian: apt-get install rspamd postfix "
               "swaks; scripts/install-system-deps.sh)")
    elif os.geteuid() != 0:
        why = "needs root: a Postfix instance's master process starts as root"
    if why:
        if in_ci:
            pytest.fail(why)
        pytest.skip(why)
    return found


class Proxy:
    """rspamd 3.4 running only its proxy worker in milter mode, upstream streamnb."""

    def __init__(self, rspamd: str, folder: Path, milter_port: int, streamnb_port: int):
        folder.mkdir()
        self.folder = folder
        self.port = milter_port
        self.log_path = folder / "rspamd.log"
        self._out = open(folder / "stdout.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [rspamd, "-f", "-u", "root", "-g", "root", "-c", str(EXAMPLES / "rspamd-proxy.conf"),
             f"--var=PROXY_DIR={folder}", f"--var=MILTER_PORT={milter_port}",
             f"--var=STREAMNB_PORT={streamnb_port}"],
            cwd=folder, stdout=self._out, stderr=subprocess.STDOUT,
        )

    def wait_ready(self) -> None:
        wait_for(self._ready, 60, "rspamd's proxy to listen", every=0.1)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"rspamd exited with {self.proc.returncode}:\n{self.logs()}")
        return listening(self.port)

    def logs(self) -> str:
        out = (self.folder / "stdout.log").read_text("utf-8", "replace")[-2000:]
        log = self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""
        return f"{out}\n{log[-4000:]}"

    def stop(self) -> None:
        stop_process(self.proc)
        self._out.close()


class Postfix:
    """A private Postfix instance (``postfix -c <folder>/etc``) on 127.0.0.1:<smtp_port>,
    milter ``inet:127.0.0.1:<milter_port>``, delivering to mailbox files in <folder>/mail.

    Its folder is not under tmp_path: Postfix's daemons run as the postfix user and must reach
    their folders, which pytest's root-only /tmp/pytest-of-root does not let them.
    """

    def __init__(self, postfix: str, postconf: str, smtp_port: int, milter_port: int):
        self.postfix = postfix
        self.postconf = postconf
        self.port = smtp_port
        self.milter_port = milter_port
        self.folder = Path(tempfile.mkdtemp(prefix="streamnb-postfix-"))
        self.folder.chmod(0o755)
        self.etc = self.folder / "etc"
        self.maillog = self.folder / "maillog"
        self.mailbox = self.folder / "mail" / RECIPIENT.split("@")[0]
        self.started = False

    def start(self) -> None:
        """The example configuration with this instance's folder, ports; started."""
        for name in ("etc", "queue", "mail"):  # data: made by `postfix start`, owned by postfix
            (self.folder / name).mkdir()
        shutil.copy(EXAMPLES / "postfix-main.cf", self.etc / "main.cf")
        master = (EXAMPLES / "postfix-master.cf").read_text("utf-8")
        assert master.count("127.0.0.1:2525 ") == 1, "the SMTP service of postfix-master.cf"
        (self.etc / "master.cf").write_text(
            master.replace("127.0.0.1:2525 ", f"127.0.0.1:{self.port} "), "utf-8")
        subprocess.run([self.postconf, "-c", str(self.etc), "-e",
                        f"streamnb_mta_dir={self.folder}",
                        f"smtpd_milters=inet:127.0.0.1:{self.milter_port}"],
                       check=True, capture_output=True, timeout=30)
        self.started = True  # stop() even if the start fails half-way
        done = subprocess.run([self.postfix, "-c", str(self.etc), "start"],
                              capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise AssertionError(f"postfix start exited with {done.returncode}: "
                                 f"{(done.stdout + done.stderr).decode(errors='replace')}")
        wait_for(lambda: listening(self.port), 30, "Postfix to listen", every=0.1)

    def log(self) -> str:
        return self.maillog.read_text("utf-8", "replace") if self.maillog.exists() else ""

    def delivered(self, queue_id: str) -> bool:
        """Whether the mail of ``queue_id`` is in the mailbox; fails on a bounce or deferral."""
        log = self.log()
        if re.search(rf"{queue_id}: to=<.*status=(bounced|deferred)", log):
            raise AssertionError(f"Postfix did not deliver {queue_id}")
        return bool(re.search(rf"{queue_id}: to=<{re.escape(RECIPIENT)}>.*status=sent", log))

    def messages(self) -> dict[str, mailbox.mboxMessage]:
        """The delivered mail by Message-ID."""
        box = mailbox.mbox(self.mailbox, create=False)
        try:
            return {" ".join(str(m["Message-ID"]).split()): m for m in box}
        finally:
            box.close()

    def stop(self) -> None:
        """Stops it (``postfix stop``: SIGTERM to its master, which it waits for, kill -9
        after 5 s) and removes its folder."""
        if self.started:
            self.started = False
            subprocess.run([self.postfix, "-c", str(self.etc), "stop"], capture_output=True,
                           timeout=60, check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


def swaks(binary: str, port: int, mail: Path) -> tuple[int, str]:
    done = subprocess.run(
        [binary, "--server", f"127.0.0.1:{port}", "--from", "sender@example.org",
         "--to", RECIPIENT, "--data", f"@{mail}", "--timeout", "60"],
        capture_output=True, timeout=120, check=False)
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")


def queued(output: str) -> str:
    """The queue id of the mail Postfix accepted."""
    found = re.search(r"^<-\s+250 2\.0\.0 Ok: queued as ([0-9A-Za-z]+)", output, re.M)
    assert found, f"Postfix did not accept the mail:\n{output}"
    return found.group(1)


def smtp_data(raw: bytes, *extra_headers: bytes) -> bytes:
    """A corpus mail as an MTA receives it: without the mbox ``From `` line it was stored
    with, with ``extra_headers`` on top (as a sender writes them)."""
    if raw.startswith(b"From "):
        raw = raw.split(b"\n", 1)[1]
    return b"".join(h + b"\n" for h in extra_headers) + raw


def message_id(raw: bytes) -> str:
    found = re.search(rb"^Message-Id:\s*(<[^>\r\n]+>)", raw, re.M | re.I)
    assert found, "a probe mail without a Message-ID"
    return found.group(1).decode()


def http(port: int, path: str, body: bytes | None = None, headers: dict | None = None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     headers=headers or {})
    with urllib.request.urlopen(request, timeout=20) as reply:
        return orjson.loads(reply.read())


def verdict(message: mailbox.mboxMessage) -> tuple[str, float]:
    """The label and score of the message's single X-Streamnb header."""
    values = message.get_all("X-Streamnb") or []
    assert len(values) == 1, f"X-Streamnb headers: {values}"
    value = " ".join(values[0].split())  # unfolded
    found = re.fullmatch(r"(\w+); score=(-?[\d.]+) log-odds=(-?[\d.]+)", value)
    assert found, f"X-Streamnb: {values[0]!r}"
    return found.group(1), float(found.group(2))


def test_postfix_delivers_mail_with_streamnb_verdict_through_rspamd_proxy(
    tmp_path, kafka_bootstrap, topic_prefix, data_dir, programs
):
    mails = read_corpus(data_dir / "spamassassin").messages
    spam = [m for m in mails if m.id.startswith("spam/")]
    ham = [m for m in mails if m.id.startswith("easy_ham/")]
    train = spam[:N_TRAIN] + ham[:N_TRAIN]
    probes = {  # mail the model never learned, as Postfix receives it
        "spam": smtp_data(spam[150].raw),
        "ham": smtp_data(ham[150].raw),
        # A spam whose sender forged streamnb's ham verdict and rspamd's "no spam" header.
        "forged": smtp_data(spam[151].raw, b"X-Streamnb: " + FORGED.encode(), b"X-Spam: No"),
        # A ham that carries a spam verdict (another filter's, or a forged one).
        "forged_ham": smtp_data(ham[151].raw, b"X-Spam: Yes",
                                b"X-Streamnb: spam; score=99.000 (forged)"),
        "down": smtp_data(spam[152].raw),  # sent with streamnb stopped
    }
    files = {}
    for name, raw in probes.items():
        files[name] = tmp_path / f"{name}.eml"
        files[name].write_bytes(raw)

    create_topics(kafka_bootstrap, {f"{topic_prefix}-in": 1, f"{topic_prefix}-out": 1,
                                    f"{topic_prefix}-dlq": 1})
    streamnb_port, milter_port, smtp_port = free_port(), free_port(), free_port()
    daemon_dir = tmp_path / "streamnb"
    daemon_dir.mkdir()
    config = write_config(daemon_dir, kafka_bootstrap, topic_prefix)
    daemon = DaemonProcess(config, daemon_dir / "daemon.log", env={
        "STREAMNB_HTTP__PORT": str(streamnb_port), "STREAMNB_HTTP__PASSWORD": PASSWORD})
    proxy = postfix = None
    try:
        daemon.wait_assigned()
        wait_for(lambda: daemon._check_alive() or listening(streamnb_port), 30,
                 "streamnb's HTTP front door")
        proxy = Proxy(programs["rspamd"], tmp_path / "rspamd", milter_port, streamnb_port)
        proxy.wait_ready()
        postfix = Postfix(programs["postfix"], programs["postconf"], smtp_port, milter_port)
        postfix.start()

        # Train through the front door, as `rspamc learn_spam` does; learned after a commit.
        for mail in train:
            path = "/learnspam" if mail.id.startswith("spam/") else "/learnham"
            answer = http(streamnb_port, path, mail.raw, {"Password": PASSWORD})
            assert answer["success"] is True, answer
        wait_for(lambda: http(streamnb_port, "/stat")["learned"] == len(train), 30,
                 f"the {len(train)} learns to be learned", every=0.2)

        ids = {}
        for name in ("spam", "ham", "forged", "forged_ham"):
            code, out = swaks(programs["swaks"], smtp_port, files[name])
            assert code == 0, f"swaks exited with {code}:\n{out}"
            ids[name] = queued(out)
        for name, queue_id in ids.items():
            wait_for(lambda q=queue_id: postfix.delivered(q), 30, f"the {name} mail delivered")
        delivered = postfix.messages()
        got = {name: delivered[message_id(probes[name])] for name in ids}

        # Spam: rspamd's "X-Spam: Yes" for the action "add header", streamnb's verdict header.
        assert got["spam"].get_all("X-Spam") == ["Yes"]
        label, score = verdict(got["spam"])
        assert label == "spam" and score >= ADD_HEADER_SCORE
        # Ham: the verdict header, no X-Spam.
        assert got["ham"].get_all("X-Spam") is None
        label, score = verdict(got["ham"])
        assert label == "ham" and score < ADD_HEADER_SCORE
        # Forged headers are removed (milter remove_headers; spam_header for X-Spam) and
        # the real verdict is the only one.
        assert got["forged"].get_all("X-Spam") == ["Yes"]
        assert verdict(got["forged"])[0] == "spam"
        assert FORGED not in got["forged"].as_string()
        # ... on ham too, where rspamd's proxy alone would keep a forged X-Spam (that the
        # forged headers do not move the score is tests/serve/test_front_door.py's).
        assert got["forged_ham"].get_all("X-Spam") is None
        assert verdict(got["forged_ham"])[0] == "ham"
        assert "(forged)" not in got["forged_ham"].as_string()

        # Every mail was checked by streamnb (the proxy's GET /checkv2), once.
        stat = http(streamnb_port, "/stat")
        assert stat["scanned"] == 4 and stat["actions"]["add header"] == 2, stat

        # With streamnb stopped, the proxy answers tempfail: the mail waits at the sender
        # (4xx), it is never delivered unchecked.
        assert daemon.terminate()[0] == 0
        code, out = swaks(programs["swaks"], smtp_port, files["down"])
        assert code != 0 and re.search(r"^<\*\*\s+4\d\d ", out, re.M), out
        assert len(postfix.messages()) == 4
    except AssertionError as error:
        logs = [f"daemon log:\n{daemon.log_path.read_text('utf-8', 'replace')[-3000:]}"]
        if proxy is not None:
            logs.append(f"rspamd:\n{proxy.logs()}")
        if postfix is not None:
            logs.append(f"postfix maillog:\n{postfix.log()[-6000:]}")
        raise AssertionError(f"{error}\n\n" + "\n\n".join(logs)) from None
    finally:
        try:
            if postfix is not None:
                postfix.stop()
        finally:
            if proxy is not None:
                proxy.stop()
            if daemon.proc.poll() is None:
                daemon.terminate()
