"""``radixlm serve``: command-line flags generated from ``ServerArgs`` (field names with dashes)."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from radixlm import _env  # noqa: F401  (before anything imports torch)
from radixlm.runtime.server_args import SGLANG_ALIASES, ServerArgs, enumerated_options


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per ``ServerArgs`` field: ``--kv-cache-gb 2``, ``--disable-radix-cache`` / ``--no-...``."""
    hints = typing.get_type_hints(ServerArgs)
    choices = enumerated_options()
    aliases = {name: alias for alias, name in SGLANG_ALIASES.items()}
    for f in dataclasses.fields(ServerArgs):
        flags = ["--" + f.name.replace("_", "-")]
        if f.name in aliases:  # SGLang's spelling: --model-path, --tokenizer-path
            flags.append("--" + aliases[f.name].replace("_", "-"))
        if f.name in choices:
            parser.add_argument(
                *flags, choices=choices[f.name], default=f.default, help=f"default: {f.default}"
            )
            continue
        kind = _base_type(hints[f.name])
        if kind is bool:
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            parser.add_argument(
                *flags, type=kind, default=f.default, metavar=f.name.upper(), help=f"default: {f.default}"
            )


def run_serve(args: argparse.Namespace) -> None:
    """Start the server with the parsed flags; returns when it stops."""
    from radixlm.runtime.server.http_server import run_server

    names = {f.name for f in dataclasses.fields(ServerArgs)}
    try:
        server_args = ServerArgs(**{k: v for k, v in vars(args).items() if k in names})
    except ValueError as e:  # inconsistent flags: one line naming the option, nothing started
        raise SystemExit(f"radixlm serve: error: {e}") from None
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
