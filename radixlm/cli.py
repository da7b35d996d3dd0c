"""The ``radixlm`` command: ``generate`` (stream a completion), ``serve`` (HTTP server), ``demo``,
``router`` (one endpoint over several servers), ``build-kernels`` (compile the C++ CPU kernels ahead)."""

from __future__ import annotations

import argparse
import sys
import time

import radixlm._env  # noqa: F401  (thread settings before torch)


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="stream a completion from the in-process engine")
    p.add_argument("prompt", help="the prompt (with --chat: the user message)")
    p.add_argument(
        "--model",
        "--model-path",
        dest="model",
        default="smollm2-135m",
        help="registry name, HF directory, .gguf path or Hugging Face hub id",
    )
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate at most")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep this probability mass")
    p.add_argument("--seed", type=int, default=None, help="sampling seed")
    p.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")
    p.add_argument("--regex", default=None, help="constrain the output to this regular expression")
    p.add_argument("--json-schema", default=None, help="constrain the output to this JSON schema")
    p.add_argument("--raw", action="store_true", help="send the prompt as is (no chat template)")


def _run_generate(args: argparse.Namespace) -> int:
    from radixlm.runtime.engine import Engine

    t0 = time.monotonic()
    print(f"[radixlm] loading {args.model} ...", file=sys.stderr, flush=True)
    engine = Engine(model=args.model, kv_cache_gb=0.25, max_running_requests=8)
    try:
        prompt = args.prompt
        if not args.raw and engine.tokenizer.chat_template:
            prompt = engine.tokenizer.apply_chat_template(
                [{"role": "user", "content": args.prompt}], tokenize=False, add_generation_prompt=True
            )
        params = {
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "seed": args.seed,
            "stop": args.stop,
            "regex": args.regex,
            "json_schema": args.json_schema,
        }
        params = {k: v for k, v in params.items() if v is not None}
        print(f"[radixlm] loaded in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        t1 = time.monotonic()
        shown = ""
        last: dict | None = None
        for chunk in engine.generate(prompt, params, stream=True):
            sys.stdout.write(chunk["text"][len(shown) :])
            sys.stdout.flush()
            shown = chunk["text"]
            last = chunk
        sys.stdout.write("\n")
        if last is not None:
            meta = last["meta_info"]
            dt = time.monotonic() - t1
            print(
                f"[radixlm] {meta['completion_tokens']} tokens in {dt:.2f} s "
                f"({meta['completion_tokens'] / max(dt, 1e-9):.1f} tok/s), finish: {meta['finish_reason']}",
                file=sys.stderr,
            )
    finally:
        engine.shutdown()
    return 0


def _add_serve(sub) -> None:
    from radixlm.runtime.server.serve_cli import add_serve_arguments

    p = sub.add_parser("serve", help="run the HTTP server (native SGLang-compatible and OpenAI APIs)")
    add_serve_arguments(p)


def _run_serve(args: argparse.Namespace) -> int:
    from radixlm.runtime.server.serve_cli import run_serve

    run_serve(args)
    return 0


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="run the demo program (a radixlm language program) on the default model")
    p.add_argument("--model", default="smollm2-135m", help="registry name, HF directory or .gguf path")


def _run_demo(args: argparse.Namespace) -> int:
    from radixlm.demo import main as demo_main

    return demo_main(model=args.model) or 0


def _add_router(sub) -> None:
    from radixlm.runtime.router.router_cli import add_router_arguments

    add_router_arguments(sub.add_parser("router", help="route requests over several servers (cache-aware)"))


def _run_router(args: argparse.Namespace) -> int:
    from radixlm.runtime.router.router_cli import run_router_command

    return run_router_command(args)


def _add_build_kernels(sub) -> None:
    sub.add_parser(
        "build-kernels",
        help="compile the C++ CPU kernels into the cache now (a server otherwise builds them in the "
        "background, serving on torch ops meanwhile)",
    )


def _run_build_kernels(args: argparse.Namespace) -> int:
    from radixlm.kernels.cpu.build_command import build_kernels

    return build_kernels(sys.stdout)


def build_parser() -> argparse.ArgumentParser:
    """The ``radixlm`` parser with its subcommands."""
    from radixlm.version import __version__

    parser = argparse.ArgumentParser(prog="radixlm", description=__doc__)
    parser.add_argument("--version", action="version", version=f"radixlm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_demo(sub)
    _add_router(sub)
    _add_build_kernels(sub)
    try:
        _add_serve(sub)
    except ImportError:  # the server package is optional at import time
        pass
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runners = {
        "generate": _run_generate,
        "serve": _run_serve,
        "demo": _run_demo,
        "router": _run_router,
        "build-kernels": _run_build_kernels,
    }
    return runners[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
