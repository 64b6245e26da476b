"""The C extensions; everything else is declared in pyproject.toml.

``streamnb.features._tokens`` finds and counts words in C (docs/features.md, "Speed").
``streamnb.models._step`` is MultinomialNB's prequential batch step in C (docs/models.md,
"The batch step"); without it the numpy step runs, with the same results.
``streamnb.daemon._records`` reads the records of a fetched Kafka batch in C
(``streamnb.daemon.records``); without it kafka-python's reader does.
``pip install -e .`` (``make setup``) builds them; without a compiler the build fails, and
``STREAMNB_PURE_PYTHON=1`` runs the pure-Python tokenizer and the numpy step instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streamnb.features._tokens",
            sources=["streamnb/features/_tokens.c"],
            depends=["streamnb/features/_html_entities.h"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
        ),
        Extension(
            "streamnb.daemon._records",
            sources=["streamnb/daemon/_records.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
        ),
        Extension(
            "streamnb.models._step",
            sources=["streamnb/models/_step.c"],
            # no fused multiply-add: the step's spreads must be the short path's to the bit
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-ffp-contract=off"],
        ),
    ]
)
