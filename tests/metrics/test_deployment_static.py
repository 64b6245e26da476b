"""Static checks of docker/: compose file, Prometheus config, Grafana provisioning, dashboard.

The dashboard check is the contract between Grafana and the code: every metric name a panel
queries must be one that ``Metrics`` actually exposes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yml"
PROMETHEUS_CONFIG = DOCKER / "prometheus" / "prometheus.yml"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "streamnb.json"
MONITORING_DOC = REPO / "docs" / "monitoring.md"

# service -> port published on the host (what docs/monitoring.md tells users to open)
PUBLISHED = {"kafka": 9092, "streamnb": 9108, "prometheus": 9090, "grafana": 3000}
METRIC_NAME = re.compile(r"\bstreamnb_[a-zA-Z0-9_]+")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def dashboard_targets() -> list[tuple[str, dict]]:
    board = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target)
        for panel in board["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


# ---------------------------------------------------------------------- compose


def test_compose_has_the_services_and_published_ports():
    services = compose()["services"]
    assert PUBLISHED.keys() <= services.keys()
    for name, port in PUBLISHED.items():
        published = {int(str(p).split(":")[-2]) for p in services[name].get("ports", [])}
        assert port in published, f"{name} does not publish {port}"


def test_compose_images_are_pinned_to_versions():
    services = compose()["services"]
    for name, service in services.items():
        image = service.get("image")
        assert image, f"{name} has no image (and tag)"
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{name}: {image!r} not pinned"
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", services["kafka"]["image"])


def test_kafka_runs_in_kraft_mode():
    env = compose()["services"]["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert not any("ZOOKEEPER" in key for key in env)


def test_compose_mounts_and_build_files_exist():
    services = compose()["services"]
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DOCKER / source).exists(), f"{name} mounts missing {source}"
    build = services["streamnb"]["build"]
    context = (DOCKER / build["context"]).resolve()
    assert context == REPO
    assert (context / build["dockerfile"]).is_file()


def test_dockerfile_is_pinned_and_runs_as_a_user():
    lines = [line.strip() for line in (DOCKER / "Dockerfile").read_text().splitlines()]
    base = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert len(base) == 1 and re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", base[0]), base
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    for line in lines:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                if not source.startswith("--"):
                    assert (REPO / source).exists() or source == "README.md", source


def test_streamnb_container_config_is_accepted_by_the_daemon():
    config = pytest.importorskip("streamnb.config", reason="the daemon's config module")
    settings = config.load_settings(
        DOCKER / "streamnb" / "config.toml",
        environ=compose()["services"]["streamnb"]["environment"],
    )
    assert settings.metrics.port == PUBLISHED["streamnb"]
    assert settings.kafka.bootstrap_servers == "kafka:19092"


def test_compose_runs_two_replicas_of_one_group_each_with_its_own_member_id():
    services = compose()["services"]
    replicas = [name for name, service in services.items()
                if service.get("image", "").startswith("streamnb:")]
    assert sorted(replicas) == ["streamnb", "streamnb-2"]
    members = {services[name]["environment"]["STREAMNB_KAFKA__GROUP_INSTANCE_ID"]
               for name in replicas}
    assert len(members) == 2
    assert not any("volumes" in services[name] for name in replicas)  # the state is in Kafka
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = {target for job in config["scrape_configs"]
               for static in job.get("static_configs", []) for target in static["targets"]}
    assert {f"{name}:{PUBLISHED['streamnb']}" for name in replicas} <= targets


# ---------------------------------------------------------------------- prometheus


def test_prometheus_scrapes_the_daemon_port():
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job.get("static_configs", [])
        for target in static["targets"]
    }
    assert f"streamnb:{PUBLISHED['streamnb']}" in targets


def test_promtool_accepts_the_prometheus_config():
    promtool = shutil.which("promtool")
    if promtool is None:
        if in_ci():
            pytest.fail("promtool missing in CI: scripts/install-system-deps.sh installs it")
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    result = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS_CONFIG)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------- grafana


def test_grafana_provisioning_points_at_prometheus_and_the_dashboard():
    grafana = DOCKER / "grafana" / "provisioning"
    sources = yaml.safe_load((grafana / "datasources" / "prometheus.yml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == f"http://prometheus:{PUBLISHED['prometheus']}"
    providers = yaml.safe_load((grafana / "dashboards" / "streamnb.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    mounts = dict(
        v.split(":")[:2][::-1] for v in compose()["services"]["grafana"]["volumes"]
        if v.startswith(".")
    )
    assert (DOCKER / mounts[path]).resolve() == DASHBOARD.parent.resolve()
    for _, target in dashboard_targets():
        assert target["datasource"]["uid"] == source["uid"]


def test_dashboard_is_valid_with_unique_panels():
    board = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = [panel["title"] for panel in board["panels"] if panel["type"] != "row"]
    assert len(titles) == len(set(titles))
    for title, target in dashboard_targets():
        assert target["expr"].strip(), title


def test_dashboard_covers_what_the_issue_promises():
    exprs = " ".join(target["expr"] for _, target in dashboard_targets())
    for needle in [
        'streamnb_prequential_accuracy{window="lifetime"}',
        'streamnb_prequential_accuracy{window="recent"}',
        "streamnb_prequential_recall",
        "streamnb_prequential_window_confusion",
        "streamnb_messages_consumed_total",
        "histogram_quantile(0.5, sum by (le) (rate(streamnb_processing_latency_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(streamnb_processing_latency_seconds_bucket",
        "streamnb_consumer_lag_messages",
        "streamnb_dead_letters_total",
        "time() - min(streamnb_last_checkpoint_timestamp_seconds)",
    ]:
        assert needle in exprs, needle


def test_every_dashboard_metric_is_exposed_by_metrics(populated):
    exposed = {
        sample.name
        for family in text_string_to_metric_families(generate_latest(populated().registry).decode())
        for sample in family.samples
    }
    for title, target in dashboard_targets():
        names = set(METRIC_NAME.findall(target["expr"]))
        assert names, f"panel {title!r} queries no streamnb metric: {target['expr']}"
        assert names <= exposed, f"panel {title!r} queries unknown {names - exposed}"


def test_monitoring_doc_describes_every_panel_and_expression():
    doc = MONITORING_DOC.read_text()
    for title, target in dashboard_targets():
        assert title in doc, f"docs/monitoring.md does not describe panel {title!r}"
        assert target["expr"] in doc, f"docs/monitoring.md lacks the PromQL {target['expr']}"
