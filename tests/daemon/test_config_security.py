"""``[kafka]`` security settings: validated at load, the password kept out of files and logs,
one set of client arguments for the consumer, the producer child and the admin client."""

from __future__ import annotations

import pytest

from streamnb.config import ConfigError, load_settings
from streamnb.daemon.kafka_io import client_config, producer_config

SASL = '[kafka]\nsecurity_protocol = "sasl_ssl"\nsasl_mechanism = "scram-sha-512"\n' \
       'sasl_username = "streamnb"\n'


def test_the_password_comes_from_the_environment_and_never_shows_in_repr():
    settings = load_settings(text=SASL, environ={"STREAMNB_KAFKA__SASL_PASSWORD": "s3cret!"})
    kafka = settings.kafka
    assert (kafka.security_protocol, kafka.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert kafka.sasl_password == "s3cret!"
    assert "s3cret" not in repr(kafka) and "s3cret" not in repr(settings)


def test_the_password_can_come_from_a_file_relative_to_the_config(tmp_path):
    (tmp_path / "password").write_text("from-a-file\n")
    config = tmp_path / "config.toml"
    config.write_text(SASL + 'sasl_password_file = "password"\n')
    kafka = load_settings(config, environ={}).kafka
    assert kafka.sasl_password == "from-a-file"
    assert kafka.sasl_password_file == tmp_path / "password"


def test_a_password_in_the_config_file_is_refused_without_echoing_it():
    with pytest.raises(ConfigError, match="kafka.sasl_password does not belong") as error:
        load_settings(text=SASL + 'sasl_password = "hunter2"\n', environ={})
    assert "hunter2" not in str(error.value)


@pytest.mark.parametrize(
    ("text", "environ", "key"),
    [
        ('[kafka]\nsecurity_protocol = "TLS"\n', {}, "kafka.security_protocol"),
        ('[kafka]\nsecurity_protocol = "SASL_SSL"\n', {}, "kafka.sasl_mechanism"),
        ('[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "GSSAPI"\n', {},
         "kafka.sasl_mechanism"),
        ('[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\n', {},
         "kafka.sasl_username"),
        (SASL, {}, "kafka.sasl_password_file"),
        (SASL + 'sasl_password_file = "/nonexistent/pw"\n', {}, "kafka.sasl_password_file"),
        ('[kafka]\nsasl_username = "u"\n', {}, "kafka.security_protocol"),
        ('[kafka]\nssl_cafile = "/etc/hostname"\n', {}, "kafka.ssl_cafile"),
        ('[kafka]\nsecurity_protocol = "SSL"\nssl_cafile = "/nonexistent/ca.pem"\n', {},
         "kafka.ssl_cafile"),
        ('[kafka]\nstartup_timeout_seconds = 0\n', {}, "kafka.startup_timeout_seconds"),
    ],
)
def test_bad_security_settings_fail_at_load_naming_the_key(text, environ, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(text=text, environ=environ)


def test_every_client_gets_the_same_security_arguments(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = load_settings(
        text=SASL + f'ssl_cafile = "{ca}"\nssl_check_hostname = false\n',
        environ={"STREAMNB_KAFKA__SASL_PASSWORD": "pw"},
    )
    common = client_config(settings.kafka)
    assert common == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "streamnb",
        "sasl_plain_password": "pw",
        "ssl_check_hostname": False,
        "ssl_cafile": str(ca),
    }
    producer = producer_config(settings.kafka, {"out": 2_000_000, "dlq": 1_048_588})
    assert {k: producer[k] for k in common} == common
    assert producer["max_request_size"] == 2_000_000
    assert producer["batch_size"] == 1024 * 1024
    # a batch must fit the topic that accepts least, a request the largest record of any
    small = producer_config(settings.kafka, {"out": 2_000_000, "changelog": 3000})
    assert (small["batch_size"], small["max_request_size"]) == (3000, 2_000_000)


def test_metrics_bind_to_loopback_unless_told_otherwise():
    assert load_settings(text="", environ={}).metrics.host == "127.0.0.1"
    env = {"STREAMNB_METRICS__HOST": "0.0.0.0"}
    assert load_settings(text="", environ=env).metrics.host == "0.0.0.0"
