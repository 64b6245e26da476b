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
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
