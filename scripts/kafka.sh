#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft: broker + controller in one JVM) on 127.0.0.1.
#
#   scripts/kafka.sh start    fetch the jars once (Maven Central), format storage, start, wait until ready
#   scripts/kafka.sh stop     stop the broker started by this script
#   scripts/kafka.sh status   exit 0 if the broker answers on its port
#   scripts/kafka.sh fetch    only download the jars
#
# Environment (all optional):
#   STREAMNB_KAFKA_PORT      broker port (default 9092); the controller uses port + 1
#   STREAMNB_KAFKA_HOME      where jars, data and logs live (default ~/.cache/streamnb/kafka)
#   STREAMNB_KAFKA_HEAP      JVM heap (default 512m)
#   STREAMNB_KAFKA_RUN       this broker's config, data and logs (default $STREAMNB_KAFKA_HOME/run-<port>)
#
# A secured listener besides the PLAINTEXT one (what the security tests run against):
#   STREAMNB_KAFKA_SASL_SSL_PORT   add a SASL_SSL listener on 127.0.0.1:<this port>, with a
#                                  self-signed certificate for 127.0.0.1 (only) made at
#                                  start with keytool ($run/tls; clients trust $run/tls/ca.pem)
#   STREAMNB_KAFKA_SASL_USER, STREAMNB_KAFKA_SASL_PASSWORD
#                                  the one user of that listener, for PLAIN and (created with
#                                  the broker's own storage tool when the storage is formatted)
#                                  SCRAM-SHA-256 and SCRAM-SHA-512
#   STREAMNB_KAFKA_SSL_PORT        add an SSL listener on 127.0.0.1:<this port> that requires a
#                                  client certificate: $run/tls/client.pem and client.key
#                                  (made with keytool and openssl) are the client's
#
# The jars are cached in $STREAMNB_KAFKA_HOME/lib keyed by the pom's checksum, so later runs
# start in a few seconds and need no network.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port=${STREAMNB_KAFKA_PORT:-9092}
controller_port=$((port + 1))
home=${STREAMNB_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/streamnb/kafka}
heap=${STREAMNB_KAFKA_HEAP:-512m}
pom="$here/kafka/pom.xml"
lib="$home/lib"
run=${STREAMNB_KAFKA_RUN:-$home/run-$port}
sasl_ssl_port=${STREAMNB_KAFKA_SASL_SSL_PORT:-}
ssl_port=${STREAMNB_KAFKA_SSL_PORT:-}
sasl_user=${STREAMNB_KAFKA_SASL_USER:-streamnb}
sasl_password=${STREAMNB_KAFKA_SASL_PASSWORD:-}
pidfile="$run/kafka.pid"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }

broker_answers() {
    # A TCP connect is enough to know the listener is bound; readiness for clients is
    # checked by the caller through the Python client where it matters.
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

need_java() {
    if ! command -v java >/dev/null 2>&1; then
        log "java not found: install a JDK 17+ (Debian: apt-get install openjdk-17-jre-headless)"
        exit 1
    fi
}

fetch() {
    local stamp="$lib/.pom.sha256" want
    want=$(sha256sum "$pom" | cut -d' ' -f1)
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    if ! command -v mvn >/dev/null 2>&1; then
        log "mvn not found: install Maven (Debian: apt-get install maven)"
        exit 1
    fi
    log "downloading Apache Kafka jars from Maven Central into $lib (once)"
    rm -rf "$lib.tmp"
    mvn -q -B -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$lib.tmp"
    rm -rf "$lib"
    mv "$lib.tmp" "$lib"
    echo "$want" > "$stamp"
}

make_tls() {
    # A self-signed certificate for 127.0.0.1 only (so "localhost" fails a hostname check),
    # made once per run folder.
    local tls="$run/tls"
    [[ -f "$tls/broker.p12" && -f "$tls/ca.pem" ]] && return 0
    command -v keytool >/dev/null 2>&1 || { log "keytool not found (it comes with the JDK)"; exit 1; }
    mkdir -p "$tls"
    rm -f "$tls/broker.p12"
    keytool -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 30 \
        -dname "CN=127.0.0.1" -ext "SAN=ip:127.0.0.1" \
        -keystore "$tls/broker.p12" -storetype PKCS12 \
        -storepass streamnb-test -keypass streamnb-test >/dev/null 2>&1
    keytool -exportcert -rfc -alias broker -keystore "$tls/broker.p12" \
        -storepass streamnb-test -file "$tls/ca.pem" >/dev/null 2>&1
}

make_client_tls() {
    # A client certificate (self-signed, trusted by the broker's SSL listener) as PEM files.
    local tls="$run/tls"
    [[ -f "$tls/client.pem" && -f "$tls/client.key" && -f "$tls/truststore.p12" ]] && return 0
    command -v openssl >/dev/null 2>&1 || { log "openssl not found (apt-get install openssl)"; exit 1; }
    rm -f "$tls/client.p12" "$tls/truststore.p12"
    keytool -genkeypair -alias client -keyalg RSA -keysize 2048 -validity 30 \
        -dname "CN=streamnb-client" -keystore "$tls/client.p12" -storetype PKCS12 \
        -storepass streamnb-test -keypass streamnb-test >/dev/null 2>&1
    keytool -exportcert -rfc -alias client -keystore "$tls/client.p12" \
        -storepass streamnb-test -file "$tls/client.pem" >/dev/null 2>&1
    openssl pkcs12 -in "$tls/client.p12" -passin pass:streamnb-test -nocerts -nodes \
        -out "$tls/client.key" 2>/dev/null
    keytool -importcert -noprompt -alias client -file "$tls/client.pem" \
        -keystore "$tls/truststore.p12" -storetype PKCS12 -storepass streamnb-test >/dev/null 2>&1
}

ssl_properties() {
    [[ -n "$ssl_port" ]] || return 0
    cat <<PROPS
listener.name.ssl.ssl.client.auth=required
listener.name.ssl.ssl.keystore.type=PKCS12
listener.name.ssl.ssl.keystore.location=$run/tls/broker.p12
listener.name.ssl.ssl.keystore.password=streamnb-test
listener.name.ssl.ssl.key.password=streamnb-test
listener.name.ssl.ssl.truststore.type=PKCS12
listener.name.ssl.ssl.truststore.location=$run/tls/truststore.p12
listener.name.ssl.ssl.truststore.password=streamnb-test
PROPS
}

sasl_properties() {
    [[ -n "$sasl_ssl_port" ]] || return 0
    cat <<PROPS
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$sasl_user="$sasl_password";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$run/tls/broker.p12
listener.name.sasl_ssl.ssl.keystore.password=streamnb-test
listener.name.sasl_ssl.ssl.key.password=streamnb-test
PROPS
}

write_config() {
    mkdir -p "$run/data"
    local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port"
    local advertised="PLAINTEXT://127.0.0.1:$port"
    local protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if [[ -n "$sasl_ssl_port" ]]; then
        if [[ -z "$sasl_password" ]]; then
            log "STREAMNB_KAFKA_SASL_SSL_PORT needs STREAMNB_KAFKA_SASL_PASSWORD"; exit 2
        fi
        make_tls
        listeners+=",SASL_SSL://127.0.0.1:$sasl_ssl_port"
        advertised+=",SASL_SSL://127.0.0.1:$sasl_ssl_port"
        protocols+=",SASL_SSL:SASL_SSL"
    fi
    if [[ -n "$ssl_port" ]]; then
        make_tls
        make_client_tls
        listeners+=",SSL://127.0.0.1:$ssl_port"
        advertised+=",SSL://127.0.0.1:$ssl_port"
        protocols+=",SSL:SSL"
    fi
    cat > "$run/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
log.dirs=$run/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
$(sasl_properties)
$(ssl_properties)
PROPS
    cat > "$run/log4j2.properties" <<PROPS
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$run/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
PROPS
}

start() {
    if broker_answers; then
        log "a broker already answers on 127.0.0.1:$port"
        return 0
    fi
    need_java
    fetch
    write_config
    local cp="$lib/*"
    if [[ ! -f "$run/data/meta.properties" ]]; then
        local scram=()
        if [[ -n "$sasl_ssl_port" ]]; then
            # SCRAM credentials live in the cluster metadata: written here, at format time.
            scram=(--add-scram "SCRAM-SHA-256=[name=$sasl_user,password=$sasl_password]"
                   --add-scram "SCRAM-SHA-512=[name=$sasl_user,password=$sasl_password]")
        fi
        java -cp "$cp" -Dlog4j2.configurationFile="$run/log4j2.properties" \
            kafka.tools.StorageTool format -t "$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1)" \
            -c "$run/server.properties" "${scram[@]}" >"$run/format.log" 2>&1 || {
                log "storage format failed; see $run/format.log"; cat "$run/format.log" >&2; exit 1; }
    fi
    log "starting broker on 127.0.0.1:$port (logs: $run/server.log)"
    nohup java -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$run/log4j2.properties" \
        -cp "$cp" kafka.Kafka "$run/server.properties" >"$run/stdout.log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 1 120); do
        if broker_answers; then
            log "broker ready on 127.0.0.1:$port (pid $(cat "$pidfile"))"
            return 0
        fi
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            log "broker exited during start-up:"; tail -n 40 "$run/stdout.log" "$run/server.log" >&2 || true
            exit 1
        fi
        sleep 0.5
    done
    log "broker did not open 127.0.0.1:$port within 60 s"; exit 1
}

stop() {
    if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        local pid; pid=$(cat "$pidfile")
        kill "$pid"
        for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
        log "broker stopped"
    fi
    rm -f "$pidfile"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) broker_answers ;;
    fetch) fetch ;;
    *) echo "usage: $0 {start|stop|status|fetch}" >&2; exit 2 ;;
esac
