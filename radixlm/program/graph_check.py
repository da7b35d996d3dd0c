"""Shape checks of a request graph before it runs (``POST /program`` and the Engine).

A graph from a client is untrusted: nodes naming each other as parents would loop forever, a
missing field would fail deep inside a running program. ``check_graph`` enforces the format that
``graph_executor`` documents: nodes listed parents-first with ids equal to their list index (so
every parent and variable source comes earlier, which makes the graph acyclic), known op types with
fields of the right types, and at most ``max_nodes`` nodes.
"""

from __future__ import annotations

from typing import Any

from radixlm.program.choices import METHODS
from radixlm.program.sampling import LOGPROB_KEYS, SAMPLING_KEYS

GRAPH_VERSION = 1
OP_TYPES = ("prefill", "gen", "select")
GEN_OPTIONS = SAMPLING_KEYS + LOGPROB_KEYS  # what a gen node's options may hold (as /generate: 400 else)


class InvalidGraph(ValueError):
    """A malformed request graph; the message names the node and field."""


def check_graph(graph: Any, max_nodes: int) -> None:
    """Raise ``InvalidGraph`` naming the first problem of ``graph``."""
    if not isinstance(graph, dict):
        raise InvalidGraph("the graph must be an object")
    if graph.get("version") != GRAPH_VERSION:
        raise InvalidGraph(f"not a version {GRAPH_VERSION} request graph (version={graph.get('version')!r})")
    nodes = graph.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise InvalidGraph("nodes must be a non-empty list")
    if len(nodes) > max_nodes:
        raise InvalidGraph(f"the graph has {len(nodes)} nodes, above this server's limit of {max_nodes}")
    for index, node in enumerate(nodes):
        _check_node(node, index)


def _check_node(node: Any, index: int) -> None:
    where = f"nodes[{index}]"
    if not isinstance(node, dict):
        raise InvalidGraph(f"{where} must be an object")
    if node.get("id") != index or isinstance(node.get("id"), bool):
        raise InvalidGraph(f"{where}.id must be {index} (nodes are listed in order, ids are list indices)")
    if not _is_int(node.get("state", 0)):
        raise InvalidGraph(f"{where}.state must be an integer")
    parent = node.get("parent")
    if parent is not None and not (_is_int(parent) and 0 <= parent < index):
        raise InvalidGraph(f"{where}.parent must be null or the id of an earlier node, not {parent!r}")
    extend = node.get("extend")
    if not isinstance(extend, list):
        raise InvalidGraph(f"{where}.extend must be a list of segments")
    for j, seg in enumerate(extend):
        _check_segment(seg, index, f"{where}.extend[{j}]")
    _check_op(node.get("op"), f"{where}.op")


def _check_segment(seg: Any, index: int, where: str) -> None:
    if isinstance(seg, dict) and set(seg) == {"text"} and isinstance(seg["text"], str):
        return
    if (
        isinstance(seg, dict)
        and set(seg) == {"ids"}
        and isinstance(seg["ids"], list)
        and all(_is_int(i) for i in seg["ids"])
    ):
        return
    if isinstance(seg, dict) and set(seg) == {"var", "node"} and isinstance(seg["var"], str):
        if _is_int(seg["node"]) and 0 <= seg["node"] < index:
            return
        raise InvalidGraph(f"{where}.node must be the id of an earlier node, not {seg['node']!r}")
    if isinstance(seg, dict) and set(seg) == {"arg"} and isinstance(seg["arg"], str):
        raise InvalidGraph(
            f"{where}: argument {seg['arg']!r} has no value: fill the graph's placeholders "
            "with bind_arguments() first"
        )
    raise InvalidGraph(f'{where} must be {{"text": str}}, {{"ids": [int]}} or {{"var": str, "node": int}}')


def _check_op(op: Any, where: str) -> None:
    if op is None:
        return
    if not isinstance(op, dict) or op.get("type") not in OP_TYPES:
        raise InvalidGraph(f"{where} must be null or an object with type one of {', '.join(OP_TYPES)}")
    name = op.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidGraph(f"{where}.name must be a string")
    if op["type"] == "gen":
        options = op.get("options", {})
        if not isinstance(options, dict):
            raise InvalidGraph(
                f"{where}.options must be an object of sampling options, not {type(options).__name__}"
            )
        unknown = sorted(k for k in options if k not in GEN_OPTIONS)
        if unknown:
            raise InvalidGraph(
                f"{where}.options has unknown option(s) {', '.join(map(str, unknown))[:200]} "
                f"(known: {', '.join(GEN_OPTIONS)})"
            )
        n = options.get("n", 1)
        if not _is_int(n) or n < 1:
            raise InvalidGraph(f"{where}.options.n must be an integer >= 1")
    elif op["type"] == "select":
        choices = op.get("choices")
        if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
            raise InvalidGraph(f"{where}.choices must be a non-empty list of strings")
        if op.get("method") not in METHODS:
            raise InvalidGraph(f"{where}.method must be one of {', '.join(METHODS)}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
