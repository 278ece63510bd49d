"""The ``harmony-responses`` command: ``serve`` runs the server, ``translate`` shows a completion's events,
``trace`` shows a response's per-token trace (``tokentrace``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harmony-responses",
        description="An OpenAI Responses API for Harmony-format models (gpt-oss) on any inference engine.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from .serve.cli import add_serve_arguments
    from .tokentrace._cli import add_trace_arguments
    from .translate_cli import add_translate_arguments

    add_serve_arguments(
        commands.add_parser("serve", help="run the Responses API server", description="Run the Responses API server.")
    )
    add_translate_arguments(
        commands.add_parser(
            "translate",
            help="print the Responses events for one Harmony completion",
            description=(
                "Read one Harmony completion (the text a model generated after the prompt's trailing "
                "<|start|>assistant, special tokens written literally) and print the event stream the server "
                "would send for it."
            ),
        )
    )
    add_trace_arguments(
        commands.add_parser(
            "trace",
            help="open a response's trace page (or write it, or a recording's, to a file)",
            description=(
                "Show a traced response's per-token trace (serve --trace): fetch it from the server and open its "
                "page, or write the page or its JSON to a file; or make the page for one engine call of a "
                "recording (serve --record)."
            ),
        )
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
