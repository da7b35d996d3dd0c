"""The benchmark result files and the table built from them: every file says where its figures
came from, and ``benchmarks/README.md``'s table is what ``python -m benchmarks.plots`` writes from
them (so a new result file without the table rerun fails here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import plots
from benchmarks.harness import RESULTS

RESULT_FILES = sorted(RESULTS.glob("*.json"))


def test_there_are_results():
    assert RESULT_FILES


@pytest.mark.parametrize("path", RESULT_FILES, ids=[p.name for p in RESULT_FILES])
def test_result_says_how_it_was_made(path: Path):
    record = json.loads(path.read_text())
    assert {"benchmark", "command", "date", "machine", "source", "headline"} <= set(record)
    assert record["headline"] and all({"label", "metric", "value"} <= set(f) for f in record["headline"])
    source = record["source"]
    if source != "measured":
        page = Path(source.removeprefix("transcribed from "))
        assert source.startswith("transcribed from benchmarks/log/") and (RESULTS.parents[1] / page).is_file()


def test_readme_table_is_current():
    readme = plots.README.read_text()
    between = readme.split(plots.TABLE_START)[1].split(plots.TABLE_END)[0]
    assert between.strip() == plots.table(plots.load_results(RESULTS)).strip()
