"""Benchmarks and examples are not run by the suite, so their imports of our code are checked here:
every ``radixlm``, ``tests`` or ``benchmarks`` module they import exists and defines the names they
take from it; and every benchmark imports as the module its README runs (``benchmarks.<kind>.<name>``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted(p for p in REPO.glob("benchmarks/**/*.py") if p.name != "__init__.py")
SCRIPTS = sorted([*BENCHMARKS, *REPO.glob("examples/*.py")])
OURS = ("radixlm", "tests", "benchmarks")


def _our_imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` for each import of one of ``OURS`` anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in OURS:
                found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names if a.name.split(".")[0] in OURS)
    return found


def test_there_are_scripts_to_check():
    assert any(_our_imports(p) for p in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(REPO)) for p in SCRIPTS])
def test_script_imports_resolve(path: Path):
    missing = []
    for module_name, names in _our_imports(path):
        module = importlib.import_module(module_name)
        for name in names:
            if not hasattr(module, name):
                try:
                    importlib.import_module(f"{module_name}.{name}")
                except ModuleNotFoundError:
                    missing.append(f"{module_name}.{name}")
    assert missing == []


def test_benchmarks_are_found_in_their_folders():
    kinds = {p.parent.name for p in BENCHMARKS}
    assert {"workloads", "kernels", "peers", "quality", "gpu", "distributed"} <= kinds


@pytest.mark.parametrize("path", BENCHMARKS, ids=[str(p.relative_to(REPO)) for p in BENCHMARKS])
def test_benchmark_imports_as_a_module(path: Path):
    """``python -m benchmarks.<kind>.<name>`` finds it and its imports (no ``sys.path`` edits, no
    neighbour imported by its bare name: those fail here)."""
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    module = importlib.import_module(name)
    assert module.__spec__.name == name


@pytest.mark.parametrize("path", BENCHMARKS, ids=[str(p.relative_to(REPO)) for p in BENCHMARKS])
def test_benchmark_leaves_sys_path_alone(path: Path):
    """Running as a module from the repository root finds every import; editing ``sys.path`` would
    hide a benchmark that only works from its own folder."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    edits = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    assert edits == []
