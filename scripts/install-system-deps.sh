#!/usr/bin/env bash
# Debian packages streamnb's tests and tools need; installs only what is missing.
#   Java 17 + Maven: the local Kafka broker (scripts/kafka.sh)
#   prometheus: the monitoring integration test scrapes the daemon with a real server
#   bogofilter: the peer filter in the accuracy benchmarks
set -euo pipefail

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v bogofilter >/dev/null 2>&1 || need+=(bogofilter)
command -v make >/dev/null 2>&1 || need+=(make)

if ((${#need[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "install-system-deps: missing ${need[*]}; run as root or install them yourself" >&2
        exit 1
    fi
    echo "install-system-deps: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
