"""Constrained decoding: grammars (regex, JSON schema, choices, dtype, ebnf, structural tags) -> token masks.

Shared here: the ``Matcher`` and ``CompiledGrammar`` protocols, ``GrammarBackend`` (engine selection,
compile pool, cache), grammar inputs, the byte vocabulary, rollback and jump-forward. Each engine has
its own subpackage: ``outlines/`` (outlines-core) and ``llguidance/``.

Names load lazily, so a compile worker process imports only what compiling needs (not torch).
"""

from __future__ import annotations

import importlib
from typing import Any

# Eager: the submodule shares the function's name, so a lazy name would be shadowed by the module.
from radixlm.runtime.constrained.jump_forward import JumpForward, jump_forward

_EXPORTS = {
    "CompiledGrammar": "radixlm.runtime.constrained.compiled_grammar",
    "GrammarBackend": "radixlm.runtime.constrained.backend",
    "LLGuidanceGrammar": "radixlm.runtime.constrained.llguidance.grammar",
    "LLGuidanceMatcher": "radixlm.runtime.constrained.llguidance.matcher",
    "Matcher": "radixlm.runtime.constrained.matcher_protocol",
    "OutlinesGrammar": "radixlm.runtime.constrained.outlines.grammar",
    "OutlinesMatcher": "radixlm.runtime.constrained.outlines.matcher",
}

__all__ = [
    "CompiledGrammar",
    "GrammarBackend",
    "JumpForward",
    "LLGuidanceGrammar",
    "LLGuidanceMatcher",
    "Matcher",
    "OutlinesGrammar",
    "OutlinesMatcher",
    "jump_forward",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
