"""The current headline figures: one PNG per result file in ``benchmarks/results/`` (written by a
benchmark's ``--json``, or transcribed from the dated log with its source named) into
``benchmarks/figures/``, and the table of them in ``benchmarks/README.md`` (between its
``headline-table`` markers). Measured and transcribed results are drawn and tabulated alike; the
table says which each is.

    python -m benchmarks.plots            # needs matplotlib: pip install -e ".[bench]"

It also draws the cross-result headline plots of ``plots_headline.py`` (throughput vs concurrency
against the peers, TTFT/TPOT, the decode step by part, grammar times).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks import plots_headline
from benchmarks.harness import REPO, RESULTS

FIGURES = REPO / "benchmarks" / "figures"
README = REPO / "benchmarks" / "README.md"
TABLE_START = "<!-- headline-table: written by python -m benchmarks.plots -->"
TABLE_END = "<!-- /headline-table -->"
PERCENT_METRICS = ("hit rate", "coverage")


def load_results(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(file stem, record)`` for every result file, in name order."""
    return [(p.stem, json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]


def format_value(metric: str, value: float) -> str:
    if metric in PERCENT_METRICS and 0 <= value <= 1:
        return f"{100 * value:.1f}%"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:.1f}".removesuffix(".0")
    return f"{value:.3g}"


def by_metric(headline: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for figure in headline:
        groups[figure["metric"]].append(figure)
    return groups


def provenance(record: dict[str, Any], link: bool = False) -> str:
    """``measured at <rev>, load <1-minute load average>`` or the log page a figure was transcribed
    from (``link``: as a markdown link relative to ``benchmarks/``)."""
    source = record.get("source", "measured")
    if source == "measured":
        load = record.get("machine", {}).get("load_avg_1m")
        return f"measured at {record.get('git_revision', 'unknown')}" + (f", load {load:.1f}" if load else "")
    page = source.removeprefix("transcribed from benchmarks/")
    return f"transcribed from [{page}]({page})" if link and page != source else source


def plot(name: str, record: dict[str, Any], out: Path) -> Path:
    """One horizontal bar chart per metric of ``record``'s headline, stacked in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by_metric(record["headline"])
    heights = [0.45 * len(figures) + 0.9 for figures in groups.values()]
    fig, axes = plt.subplots(
        len(groups), 1, figsize=(9, sum(heights) + 0.9), height_ratios=heights, squeeze=False
    )
    for ax, (metric, figures) in zip(axes[:, 0], groups.items()):
        labels = [f["label"] for f in figures]
        values = [float(f["value"]) for f in figures]
        bars = ax.barh(range(len(values)), values, color="#4878a8")
        ax.set_yticks(range(len(values)), labels, fontsize=9)
        ax.invert_yaxis()
        ax.set_xlabel(metric, fontsize=9)
        ax.set_xlim(0, (max(values) or 1) * 1.22)
        ax.bar_label(bars, [format_value(metric, v) for v in values], padding=3, fontsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"{name}: {record['date']}\n{provenance(record)}", fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table(results: list[tuple[str, dict[str, Any]]]) -> str:
    """The markdown table: one row per result file, its headline figures in one cell."""
    lines = ["| result | headline figures | command | date | source |", "|---|---|---|---|---|"]
    for name, record in results:
        figures = "; ".join(
            f"{f['label']}: {format_value(f['metric'], float(f['value']))} {f['metric']}"
            for f in record["headline"]
        )
        lines.append(
            f"| [{name}](figures/{name}.png) | {figures} | `{record['command']}` | {record['date']} "
            f"| {provenance(record, link=True)} |"
        )
    return "\n".join(lines)


def write_table(readme: Path, text: str) -> None:
    """Replace what lies between the markers in ``readme`` with ``text``."""
    current = readme.read_text()
    start = current.index(TABLE_START) + len(TABLE_START)
    end = current.index(TABLE_END)
    readme.write_text(current[:start] + "\n" + text + "\n" + current[end:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of result JSON files")
    ap.add_argument("--figures", type=Path, default=FIGURES, help="folder the PNGs go to")
    ap.add_argument("--readme", type=Path, default=README, help="README whose table is rewritten")
    args = ap.parse_args()
    results = load_results(args.results)
    args.figures.mkdir(parents=True, exist_ok=True)
    for name, record in results:
        print(plot(name, record, args.figures))
    for path in plots_headline.render(dict(results), args.figures):
        print(path)
    write_table(args.readme, table(results))
    print(f"table of {len(results)} results written to {args.readme}")


if __name__ == "__main__":
    main()
