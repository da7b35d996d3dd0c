"""``radixlm serve``: command-line flags generated from ``ServerArgs`` (field names with dashes), plus
every flag of SGLang's launch line (``sglang_flag_parsing.py``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Sequence
from typing import Any

from radixlm import _env  # noqa: F401  (before anything imports torch)
from radixlm.runtime.server.serve_flag_help import FIELD_HELP
from radixlm.runtime.server.sglang_flag_parsing import (
    add_sglang_only_flags,
    apply_sglang_flags,
    sglang_spellings,
    sglang_values,
)
from radixlm.runtime.server_args import ServerArgs, enumerated_options
from radixlm.version import __version__


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per ``ServerArgs`` field (``--kv-cache-gb 2``, ``--disable-radix-cache`` / ``--no-...``)
    under its SGLang spellings too, then SGLang's flags we do not implement, and ``--version``."""
    hints = typing.get_type_hints(ServerArgs)
    choices = enumerated_options()
    parser.add_argument("--version", action="version", version=f"radixlm {__version__}")
    for f in dataclasses.fields(ServerArgs):
        own = "--" + f.name.replace("_", "-")
        flags = [own, *sglang_spellings(f.name, own)]
        help_text = FIELD_HELP[f.name]
        if f.name in choices:
            extra = sglang_values(f.name)
            if extra:
                help_text += f"; SGLang's {', '.join(extra)} too (see docs/sglang-launch-flags.md)"
            parser.add_argument(
                *flags,
                choices=[*choices[f.name], *extra],
                metavar="{" + ",".join(choices[f.name]) + "}",
                default=f.default,
                help=f"{help_text} (default: {f.default})",
            )
            continue
        kind = _base_type(hints[f.name])
        if typing.get_origin(hints[f.name]) is tuple:  # a list flag: --lora-paths a=/x b=/y
            parser.add_argument(*flags, nargs="*", type=kind, default=f.default, help=help_text)
        elif kind is bool:
            parser.add_argument(
                *flags, action=argparse.BooleanOptionalAction, default=f.default, help=help_text
            )
        else:
            parser.add_argument(
                *flags,
                type=kind,
                default=f.default,
                metavar=f.name.upper(),
                help=f"{help_text} (default: {f.default})",
            )
    add_sglang_only_flags(parser)


def server_args_from_flags(args: argparse.Namespace) -> tuple[ServerArgs, list[str]]:
    """The ``ServerArgs`` a parsed launch line asks for, and one warning per SGLang flag or value
    that is ignored or approximated. ``ValueError`` names a flag or value we cannot honour."""
    warnings = apply_sglang_flags(args)
    names = {f.name for f in dataclasses.fields(ServerArgs)}
    return ServerArgs(**{k: v for k, v in vars(args).items() if k in names}), warnings


def run_serve(args: argparse.Namespace) -> None:
    """Start the server with the parsed flags; returns when it stops."""
    from radixlm.runtime.server.http_server import run_server

    try:
        server_args, warnings = server_args_from_flags(args)
    except ValueError as e:  # inconsistent or unsupported flags: one line naming them, nothing started
        raise SystemExit(f"radixlm serve: error: {e}") from None
    for warning in warnings:
        print(f"radixlm serve: warning: {warning}", file=sys.stderr, flush=True)
    if server_args.node_rank > 0:  # a further machine of a tensor-parallel group: ranks only
        from radixlm.runtime.distributed.tensor_parallel import run_node

        run_node(server_args)
        return
    run_server(server_args)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m radixlm.launch_server --model-path ...`` (also what ``launch_server`` runs)."""
    parser = argparse.ArgumentParser(prog="radixlm serve", description="Start the radixlm HTTP server.")
    add_serve_arguments(parser)
    run_serve(parser.parse_args(argv))


def _base_type(hint: Any) -> type:
    """``Optional[int]`` -> ``int``; plain types unchanged."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


if __name__ == "__main__":
    main()
