"""The engine's decode step with the C++ decode kernels of a git revision against the working tree's,
in one process and alternating rounds (the machine's speed drifts between runs; a ratio from one run
holds), beside the step's matrix products alone.

Then the decode attention alone: every layer's, on the step's pools and slots.

Both kernel builds are loaded side by side (the revision's sources are compiled under another module
name into ``$RADIXLM_CACHE/kernels/ab-*``); each timed step points every runtime module at one of
them. The Python around the kernels is the working tree's (``DecodeKernels``), so the revision must
have the kernels it calls.

    python -m benchmarks.kernels.decode_kernels_ab --rev HEAD --batch-sizes 1,64 --context 32
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from benchmarks.harness import REPO, interleaved_ms
from benchmarks.kernels.decode_step import (
    add_step_arguments,
    decode_batch,
    free_batch,
    matmul_fn,
    step_runner,
)
from radixlm.kernels.cpu.build import DECODE_KERNELS, build_directory, compile_sources, load_decode_kernels
from radixlm.kernels.cpu.decode_ops import DecodeKernels
from radixlm.runtime.executor.model_runner import ModelRunner

KERNELS = "radixlm/kernels/cpu"


def _git_show(rev: str, path: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:{path}"], capture_output=True, check=True
    ).stdout


def kernels_at(rev: str) -> DecodeKernels:
    """The decode kernels compiled from ``rev``'s sources (its own list of them, and its headers)."""
    tree = ast.parse(_git_show(rev, f"{KERNELS}/build.py").decode())
    modules = next(
        ast.literal_eval(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") in ("MODULES", "_MODULES")
    )
    sources = modules["decode_kernels"]
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", rev, f"{KERNELS}/"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split()
    files = {
        name: _git_show(rev, f"{KERNELS}/{name}")
        for name in [*sources, *(Path(p).name for p in listed if p.endswith(".h"))]
    }
    digest = hashlib.sha256(b"".join(files.values())).hexdigest()[:12]
    build_dir = build_directory("decode_kernels").parent / f"ab-{digest}"
    return DecodeKernels(compile_sources(f"radixlm_decode_kernels_ab_{digest}", build_dir, files, sources))


def all_layers_attention(kernels: DecodeKernels, runner: ModelRunner, fb) -> Callable[[], None]:
    """The decode attention of every layer once, on the step's pools and slots (the layers' pools
    together outgrow the caches, so rows come from memory as in the step)."""
    pool, bs = runner.kv_pool, fb.req_pool_indices.shape[0]
    q = torch.randn(bs, runner.model.config.num_heads, pool.head_dim)
    req_to_token = runner.req_to_token_pool.req_to_token

    def run() -> None:
        for layer in range(pool.num_layers):
            k_buf, v_buf = pool.get_kv_buffer(layer)
            kernels.paged_decode_attention(
                q,
                k_buf,
                v_buf,
                req_to_token,
                fb.req_pool_indices,
                fb.seq_lens,
                fb.seq_lens_cpu,
                pool.head_dim**-0.5,
            )

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rev", default="HEAD", help="the git revision whose kernels are the baseline")
    add_step_arguments(ap, batch_sizes="1,64", iters=40, quantization="none")
    ap.add_argument("--rounds", type=int, default=8, help="alternating rounds the iters are split into")
    args = ap.parse_args()
    baseline, current = kernels_at(args.rev), load_decode_kernels()
    assert current is not None, "the working tree's decode kernels cannot be built here"
    runner, sizes = step_runner(args)
    for bs in sizes:
        fb = decode_batch(runner, bs, args.context)

        def step(kernels: DecodeKernels, fb=fb) -> None:
            with DECODE_KERNELS.replaced(kernels):
                runner.forward(fb)

        fns = [lambda: step(baseline), lambda: step(current), matmul_fn(runner.model, bs)]
        for clock, what in ((time.perf_counter, "wall"), (time.process_time, "CPU time")):
            old, new, mm = interleaved_ms(fns, args.iters, clock, rounds=args.rounds)
            print(
                f"batch {bs:3d}, {args.context + 1} keys, {what}: step {old:7.2f} ms ({args.rev}) -> "
                f"{new:7.2f} ms (working tree), x{old / new:.2f}; matmuls {mm:7.2f} ms; step/matmul "
                f"{old / mm:.2f} -> {new / mm:.2f}",
                flush=True,
            )
        old, new = interleaved_ms(
            [all_layers_attention(k, runner, fb) for k in (baseline, current)], args.iters, rounds=args.rounds
        )
        print(
            f"batch {bs:3d}, {args.context + 1} keys: attention, all layers: {old:6.2f} ms ({args.rev}) -> "
            f"{new:6.2f} ms, x{old / new:.2f}",
            flush=True,
        )
        free_batch(runner, fb)


if __name__ == "__main__":
    main()
