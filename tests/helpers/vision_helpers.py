"""A tiny random Idefics3 (SmolVLM) checkpoint with its processor, test images, and a prompt with images
run through a runner."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import torch

from radixlm.runtime.executor.forward_batch import ForwardMode
from radixlm.runtime.multimodal.encoder_cache import EncoderCache
from radixlm.runtime.multimodal.encoder_stage import chunk_rows, encode_images
from radixlm.runtime.multimodal.image_spans import image_spans, spans_in
from tests.helpers.model_helpers import PagedSession, save_tiny_tokenizer, tiny_kwargs

IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]


def save_tiny_idefics3(path: str | Path, seed: int = 0, longest_edge: int = 32) -> Path:
    """A 2-layer Llama LM + 2-layer SigLIP tower (32 px crops, 8 px patches, pixel shuffle 2: 4 tokens
    per crop); saved with an ``Idefics3Processor`` that resizes images to ``longest_edge`` and splits
    them into 32 px crops (plus the whole image) when that is larger than 32."""
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    path = Path(path)
    save_tiny_tokenizer(path)
    tok = AutoTokenizer.from_pretrained(str(path))
    tok.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    vision = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
    )
    cfg = Idefics3Config(
        text_config=dict(tiny_kwargs(), model_type="llama"),
        vision_config=vision,
        scale_factor=2,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    images = Idefics3ImageProcessor(
        do_image_splitting=longest_edge > 32,
        size={"longest_edge": longest_edge},
        max_image_size={"longest_edge": 32},
    )
    Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=4).save_pretrained(str(path))
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(cfg)
    with torch.no_grad():  # norms and biases away from their 1 / 0 starts, so they matter
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.normal_(1.0 if "norm" in name else 0.0, 0.2)
    model.save_pretrained(str(path))
    return path


def random_image(seed: int, size: tuple[int, int] = (40, 50)):
    """A random RGB PIL image."""
    from PIL import Image

    pixels = np.random.RandomState(seed).randint(0, 255, (*size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def png_bytes(image) -> bytes:
    """A PIL image as PNG file bytes."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def png_data_url(image) -> str:
    """A PIL image as a ``data:image/png;base64,...`` URL."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode()


def random_png(seed: int) -> bytes:
    """``random_image(seed)`` as PNG file bytes."""
    return png_bytes(random_image(seed))


def language_model_tensors(hf, prefix: str) -> dict[str, torch.Tensor]:
    """A vision-language model's language-model tensors (under ``prefix``) renamed as a plain causal
    LM checkpoint's (``model.``), with its LM head."""
    return {
        k.replace(prefix, "model."): v
        for k, v in hf.state_dict().items()
        if k.startswith(prefix) or k == "lm_head.weight"
    }


def run_prompt(runner, proc, text, images, chunk: int | None = None, steps: int = 0):
    """All prompt logits (prefill in chunks of ``chunk``), then ``steps`` greedy tokens; a model whose
    images attend both ways (Gemma 3) gets each chunk's image spans, as the scheduler gives them."""
    ids, mm = proc(text, images)
    spans = image_spans(mm) if getattr(runner.model, "bidirectional_images", False) else None
    encoded = encode_images(runner.model, EncoderCache(1 << 20), mm.items)
    s = PagedSession(runner)
    row = s.open()
    chunk = chunk or len(ids)
    logits = []
    for start in range(0, len(ids), chunk):
        end = min(start + chunk, len(ids))
        offsets, rows = chunk_rows(mm, start, end, encoded)
        fb = s._build(ForwardMode.EXTEND, [row], [ids[start:end]], True)
        if offsets:
            fb.mm_positions, fb.mm_embeds = torch.tensor(offsets), torch.stack(rows)
            if spans is not None:
                fb.image_spans = [spans_in(spans, start, end)]
        logits.append(runner.forward(fb))
    out = []
    tok = int(logits[-1][-1].argmax())
    for _ in range(steps):
        out.append(tok)
        tok = int(s.decode([row], [tok])[0].argmax())
    s.close(row)
    return torch.cat(logits), out
