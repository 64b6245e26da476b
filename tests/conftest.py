"""Shared fixtures: where the corpora are, and the local Kafka broker."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("STREAMNB_DATA", REPO.parent / "shared" / "data"))
KAFKA_BOOTSTRAP = os.environ.get(
    "STREAMNB_KAFKA_BOOTSTRAP", f"127.0.0.1:{os.environ.get('STREAMNB_KAFKA_PORT', '9092')}"
)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared corpora (``../shared/data``, or ``$STREAMNB_DATA``)."""
    if not DATA.is_dir():
        pytest.fail(f"corpora not found at {DATA}: set STREAMNB_DATA to the shared data folder")
    return DATA


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The real local broker started by ``scripts/kafka.sh start`` (``make test`` starts it)."""
    host, port = KAFKA_BOOTSTRAP.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        pytest.fail(
            f"no Kafka broker at {KAFKA_BOOTSTRAP}: run 'scripts/kafka.sh start' (make test does)"
        )
    return KAFKA_BOOTSTRAP


@pytest.fixture
def topic_prefix() -> str:
    """A unique prefix so tests sharing one broker never see each other's topics."""
    return f"t{uuid.uuid4().hex[:10]}"
