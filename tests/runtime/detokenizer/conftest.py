"""Detokenizer tests run on the real SmolLM2 tokenizer (byte-level BPE, multi-byte characters)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer
