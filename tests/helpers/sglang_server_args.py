"""SGLang's launch flags, read from its ``server_args.py`` (ast; no import, no torch).

The source is the sglang venv of ``tests/e2e/test_sglang_client.py`` when it exists; otherwise the
snapshot ``sglang_0_5_2_flags.json`` next to this file, written from that source by
``python tests/helpers/sglang_server_args.py`` (the tests compare the two when both exist).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("sglang_0_5_2_flags.json")
SGLANG_VERSION = "0.5.2"


def venv_server_args() -> Path | None:
    """SGLang's ``server_args.py`` in the test venv, when it has been built."""
    from radixlm.runtime.weights.model_registry import cache_dir

    venv = cache_dir() / "venvs" / f"sglang-{SGLANG_VERSION}"
    found = sorted(venv.glob("lib/python*/site-packages/sglang/srt/server_args.py"))
    return found[0] if found else None


def flags_from_source(source: str) -> list[dict[str, Any]]:
    """One record per ``parser.add_argument``: its spellings, arity ("" a switch, "1" one value, or
    argparse's nargs), value type and literal choices (None where they are computed)."""
    tree = ast.parse(source)
    constants = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    flags = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        kw = {k.arg: k.value for k in node.keywords}
        action = _literal(kw.get("action"))
        nargs = _literal(kw.get("nargs"))
        choices = kw.get("choices")
        if isinstance(choices, ast.Name):
            choices = constants.get(choices.id)
        type_node = kw.get("type")
        flags.append(
            {
                "names": names,
                "arity": "" if action in ("store_true", "store_false") else (nargs or "1"),
                "type": type_node.id if isinstance(type_node, ast.Name) else "str",
                "choices": [str(c) for c in _literal(choices)] if _literal(choices) else None,
            }
        )
    return flags


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def sglang_flags() -> list[dict[str, Any]]:
    """From the venv when present, else from the snapshot."""
    path = venv_server_args()
    if path is not None:
        return flags_from_source(path.read_text(encoding="utf-8"))
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


if __name__ == "__main__":
    where = venv_server_args()
    if where is None:
        sys.exit("no sglang venv: run tests/e2e/test_sglang_client.py once to build it")
    records = flags_from_source(where.read_text(encoding="utf-8"))
    SNAPSHOT.write_text("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n")
    print(f"wrote {SNAPSHOT} from {where}")
