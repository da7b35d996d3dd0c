"""A grammar compiled by llguidance: a matcher template each request deep-copies."""

from __future__ import annotations

import time
from typing import Any

import llguidance

from radixlm.runtime.constrained.compiled_grammar import GrammarKey
from radixlm.runtime.constrained.llguidance.matcher import LLGuidanceMatcher
from radixlm.runtime.constrained.matcher_protocol import Matcher
from radixlm.runtime.constrained.vocabulary import TokenVocabulary

# Bounds on what one grammar may cost (llguidance's fuel): a compile stops with an error instead of
# running away, and so does one mask step (the request then ends; the server keeps serving).
COMPILE_LIMITS: dict[str, Any] = dict(
    initial_lexer_fuel=2_000_000,
    step_lexer_fuel=400_000,
    max_lexer_states=250_000,
    max_grammar_size=500_000,
    verbose_errors=False,
)


LLG_BASE_BYTES = 64 << 10
LLG_BYTES_PER_GRAMMAR_BYTE = 64


def parser_limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(**COMPILE_LIMITS)


class LLGuidanceGrammar:
    """Immutable after construction; ``new_matcher`` hands each request its own state."""

    backend = "llguidance"

    def __init__(
        self,
        key: GrammarKey,
        vocab: TokenVocabulary,
        eos_token_ids: tuple[int, ...],
        template: llguidance.LLMatcher,
        compile_seconds: float,
        grammar_text: str = "",
    ) -> None:
        self.key = key
        self.vocab = vocab
        self.eos_token_ids = eos_token_ids
        self.template = template
        self.compile_seconds = compile_seconds
        # NOTE: llguidance does not report its size; its lexer states grow with the grammar text and are
        # capped by COMPILE_LIMITS. An estimate, for the cache's byte budget only.
        self.memory_bytes = LLG_BASE_BYTES + LLG_BYTES_PER_GRAMMAR_BYTE * len(grammar_text)

    def new_matcher(self) -> Matcher:
        """A fresh per-request matcher at the grammar's start."""
        return LLGuidanceMatcher(self)


def compile_llguidance(
    key: GrammarKey,
    grammar: str,
    tokenizer: llguidance.LLTokenizer,
    vocab: TokenVocabulary,
    eos_token_ids: tuple[int, ...],
) -> LLGuidanceGrammar:
    """Build the matcher for llguidance ``grammar`` text; ``ValueError`` with llguidance's reason.

    llguidance names unimplemented JSON-schema keywords here (``Unimplemented keys: ["if"]``).
    """
    start = time.perf_counter()
    template = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=parser_limits())
    if template.is_error():
        raise ValueError(f"unsupported {_FIELD.get(key[0], key[0])}: {template.get_error()}")
    # NOTE: a grammar no string can satisfy (``root ::= root``) compiles, then fails its first mask;
    # found here (in the compile pool) it is the client's error, not a request failing mid-decode.
    probe = template.deep_copy()
    probe.compute_bitmask()
    if probe.is_error():
        raise ValueError(
            f"invalid {_FIELD.get(key[0], key[0])}: no output can satisfy this grammar "
            f"(llguidance: {probe.get_error().splitlines()[0]})"
        )
    return LLGuidanceGrammar(key, vocab, eos_token_ids, template, time.perf_counter() - start, grammar)


_FIELD = {"json": "json_schema", "json_object": "json_object"}
