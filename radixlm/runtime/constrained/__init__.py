"""Constrained decoding: grammars (regex, JSON schema, choices, dtype) -> per-step token bitmasks."""
from radixlm.runtime.constrained.backend import GrammarBackend
from radixlm.runtime.constrained.compiled import CompiledGrammar
from radixlm.runtime.constrained.jump_forward import JumpForward, jump_forward
from radixlm.runtime.constrained.matcher import GrammarMatcher

__all__ = ["CompiledGrammar", "GrammarBackend", "GrammarMatcher", "JumpForward", "jump_forward"]
