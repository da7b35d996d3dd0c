"""Benchmarks and examples are not run by the suite, so their imports of our code are checked here:
every ``radixlm`` or ``tests`` module they import exists and defines the names they take from it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*REPO.glob("benchmarks/*.py"), *REPO.glob("examples/*.py")])


def _our_imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` for each import of ``radixlm`` or ``tests`` anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in ("radixlm", "tests"):
                found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names if a.name.split(".")[0] in ("radixlm", "tests"))
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
