"""Benchmarks: each ``bench_*.py`` module has a ``main(argv)`` that prints its figures."""
