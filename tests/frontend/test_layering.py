"""Import layering: ``radixlm.program`` sits under both the language and the runtime; the runtime
never imports the language; the language's modules import each other without cycles."""
from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "radixlm"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every radixlm module ``path`` imports, at any depth of the file (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.startswith("radixlm.")}


def _files(subpackage: str) -> list[pathlib.Path]:
    return sorted((PACKAGE / subpackage).rglob("*.py"))


def test_program_package_imports_neither_frontend_nor_runtime() -> None:
    for path in _files("program"):
        for name in _imports(path):
            assert not name.startswith(("radixlm.frontend", "radixlm.runtime")), f"{path.name}: {name}"


def test_runtime_imports_nothing_from_frontend() -> None:
    for path in _files("runtime"):
        for name in _imports(path):
            assert not name.startswith("radixlm.frontend"), f"{path}: {name}"


def test_frontend_and_program_modules_have_no_import_cycle() -> None:
    files = _files("frontend") + _files("program")
    modules = {_module_name(p): p for p in files}
    graph = {m: {n for n in _imports(p) if n in modules and n != m} for m, p in modules.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
