"""The four headline plots across result files (``python -m benchmarks.plots`` draws them too):

- ``headline-throughput.png``: output tok/s against concurrent clients, radixlm and its peers
  (``cpu_speed``'s and ``serving``'s figures);
- ``headline-latency.png``: TTFT and TPOT per concurrency, as distributions where ``serving --json``
  kept each request's times (``ttft_ms``/``tpot_ms``), else its p50 and p99;
- ``headline-decode-step.png``: the decode step's time by part per batch (``decode_step``: matrix
  products vs the rest);
- ``headline-grammar.png``: grammar compile time per schema and mask time per row, by backend
  (``constrained_masks``).

A plot whose result files are missing is skipped with a line saying which.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

Results = dict[str, dict[str, Any]]
CLIENTS = re.compile(r"^(?:(?P<peer>.+?), )?(?P<n>\d+) (clients|stream)$")


def throughput_series(results: Results) -> dict[str, list[tuple[int, float]]]:
    """Peer -> ``(clients, output tok/s)`` points, sorted (one stream counts as one client)."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for name, peer_default in (("cpu_speed", None), ("serving", "radixlm (serving benchmark, other run)")):
        for figure in results.get(name, {}).get("headline", []):
            match = CLIENTS.match(figure["label"])
            if match and figure["metric"].endswith("tok/s"):
                peer = peer_default or match["peer"] or name
                series[peer].append((int(match["n"]), float(figure["value"])))
    return {peer: sorted(points) for peer, points in series.items()}


def latency_rows(results: Results) -> list[dict[str, Any]]:
    """The per-concurrency rows of the newest ``serving`` result that kept them (``serving*.json``)."""
    runs = [r for name, r in results.items() if name.startswith("serving") and r.get("results")]
    return list(max(runs, key=lambda r: r["date"])["results"]) if runs else []


def decode_parts(results: Results) -> list[tuple[int, float, float]]:
    """``(batch, matrix products ms, rest ms)`` per batch of ``decode_step``."""
    rows = results.get("decode_step", {}).get("results") or []
    return [(r["batch"], r["matmul_ms"], r["step_ms"] - r["matmul_ms"]) for r in rows]


def grammar_times(results: Results) -> dict[str, dict[str, float]]:
    """Backend -> ``{"compile per schema ms", "mask per row us"}`` from ``constrained_masks``."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for figure in results.get("constrained_masks", {}).get("headline", []):
        backend, _, what = figure["label"].partition(", ")
        out[backend][f"{what} {figure['metric']}"] = float(figure["value"])
    return dict(out)


def _throughput(ax: Any, results: Results) -> bool:
    series = throughput_series(results)
    for peer, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=peer)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:g}")
    ax.set(xlabel="concurrent clients", ylabel="output tok/s", title="throughput vs concurrency")
    ax.legend(fontsize=8)
    return bool(series)


def _latency(ax: Any, results: Results) -> bool:
    rows = latency_rows(results)
    for offset, (key, label) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"))):
        xs = [i + offset * 0.35 for i in range(len(rows))]
        samples = [r.get(f"{key}_ms") for r in rows]
        if rows and all(samples):
            parts = ax.violinplot(samples, positions=xs, widths=0.3, showmedians=True)
            parts["cmedians"].set_label(f"{label} (distribution)")
        else:
            ax.scatter(xs, [r.get(f"{key}_p50_ms") for r in rows], marker="o", label=f"{label} p50")
            ax.scatter(xs, [r.get(f"{key}_p99_ms") for r in rows], marker="^", label=f"{label} p99")
    ax.set_xticks(range(len(rows)), [str(r["concurrency"]) for r in rows])
    ax.set_yscale("log")
    ax.set(xlabel="concurrent clients", ylabel="ms", title="TTFT and TPOT (serving)")
    ax.legend(fontsize=8)
    return bool(rows)


def _decode(ax: Any, results: Results) -> bool:
    parts = decode_parts(results)
    labels = [f"batch {b}" for b, _, _ in parts]
    ax.bar(labels, [m for _, m, _ in parts], label="matrix products")
    ax.bar(
        labels,
        [r for _, _, r in parts],
        bottom=[m for _, m, _ in parts],
        label="rest: attention, norms, sampling",
    )
    ax.set(ylabel="ms per decode step", title="decode step by part")
    ax.legend(fontsize=8)
    return bool(parts)


def _grammar(ax: Any, results: Results) -> bool:
    times = grammar_times(results)
    metrics = sorted({m for backend in times.values() for m in backend})
    width = 0.8 / max(1, len(times))
    for i, (backend, values) in enumerate(times.items()):
        xs = [j + i * width for j in range(len(metrics))]
        ax.bar(xs, [values.get(m, 0.0) for m in metrics], width, label=backend)
    ax.set_xticks([j + width * (len(times) - 1) / 2 for j in range(len(metrics))], metrics)
    ax.set_yscale("log")
    ax.set(title="grammar compile and mask times")
    ax.legend(fontsize=8)
    return bool(times)


PLOTS: dict[str, Callable[[Any, Results], bool]] = {
    "headline-throughput": _throughput,
    "headline-latency": _latency,
    "headline-decode-step": _decode,
    "headline-grammar": _grammar,
}


def render(results: Results, out: Path) -> list[Path]:
    """Draw every plot that has data into ``out``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name, draw in PLOTS.items():
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        if draw(ax, results):
            ax.spines[["top", "right"]].set_visible(False)
            fig.tight_layout()
            fig.savefig(out / f"{name}.png", dpi=100)
            written.append(out / f"{name}.png")
        else:
            print(f"{name}: skipped, its result files are missing")
        plt.close(fig)
    return written
