#!/usr/bin/env bash
# Debian packages streamnb's tests and tools need; installs only what is missing.
#   python3-venv: `make setup` creates .venv with `python3 -m venv` (Debian ships ensurepip,
#                 which venv needs for pip, in this package)
#   Java 17 (with keytool) + Maven: the local Kafka broker (scripts/kafka.sh), and the
#                 certificates of its SASL_SSL and SSL listeners in the security tests
#   openssl: the client key of the SSL listener as PEM (what kafka-python reads)
#   prometheus: the monitoring integration test scrapes the daemon with a real server
#   bogofilter: the peer filter in the accuracy benchmarks
#   make: the README's commands
#   gcc, python3-dev: `make setup` compiles the featurizer's C extension
#                 (streamnb/features/_tokens.c) against the Python headers
#   rspamd, postfix, swaks: rspamd brings rspamc, the client tests/integration/test_http_kafka.py
#                 checks and learns with; the milter test (tests/integration/test_milter_postfix.py)
#                 sends mail with swaks to a private Postfix instance whose milter is rspamd's
#                 proxy (rspamd, which also brings rspamc) asking streamnb over HTTP. The test
#                 starts its own instances on free loopback ports and uses no system service.
#                 postfix is installed as "No configuration" (debconf, unattended): without
#                 /etc/postfix/main.cf the system Postfix does not start, nothing listens on
#                 port 25. Not installed where another mail server provides /usr/sbin/sendmail
#                 (apt would remove it for postfix); the test is then skipped, or fails in CI.
#                 Debian starts rspamd's own service where systemd runs (loopback ports
#                 11332-11334); the test never uses it.
# Run it as root (a container, CI) or as a user with sudo: it uses sudo only when not root.
set -euo pipefail

need=()
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
{ command -v java >/dev/null 2>&1 && command -v keytool >/dev/null 2>&1; } \
    || need+=(openjdk-17-jre-headless)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v bogofilter >/dev/null 2>&1 || need+=(bogofilter)
command -v make >/dev/null 2>&1 || need+=(make)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
python3 -c 'import os, sysconfig; os.stat(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    >/dev/null 2>&1 || need+=(python3-dev)
command -v rspamd >/dev/null 2>&1 || need+=(rspamd)
command -v swaks >/dev/null 2>&1 || need+=(swaks)
if ! command -v postfix >/dev/null 2>&1 && [[ ! -x /usr/sbin/postfix ]]; then
    if [[ -e /usr/sbin/sendmail ]]; then
        echo "install-system-deps: not installing postfix: another mail server provides" \
            "/usr/sbin/sendmail and apt would remove it; test_milter_postfix needs postfix" >&2
    else
        need+=(postfix)
    fi
fi

if ((${#need[@]} == 0)); then
    exit 0
fi
as_root=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "install-system-deps: missing ${need[*]}; run this as root, or install them" >&2
        exit 1
    fi
    as_root=(sudo)
fi
echo "install-system-deps: installing ${need[*]}" >&2
if [[ " ${need[*]} " == *" postfix "* ]]; then
    # Unattended, and no system mail server: no main.cf, so its service does not start.
    echo "postfix postfix/main_mailer_type select No configuration" \
        | "${as_root[@]}" debconf-set-selections
fi
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
