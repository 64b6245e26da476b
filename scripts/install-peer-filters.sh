#!/usr/bin/env bash
# The outside filters `python -m bench.peers` compares streamnb with, beyond bogofilter:
#   crm114 (20100106), spamprobe (1.4d), rspamd (3.4) and redis-server (rspamd's Bayes store).
# Benchmark peers only: no test or CI job needs them, and bench.peers skips a missing one with
# a line saying what to install. rspamd and redis-server are not started as services: the
# benchmark starts private instances on 127.0.0.1 and stops them after each stream.
set -euo pipefail

need=()
command -v crm >/dev/null 2>&1 || need+=(crm114)
command -v spamprobe >/dev/null 2>&1 || need+=(spamprobe)
command -v rspamd >/dev/null 2>&1 || need+=(rspamd)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v bogofilter >/dev/null 2>&1 || need+=(bogofilter)

if ((${#need[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "install-peer-filters: missing ${need[*]}; run as root or install them yourself" >&2
        exit 1
    fi
    echo "install-peer-filters: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
