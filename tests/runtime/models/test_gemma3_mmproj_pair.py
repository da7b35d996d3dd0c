"""Gemma 3 served from llama.cpp's pair of files (the language model GGUF, arch gemma3, + a ``gemma3``
``--mmproj``) against transformers' Gemma3ForConditionalGeneration on the same tiny random checkpoint:
the prompt ids our metadata-built processor writes, image rows, logits and greedy tokens with one and
two images (runner, Engine, HTTP), and the pairs that must be refused before serving.

The language model has six layers, the sixth global: llama.cpp records no layer pattern for Gemma 3
and takes every sixth. The reference model's input projection is rounded to fp16 first, as the
converter stores it."""

from __future__ import annotations

import httpx
import pytest
import torch

from radixlm.runtime.multimodal.request_images import load_prompt_processor
from radixlm.runtime.server.launch import launch_server
from radixlm.runtime.weights.loader import load_model
from radixlm.runtime.weights.mmproj import MmprojFile
from tests.helpers.engines import make_engine
from tests.helpers.gemma3_vision_helpers import BOI, LLAMA_CPP_LAYERS, save_tiny_gemma3_vision
from tests.helpers.gguf_writer import save_tiny_gguf
from tests.helpers.mmproj_writer import save_tiny_mmproj
from tests.helpers.model_helpers import assert_logits_close, make_runner
from tests.helpers.vision_helpers import (
    language_model_tensors,
    png_bytes,
    png_data_url,
    random_image,
    run_prompt,
    save_tiny_idefics3,
)

PROMPTS = {
    "one": (f"<|im_start|>user\n{BOI}what is this?<|im_end|>\n", [0]),
    "two": (f"a{BOI} and {BOI} compare", [1, 2]),
}
CPU = torch.device("cpu")
PROJECTION = "model.multi_modal_projector.mm_input_projection_weight"

LM_PREFIX = "model.language_model."  # the language model's tensors in the HF checkpoint


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(LM GGUF, mmproj GGUF, HF model, HF processor) of one tiny random Gemma 3."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    root = tmp_path_factory.mktemp("gemma3pair")
    hf_dir = save_tiny_gemma3_vision(root / "hf", layers=LLAMA_CPP_LAYERS)
    hf = AutoModelForImageTextToText.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        weight = hf.model.multi_modal_projector.mm_input_projection_weight
        weight.copy_(weight.half().float())
    proc = AutoProcessor.from_pretrained(str(hf_dir))
    lm = language_model_tensors(hf, LM_PREFIX)
    lm_path = save_tiny_gguf(hf.config.text_config, lm, root / "model.gguf", tokenizer=proc.tokenizer)
    mmproj = save_tiny_mmproj(hf.config, hf.state_dict(), proc.image_processor, root / "mmproj-model.gguf")
    return lm_path, mmproj, hf, proc


@pytest.fixture(scope="module")
def runner(pair):
    lm_path, mmproj, _, _ = pair
    return make_runner(lm_path, mmproj=str(mmproj))


def _images(seeds):
    return [random_image(s, (30 + 7 * s, 50 - 5 * s)) for s in seeds]


def _greedy(hf, inputs, steps: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(
            **inputs,
            max_new_tokens=steps,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            min_new_tokens=steps,
        )
    return out[0, inputs["input_ids"].shape[1] :].tolist()


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_logits_and_greedy_match_transformers(pair, runner, case):
    _, _, hf, hf_proc = pair
    text, seeds = PROMPTS[case]
    images = _images(seeds)
    proc = load_prompt_processor(runner.model_info())
    inputs = hf_proc(text=[text], images=[images], return_tensors="pt")
    ids, _ = proc(text, images)
    assert ids == inputs["input_ids"][0].tolist()  # the GGUF tokenizer + metadata-built processor
    with torch.no_grad():
        ref = hf(**inputs).logits[0]
    logits, tokens = run_prompt(runner, proc, text, images, steps=8)
    assert_logits_close(logits, ref)
    assert tokens == _greedy(hf, inputs, 8)


def test_image_rows_match_transformers(pair, runner):
    """The tower + pooled projector alone: the norm's stored 1 + w and the untransposed projection."""
    _, _, hf, hf_proc = pair
    pixels = hf_proc.image_processor(_images([5]), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        ref = hf.model.get_image_features(pixel_values=pixels)
    ref = getattr(ref, "pooler_output", ref)
    rows = runner.model.encode_images(pixels)
    assert_logits_close(rows, torch.as_tensor(ref).reshape(rows.shape), rtol=2e-6)


def test_engine_greedy_matches_transformers(pair):
    lm_path, mmproj, hf, hf_proc = pair
    text = f"<|im_start|>user\nlook{BOI} then{BOI}<|im_end|>\n<|im_start|>assistant\n"
    images = _images([3, 4])
    inputs = hf_proc(text=[text], images=[images], return_tensors="pt")
    eng = make_engine(str(lm_path), mmproj=str(mmproj), device="cpu", dtype="float32", num_threads=1)
    try:
        assert eng.model_info()["image_token"] == BOI
        out = eng.generate(
            text,
            {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True},
            image_data=[png_bytes(image) for image in images],
        )
    finally:
        eng.shutdown()
    assert out["output_ids"] == _greedy(hf, inputs, 8)


def test_http_generate_with_image_data_matches_transformers(pair):
    """The server's front end builds Gemma3Processor from the pair in its own process."""
    lm_path, mmproj, hf, hf_proc = pair
    text = f"<|im_start|>user\n{BOI}describe<|im_end|>\n<|im_start|>assistant\n"
    image = _images([6])[0]
    inputs = hf_proc(text=[text], images=[[image]], return_tensors="pt")
    body = {"text": text, "image_data": png_data_url(image)}
    body["sampling_params"] = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
    with launch_server(
        model=str(lm_path), mmproj=str(mmproj), device="cpu", num_threads=1, kv_cache_gb=0.02
    ) as server:
        out = httpx.post(server.url + "/generate", json=body, timeout=60)
    assert out.status_code == 200, out.text
    assert out.json()["output_ids"] == _greedy(hf, inputs, 6)


def test_bad_pairs_are_refused(pair, tmp_path):
    lm_path, mmproj, hf, proc = pair
    sd = hf.state_dict()

    def write(name, **kwargs):
        state = kwargs.pop("state", sd)
        return str(save_tiny_mmproj(hf.config, state, proc.image_processor, tmp_path / name, **kwargs))

    with pytest.raises(ValueError, match="has no tensor 'mm.soft_emb_norm.weight'"):
        MmprojFile(write("no-norm.gguf", drop=("mm.soft_emb_norm.weight",)))
    with pytest.raises(ValueError, match="has no tensor 'mm.input_projection.weight'"):
        MmprojFile(write("no-proj.gguf", drop=("mm.input_projection.weight",)))
    with pytest.raises(ValueError, match="has no tensor 'mm.model.fc.weight'"):  # Idefics3's, not here
        MmprojFile(write("idefics.gguf", projector_type="idefics3"))
    wide = dict(sd)
    wide[PROJECTION] = torch.randn(32, 48)
    with pytest.raises(
        ValueError, match="projects images to 48 features, but the language model .* hidden size 64"
    ):
        load_model(str(lm_path), CPU, torch.float32, mmproj=write("wide.gguf", state=wide))
    narrow = dict(sd)
    narrow[PROJECTION] = torch.randn(24, 64)
    with pytest.raises(ValueError, match="'mm.input_projection.weight' has shape \\[24, 64\\]"):
        MmprojFile(write("narrow.gguf", state=narrow))


def test_a_projector_of_another_family_is_refused(pair, tmp_path):
    """A Gemma 3 projector beside a llama language model, and SmolVLM's beside Gemma 3's."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    lm_path, mmproj, _, _ = pair
    smol_dir = save_tiny_idefics3(tmp_path / "smol")
    smol = AutoModelForImageTextToText.from_pretrained(str(smol_dir), dtype=torch.float32)
    smol_proc = AutoProcessor.from_pretrained(str(smol_dir))
    smol_lm = {
        k.replace("model.text_model.", "model."): v
        for k, v in smol.state_dict().items()
        if k.startswith("model.text_model.") or k == "lm_head.weight"
    }
    llama = save_tiny_gguf(
        smol.config.text_config, smol_lm, tmp_path / "llama.gguf", tokenizer=smol_proc.tokenizer
    )
    smol_mmproj = save_tiny_mmproj(
        smol.config, smol.state_dict(), smol_proc.image_processor, tmp_path / "smol.gguf"
    )
    with pytest.raises(
        ValueError,
        match="'gemma3' projector .* needs a Gemma3ForCausalLM language model, not LlamaForCausalLM",
    ):
        load_model(str(llama), CPU, torch.float32, mmproj=str(mmproj))
    with pytest.raises(
        ValueError,
        match="'idefics3' projector .* needs a LlamaForCausalLM language model, not Gemma3ForCausalLM",
    ):
        load_model(str(lm_path), CPU, torch.float32, mmproj=str(smol_mmproj))


def test_a_tokenizer_without_gemma_image_tokens_is_refused(pair, tmp_path):
    _, mmproj, hf, _ = pair
    lm = language_model_tensors(hf, LM_PREFIX)
    plain = save_tiny_gguf(hf.config.text_config, lm, tmp_path / "plain.gguf")
    with pytest.raises(ValueError, match="the tokenizer has no <start_of_image> token"):
        load_model(str(plain), CPU, torch.float32, mmproj=str(mmproj))


def test_pooling_defaults_to_clip_cpps_four_per_side(pair, tmp_path):
    """The converter writes the pooling only when it is not 4 (every released Gemma 3: 64 -> 16 per
    side); without the key an 8 x 8 grid pools to 2 x 2."""
    import copy

    _, _, hf, proc = pair
    config = copy.deepcopy(hf.config)
    config.mm_tokens_per_image = 4
    file = MmprojFile(
        str(save_tiny_mmproj(config, hf.state_dict(), proc.image_processor, tmp_path / "m.gguf"))
    )
    assert file.reader.get_field("clip.vision.projector.scale_factor") is None
    assert file.scale_factor == 4 and file.image_settings.tokens_per_crop == 4
