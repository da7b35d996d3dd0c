"""Time to first token of a chat with one image: a new image (cold) against the same image again
(the encoder cache and the radix cache both hit), on an Engine.

A SmolVLM-256M-shaped Idefics3 with random weights is saved once (SigLIP-B/16 tower at 512 px: 1024
patches, 12 layers, hidden 768; pixel shuffle 4 -> 64 image tokens; a SmolLM2-135M language model
with a 49280-token head; a byte-level tokenizer). TTFT is the wall time of a ``max_new_tokens=1``
generate, preprocessing included. A warm-up request with another image comes first, so the cold run
pays for its image only; ``encoder cache only`` repeats the image after ``flush_cache`` (no radix hit).

    python -m benchmarks.workloads.vision [--threads 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import numpy as np
import torch

from benchmarks.harness import add_json_argument, write_results
from radixlm.runtime.engine import Engine

PROMPT = "<|im_start|>user\n<image>What is in this picture?<|im_end|>\n<|im_start|>assistant\n"
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>"]


def save_model(path: Path) -> Path:
    """The random SmolVLM-256M-shaped checkpoint and its processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )

    vocab = {t: i for i, t in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tok.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    text = dict(
        model_type="llama", vocab_size=49280, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True,
    )  # fmt: skip
    vision = dict(
        hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
        image_size=512, patch_size=16,
    )  # fmt: skip
    cfg = Idefics3Config(
        text_config=text,
        vision_config=vision,
        scale_factor=4,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    images = Idefics3ImageProcessor(
        do_image_splitting=False, size={"longest_edge": 512}, max_image_size={"longest_edge": 512}
    )
    Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=64).save_pretrained(str(path))
    torch.manual_seed(0)
    Idefics3ForConditionalGeneration(cfg).save_pretrained(str(path))
    return path


def png(seed: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.RandomState(seed).randint(0, 255, (480, 640, 3), dtype=np.uint8)).save(
        buf, "PNG"
    )
    return buf.getvalue()


def ttft_ms(engine: Engine, image: bytes) -> tuple[float, int]:
    """(ms to the first token, prompt tokens served from the radix cache)."""
    start = time.perf_counter()
    out = engine.generate(PROMPT, {"max_new_tokens": 1, "temperature": 0}, image_data=image)
    return (time.perf_counter() - start) * 1e3, int(out["meta_info"]["cached_tokens"])  # type: ignore[index]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    add_json_argument(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = save_model(Path(tmp) / "smolvlm-shaped")
        engine = Engine(model=str(model), device="cpu", dtype="float32", num_threads=args.threads, seed=0)
        try:
            ttft_ms(engine, png(0))  # warm-up: one-time costs
            cold, _ = ttft_ms(engine, png(1))
            repeat, cached = ttft_ms(engine, png(1))
            engine.flush_cache()
            encoder_only, _ = ttft_ms(engine, png(1))
            cache = engine.scheduler.runner.encoder_cache
            hits, misses = (cache.hits, cache.misses) if cache is not None else (0, 0)
        finally:
            engine.shutdown()
    rows = [("cold (new image)", cold), ("same image again", repeat), ("encoder cache only", encoder_only)]
    for label, ms in rows:
        print(f"{label:>20}: TTFT {ms:8.1f} ms")
    print(f"repeat speedup {cold / repeat:.1f}x (radix cache served {cached} prompt tokens)")
    print(f"encoder cache alone {cold / encoder_only:.1f}x; encoder cache hits {hits}, misses {misses}")
    headline = [{"label": label, "metric": "ttft_ms", "value": round(ms, 1)} for label, ms in rows]
    write_results(args.json, "benchmarks.workloads.vision", headline, {"cached_tokens": cached})


if __name__ == "__main__":
    main()
