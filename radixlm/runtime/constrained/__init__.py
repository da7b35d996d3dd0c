"""Constrained decoding: grammars (regex, JSON schema, choices, dtype, ebnf, structural tags) -> token masks.

Names load lazily, so a compile worker process imports only what compiling needs (not torch).
"""

from __future__ import annotations

import importlib
from typing import Any

# Eager: the submodule shares the function's name, so a lazy name would be shadowed by the module.
from radixlm.runtime.constrained.jump_forward import JumpForward, jump_forward

_EXPORTS = {
    "CompiledGrammar": "radixlm.runtime.constrained.compiled",
    "GrammarBackend": "radixlm.runtime.constrained.backend",
    "GrammarMatcher": "radixlm.runtime.constrained.matcher",
    "LLGuidanceMatcher": "radixlm.runtime.constrained.llg_matcher",
}

__all__ = [
    "CompiledGrammar",
    "GrammarBackend",
    "GrammarMatcher",
    "JumpForward",
    "LLGuidanceMatcher",
    "jump_forward",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
