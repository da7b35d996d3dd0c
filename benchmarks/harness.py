"""What every benchmark shares: timing in alternating rounds, percentiles, re-running a benchmark
module in a child process, and the JSON result file (the figures with the command line, git
revision, machine and date that produced them; ``benchmarks/plots.py`` reads these).

Benchmarks run as modules from the repository root, e.g. ``python -m benchmarks.kernels.decode_step``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


# ---- timing --------------------------------------------------------------------------------------
def median_ms(fn: Callable[[], object], iters: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median milliseconds of ``fn`` by ``clock`` after one warm-up call: wall time, or
    ``time.process_time`` (the CPU time of all this process's threads: steadier than wall time on a
    machine other processes load)."""
    fn()
    times = []
    for _ in range(iters):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return 1000 * statistics.median(times)


def interleaved_ms(
    fns: list[Callable[[], object]],
    iters: int,
    clock: Callable[[], float] = time.perf_counter,
    rounds: int = 5,
) -> list[float]:
    """The median of per-round medians of each of ``fns``, run in alternating rounds so that a change
    in the machine's load hits all of them (their ratio is what we compare)."""
    per_round = max(2, iters // rounds)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, times):
            out.append(median_ms(fn, per_round, clock))
    return [statistics.median(t) for t in times]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (inclusive method); NaN for no values."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, int(q) - 1))]


# ---- arguments ----------------------------------------------------------------------------------
def parse_server_args(items: list[str]) -> dict[str, Any]:
    """``--server-arg NAME=VALUE`` items as ``ServerArgs`` keywords (numbers and booleans as JSON)."""
    out: dict[str, Any] = {}
    for item in items:
        name, value = item.split("=", 1)
        out[name] = json.loads(value) if value[:1].isdigit() or value in ("true", "false") else value
    return out


# ---- child processes -----------------------------------------------------------------------------
def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs benchmark ``module`` (its ``__spec__.name``) with ``args``."""
    return [sys.executable, "-m", module, *args]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository on ``PYTHONPATH`` (so ``-m benchmarks...``
    resolves from any directory) and ``extra`` set."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), path) if p), **extra}


# ---- results -------------------------------------------------------------------------------------
def add_json_argument(ap: argparse.ArgumentParser) -> None:
    """``--json PATH``: where ``write_results`` puts the run's figures."""
    ap.add_argument("--json", metavar="PATH", help="also write the results, with how they were made, here")


def git_revision() -> str:
    """The checkout's commit, ``+dirty`` when tracked files differ from it; ``unknown`` outside git."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--"], capture_output=True
        ).returncode
    except OSError:
        return "unknown"
    return f"{rev}{'+dirty' if dirty else ''}" if rev else "unknown"


def machine() -> dict[str, Any]:
    """What the figures depend on: CPU, cores usable here, load, Python and torch."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
    }
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_results(
    path: str | os.PathLike | None, module: str, headline: list[dict[str, Any]], results: Any = None
) -> None:
    """Write ``{"benchmark", "command", "date", "git_revision", "machine", "source", "headline",
    "results"}`` to ``path`` (nothing when ``path`` is None). ``headline``: the figures a reader
    compares, each ``{"label", "metric", "value"}`` (``plots.py`` draws and tabulates these);
    ``results``: everything else the run measured, as the script holds it."""
    if path is None:
        return
    record = {
        "benchmark": module,
        "command": shlex.join(["python", "-m", module, *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_revision": git_revision(),
        "machine": machine(),
        "source": "measured",
        "headline": headline,
        "results": results,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=2, default=_plain) + "\n")
    print(f"results written to {path}", file=sys.stderr)


def _plain(value: Any) -> Any:
    """numpy and torch scalars as Python numbers; anything else JSON cannot hold as its text."""
    return value.item() if hasattr(value, "item") else str(value)
