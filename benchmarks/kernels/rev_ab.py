"""The engine's decode step of a git revision against the working tree's, for changes in Python code.

A Python change cannot be swapped in and out of one process as the C++ kernels can
(``decode_kernels_ab.py``), so this runs ``decode_step`` from the revision (exported with ``git
archive`` to a temporary directory) and from the working tree in separate processes, alternately,
``--rounds`` times each, and reports each batch size's median step time and their ratio. The C++
kernels of the two trees are built and cached apart when their sources differ.

A tree with ``benchmarks/kernels/decode_step.py`` runs it as the module
``benchmarks.kernels.decode_step``; a revision from before the benchmarks moved into folders runs
its ``benchmarks/decode_step.py`` as a script (it imported nothing from its neighbours).

    python -m benchmarks.kernels.rev_ab --rev HEAD [--batch-sizes 1,8,64] [--rounds 4] [-- decode_step args]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import REPO

STEP_LINE = re.compile(r"^batch\s+(\d+): step\s+([\d.]+) ms")


def export_revision(rev: str, into: Path) -> Path:
    """The tree of ``rev`` as files under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def decode_step_command(tree: Path) -> list[str]:
    """How ``tree`` runs its decode-step benchmark: as a module since the benchmarks moved into
    folders, as a script before."""
    if (tree / "benchmarks" / "kernels" / "decode_step.py").exists():
        return [sys.executable, "-m", "benchmarks.kernels.decode_step"]
    return [sys.executable, str(tree / "benchmarks" / "decode_step.py")]


def step_times(tree: Path, step_args: list[str]) -> dict[int, float]:
    """``decode_step``'s median step time (wall, ms) per batch size, run from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [*decode_step_command(tree), *step_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=True,
    ).stdout
    times = {int(m.group(1)): float(m.group(2)) for m in map(STEP_LINE.match, out.splitlines()) if m}
    if not times:
        raise RuntimeError(f"no step times in decode_step.py's output from {tree}:\n{out}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rev", required=True, help="the git revision to compare the working tree with")
    ap.add_argument("--batch-sizes", default="1,8,64")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("step_args", nargs="*", help="more decode_step.py arguments (after --)")
    args = ap.parse_args()
    step_args = ["--batch-sizes", args.batch_sizes, *args.step_args]
    with tempfile.TemporaryDirectory(prefix="radixlm-rev-") as tmp:
        trees = {args.rev: export_revision(args.rev, Path(tmp)), "working tree": REPO}
        runs: dict[str, list[dict[int, float]]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(step_times(tree, step_args))
                print(f"{name}: {runs[name][-1]}", flush=True)
    for bs in sorted(runs[args.rev][0]):
        before = statistics.median(r[bs] for r in runs[args.rev])
        after = statistics.median(r[bs] for r in runs["working tree"])
        print(
            f"batch {bs:3d}: {args.rev} {before:7.2f} ms, working tree {after:7.2f} ms "
            f"({before / after:.3f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
