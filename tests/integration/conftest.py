"""Integration tests never leave a daemon running, even when they fail."""

import pytest

from tests.integration.harness import DaemonProcess


@pytest.fixture(autouse=True)
def _stop_daemons():
    yield
    DaemonProcess.kill_leftovers()
