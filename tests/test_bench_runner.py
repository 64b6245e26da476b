"""``python -m bench`` (``make bench``) can run every benchmark module: each takes the
argument list it is handed, as its command line."""

from __future__ import annotations

import importlib

import pytest

from bench.__main__ import ONLY_WHEN_NAMED, benchmark_names


@pytest.mark.parametrize("name", benchmark_names())
def test_each_benchmark_reads_the_arguments_it_is_handed(name, capsys):
    module = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_the_long_benchmarks_left_out_by_default_exist():
    assert set(ONLY_WHEN_NAMED) <= set(benchmark_names())
