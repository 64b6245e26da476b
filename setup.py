"""The C extension of the featurizer; everything else is declared in pyproject.toml.

``streamnb.features._tokens`` finds and counts words in C (docs/features.md, "Speed").
``pip install -e .`` (``make setup``) builds it; without a compiler the build fails, and
``STREAMNB_PURE_PYTHON=1`` runs the pure-Python tokenizer instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streamnb.features._tokens",
            sources=["streamnb/features/_tokens.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
        )
    ]
)
