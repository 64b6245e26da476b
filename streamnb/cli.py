"""The ``streamnb`` command: ``streamnb run``, ``serve``, ``evaluate``, ``crossval``, ``explain``.

Each sub-command lives in its own module, which provides ``add_arguments(parser)`` and
``main(args) -> int``; this file only routes to them, so importing the CLI stays cheap.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from streamnb import __version__

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("streamnb.daemon", "run the classifier daemon against Kafka"),
    "serve": ("streamnb.serve.standby", "serve checks and learns over HTTP (rspamd's protocol) "
              "with the group's global model, read from its changelogs"),
    "evaluate": ("streamnb.evaluation.evaluate", "replay a labelled corpus prequentially"),
    "crossval": ("streamnb.evaluation.crossval", "k-fold cross-validation on a corpus"),
    "explain": ("streamnb.explain", "why a saved model marks a message: the tokens that "
                "weighed most"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamnb", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"streamnb {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # Only a command whose own module (or package) is absent is skipped; a missing
            # dependency inside it is a real error.
            if error.name is None or not (module_name + ".").startswith(error.name + "."):
                raise
            continue
        module.add_arguments(sub)
        sub.set_defaults(handler=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        print(f"streamnb: '{args.command}' is not available in this build", file=sys.stderr)
        return 2
    return int(handler(args) or 0)
