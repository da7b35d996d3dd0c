"""A tiny random Gemma 3 vision-language checkpoint (``Gemma3ForConditionalGeneration``) with its
``Gemma3Processor``."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers.model_helpers import save_tiny_tokenizer, tiny_kwargs

BOI, SOFT, EOI = "<start_of_image>", "<image_soft_token>", "<end_of_image>"
WINDOW = 8  # below the 16 tokens of an image: sliding layers cut into its both-ways attention
TOKENS_PER_IMAGE = 16
LAYERS = ("sliding_attention", "full_attention", "sliding_attention")
# what llama.cpp assumes of a Gemma 3 GGUF (no key records it): every sixth layer global
LLAMA_CPP_LAYERS = ("sliding_attention",) * 5 + ("full_attention",)


def save_tiny_gemma3_vision(path: str | Path, seed: int = 0, layers: tuple[str, ...] = LAYERS) -> Path:
    """A Gemma 3 LM of ``layers`` (default sliding, global, sliding; window 8, local and global ropes)
    + a 2-layer SigLIP tower (32 px images, 4 px patches: an 8 x 8 grid pooled to 16 tokens per
    image)."""
    from transformers import (
        AutoTokenizer,
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
    )

    path = Path(path)
    save_tiny_tokenizer(path)
    tok = AutoTokenizer.from_pretrained(
        str(path), extra_special_tokens={"boi_token": BOI, "image_token": SOFT, "eoi_token": EOI}
    )
    text = dict(
        (k, v)
        for k, v in tiny_kwargs(head_dim=16, sliding_window=WINDOW).items()
        if k != "tie_word_embeddings"
    )
    text.update(
        model_type="gemma3_text",
        num_hidden_layers=len(layers),
        layer_types=list(layers),
        query_pre_attn_scalar=16,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 4.0},
        },
    )
    vision = dict(
        model_type="siglip_vision_model",
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=4,
        vision_use_head=False,
    )
    cfg = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=TOKENS_PER_IMAGE,
        boi_token_index=tok.convert_tokens_to_ids(BOI),
        eoi_token_index=tok.convert_tokens_to_ids(EOI),
        image_token_index=tok.convert_tokens_to_ids(SOFT),
        tie_word_embeddings=True,
    )
    images = Gemma3ImageProcessor(size={"height": 32, "width": 32})
    Gemma3Processor(image_processor=images, tokenizer=tok, image_seq_length=TOKENS_PER_IMAGE).save_pretrained(
        str(path)
    )
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(cfg)
    with torch.no_grad():  # norms, biases and the (zero-initialised) projection away from their starts
        for param in model.parameters():
            if param.dim() == 1:
                param.normal_(0.0, 0.2)
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0.0, 0.2)
    model.save_pretrained(str(path))
    return path
