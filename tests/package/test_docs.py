"""``docs/architecture.md`` names only what exists: every package path and Python name in backticks.

A span is checked as a path when it looks like one (``runtime/attention/``, ``tests/conftest.py``), and
as a Python name when it is dotted (``Scheduler.step``, ``radixlm.program.context``), a call
(``alloc(n)``), a CamelCase name (``ScheduledBatch``) or a snake_case name (``validate_request``).
Plain words (``lpm``, ``gen``) and expressions (``n > 1``) are prose.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "radixlm"

NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(\([^()]*\))?$")
PATH = re.compile(r"^[\w.-]+(/[\w.-]*)+$|^[\w-]+\.(py|md|sh|toml)$")


def code_spans(markdown: str) -> list[str]:
    """Inline code spans outside fenced blocks."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return re.findall(r"`([^`\n]+)`", prose)


class PackageIndex:
    """Every name the package defines: modules, classes with their members, functions, fields."""

    def __init__(self, root: Path) -> None:
        self.modules: set[str] = set()
        self.classes: dict[str, set[str]] = defaultdict(set)
        self.names: set[str] = set()  # any defined identifier: functions, methods, attributes, strings
        for path in root.rglob("*.py"):
            parts = path.relative_to(root.parent).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.modules.add(module)
            self.names.update(module.split("."))
            self._read(ast.parse(path.read_text(encoding="utf-8")))

    def _read(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                members = self.classes[node.name]
                for base in node.bases:  # members of a same-named base count (one level is enough here)
                    if isinstance(base, ast.Name):
                        members.update(self.classes.get(base.id, ()))
                for item in ast.walk(node):
                    members.update(_defined_names(item))
            self.names.update(_defined_names(node))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                self.names.add(node.value)  # wire names: JSON fields, message keys

    def has_class(self, name: str) -> bool:
        return name in self.classes or name in self.names or hasattr(builtins, name)

    def resolves(self, dotted: str) -> bool:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):  # the longest module prefix, then attributes in it
            if ".".join(parts[:i]) in self.modules:
                return all(p in self.names for p in parts[i:])
        if parts[0][:1].isupper() and parts[0] in self.classes:
            return all(p in self.classes[parts[0]] or p in self.names for p in parts[1:2]) and all(
                p in self.names for p in parts[2:]
            )
        if parts[0][:1].isupper():
            return False
        return all(p in self.names for p in parts[1:])  # ``fb.logits_indices``: a variable's attributes


def _defined_names(node: ast.AST) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.arg):
        return {node.arg}
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return {node.id}
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
        return {node.attr}
    if isinstance(node, ast.alias):
        return {(node.asname or node.name).split(".")[-1]}
    return set()


def _problem(span: str, index: PackageIndex) -> str | None:
    if span.startswith(("../", "http", "ipc:")):
        return None
    if span.endswith((".py", ".md", ".sh", ".toml", "/")) or "/" in span:
        if not PATH.match(span):
            return None
        exists = (
            (PACKAGE / span).exists() or (REPO / span).exists() or ("/" not in span and any(REPO.rglob(span)))
        )
        return None if exists else "no such file or folder"
    if not NAME.match(span):
        return None
    name = span.split("(")[0]
    if "." in name:
        return None if index.resolves(name) else "no such module, class or member"
    if name[:1].isupper() and not name.isupper():
        return None if index.has_class(name) else "no such class"
    if "_" in name.strip("_") or span.endswith(")"):
        return None if name in index.names else "no such name"
    return None


def test_the_checker_catches_missing_names():
    index = PackageIndex(PACKAGE)
    assert _problem("Scheduler.step", index) is None
    assert _problem("Scheduler.no_such_method", index) is not None
    assert _problem("NoSuchClass", index) is not None
    assert _problem("radixlm.frontend.no_such_module", index) is not None
    assert _problem("runtime/no_such_folder/", index) is not None
    assert _problem("gone_function()", index) is not None
    assert _problem("lpm", index) is None  # a word


@pytest.mark.parametrize("doc", [DOC], ids=["architecture.md"])
def test_every_named_symbol_exists(doc: Path):
    index = PackageIndex(PACKAGE)
    missing = {
        span: why
        for span in code_spans(doc.read_text(encoding="utf-8"))
        if (why := _problem(span, index)) is not None
    }
    assert missing == {}
