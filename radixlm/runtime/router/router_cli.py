"""``radixlm router``: its flags (SGLang router's names) and entry point."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from radixlm.runtime.router.policy import POLICIES


def add_router_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--worker-urls", nargs="+", required=True, help="the servers to route to")
    p.add_argument("--host", default="127.0.0.1", help="address the router listens on")
    p.add_argument("--port", type=int, default=30000, help="port the router listens on")
    p.add_argument("--policy", choices=POLICIES, default="cache_aware", help="how requests pick a server")
    p.add_argument(
        "--balance-abs-threshold",
        type=int,
        default=32,
        help="cache_aware: route by load when max - min in-flight requests passes this ...",
    )
    p.add_argument("--balance-rel-threshold", type=float, default=1.5, help="... and max > this x min")
    p.add_argument("--health-check-interval", type=float, default=2.0, help="seconds between checks")
    p.add_argument("--log-level", default="warning", help="logging level")


def run_router_command(args: argparse.Namespace) -> int:
    from radixlm.runtime.router.http_router import run_router

    run_router(
        args.worker_urls,
        args.host,
        args.port,
        args.policy,
        args.balance_abs_threshold,
        args.balance_rel_threshold,
        args.health_check_interval,
        args.log_level,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m radixlm.runtime.router.router_cli --worker-urls ...``."""
    parser = argparse.ArgumentParser(prog="radixlm router", description="Route requests over servers.")
    add_router_arguments(parser)
    return run_router_command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
