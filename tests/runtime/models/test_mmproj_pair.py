"""SmolVLM served from llama.cpp's pair of files (the language model GGUF + ``--mmproj``) against
transformers' Idefics3 on the same tiny random checkpoint: the prompt ids our metadata-built processor
writes, image rows, logits and greedy tokens with one and two images (runner, Engine, HTTP), a Q8_0
language model, F16/Q8_0 towers, older fc1/fc2 naming, and the files that must be refused before
serving."""

from __future__ import annotations

import httpx
import pytest
import torch

from radixlm.runtime.multimodal.request_images import load_prompt_processor
from radixlm.runtime.server.launch import launch_server
from radixlm.runtime.weights.loader import load_model
from radixlm.runtime.weights.mmproj import MmprojFile
from tests.helpers.engines import make_engine
from tests.helpers.gguf_writer import save_tiny_gguf
from tests.helpers.mmproj_writer import roundtrip, save_tiny_mmproj
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
    "one": ("<|im_start|>user\n<image>what is this?<|im_end|>\n", [0]),
    "two": ("a<image> and <image> compare", [1, 2]),
}
CPU = torch.device("cpu")

LM_PREFIX = "model.text_model."  # the language model's tensors in the HF checkpoint


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(HF dir, LM GGUF, mmproj GGUF, HF model, HF processor) of one tiny random Idefics3."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    root = tmp_path_factory.mktemp("smolvlm")
    hf_dir = save_tiny_idefics3(root / "hf", longest_edge=64)  # images split into crops
    hf = AutoModelForImageTextToText.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    proc = AutoProcessor.from_pretrained(str(hf_dir))
    lm = language_model_tensors(hf, LM_PREFIX)
    lm_path = save_tiny_gguf(hf.config.text_config, lm, root / "model.gguf", tokenizer=proc.tokenizer)
    mmproj = save_tiny_mmproj(hf.config, hf.state_dict(), proc.image_processor, root / "mmproj-model.gguf")
    return hf_dir, lm_path, mmproj, hf, proc


@pytest.fixture(scope="module")
def runner(pair):
    _, lm_path, mmproj, _, _ = pair
    return make_runner(lm_path, mmproj=str(mmproj))


def _images(seeds):
    return [random_image(s, (30 + 7 * s, 50 - 5 * s)) for s in seeds]


def _vision_weights(pair, path, **writer_args):
    """The tower and connector weights our loader serves from an mmproj file written with ``writer_args``."""
    _, lm_path, _, hf, proc = pair
    state = writer_args.pop("state_dict", hf.state_dict())
    save_tiny_mmproj(hf.config, state, proc.image_processor, path, **writer_args)
    model = load_model(str(lm_path), CPU, torch.float32, mmproj=str(path)).model
    return {k: v for k, v in model.state_dict().items() if k.startswith(("vision_model.", "proj."))}


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_logits_and_greedy_match_transformers(pair, runner, case):
    _, _, _, hf, hf_proc = pair
    text, seeds = PROMPTS[case]
    images = _images(seeds)
    proc = load_prompt_processor(runner.model_info())
    inputs = hf_proc(text=[text], images=[images], return_tensors="pt")
    ids, _ = proc(text, images)
    assert ids == inputs["input_ids"][0].tolist()  # the GGUF tokenizer + metadata-built processor
    with torch.no_grad():
        ref = hf(**inputs).logits[0]
        gen = hf.generate(
            **inputs, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0, min_new_tokens=8
        )[0, inputs["input_ids"].shape[1] :].tolist()
    logits, tokens = run_prompt(runner, proc, text, images, steps=8)
    assert_logits_close(logits, ref)
    assert tokens == gen


def test_http_generate_with_image_data_matches_transformers(pair):
    """The server's front end builds the processor from the pair in its own process."""
    _, lm_path, mmproj, hf, hf_proc = pair
    text = "<|im_start|>user\n<image>describe<|im_end|>\n<|im_start|>assistant\n"
    image = _images([6])[0]
    inputs = hf_proc(text=[text], images=[[image]], return_tensors="pt")
    with torch.no_grad():
        expected = hf.generate(**inputs, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    body = {"text": text, "image_data": png_data_url(image)}
    body["sampling_params"] = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
    with launch_server(
        model=str(lm_path), mmproj=str(mmproj), device="cpu", num_threads=1, kv_cache_gb=0.02
    ) as server:
        out = httpx.post(server.url + "/generate", json=body, timeout=60)
    assert out.status_code == 200, out.text
    assert out.json()["output_ids"] == expected[0, inputs["input_ids"].shape[1] :].tolist()


def test_image_rows_match_transformers(pair, runner):
    """The tower + connector alone, tighter than the logits (GELU's tanh form shows here)."""
    _, _, _, hf, hf_proc = pair
    pixels = hf_proc.image_processor([_images([5])], return_tensors="pt")
    with torch.no_grad():
        ref = hf.model.get_image_features(pixels["pixel_values"], pixels["pixel_attention_mask"])
    ref = torch.stack(list(getattr(ref, "pooler_output", ref)))
    rows = runner.model.encode_images(pixels["pixel_values"][0], pixels["pixel_attention_mask"][0])
    assert_logits_close(rows, ref.reshape(rows.shape), rtol=2e-6)


def test_engine_greedy_matches_transformers(pair):
    _, lm_path, mmproj, hf, hf_proc = pair
    text = "<|im_start|>user\nlook<image> then<image><|im_end|>\n<|im_start|>assistant\n"
    pngs = [png_bytes(image) for image in _images([3, 4])]
    inputs = hf_proc(text=[text], images=[_images([3, 4])], return_tensors="pt")
    with torch.no_grad():
        expected = hf.generate(**inputs, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    eng = make_engine(str(lm_path), mmproj=str(mmproj), device="cpu", dtype="float32", num_threads=1)
    try:
        assert eng.model_info()["image_token"] == "<image>"
        out = eng.generate(text, {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}, image_data=pngs)
    finally:
        eng.shutdown()
    assert out["output_ids"] == expected[0, inputs["input_ids"].shape[1] :].tolist()


def test_a_q8_0_language_model_keeps_its_blocks_beside_a_float_tower(pair, runner, tmp_path):
    _, lm_path, mmproj, hf, _ = pair
    lm = language_model_tensors(hf, LM_PREFIX)
    q8 = save_tiny_gguf(
        hf.config.text_config, lm, tmp_path / "q8.gguf", {"proj": "Q8_0"}, runner.loaded.tokenizer
    )
    loaded = load_model(str(q8), CPU, torch.float32, quantization="auto", mmproj=str(mmproj))
    assert loaded.quantization == "q8_0"
    pixels = torch.rand(2, 3, 32, 32)
    torch.testing.assert_close(loaded.model.encode_images(pixels), runner.model.encode_images(pixels))


@pytest.mark.parametrize("weight_type", ["F16", "Q8_0"])
def test_f16_and_q8_0_towers_serve_the_stored_values(pair, weight_type, tmp_path):
    _, _, _, hf, _ = pair
    stored = _vision_weights(pair, tmp_path / "stored.gguf", weight_type=weight_type)
    rounded = roundtrip(hf.state_dict(), weight_type)
    expected = _vision_weights(pair, tmp_path / "rounded.gguf", state_dict=rounded)
    assert stored.keys() == expected.keys()
    for name, value in stored.items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=1e-6, msg=name)


def test_older_swapped_ffn_names_are_read_as_clip_cpp_does(pair, tmp_path):
    plain = _vision_weights(pair, tmp_path / "plain.gguf")
    swapped = _vision_weights(pair, tmp_path / "swapped.gguf", ffn_swapped=True)
    for name, value in plain.items():
        torch.testing.assert_close(value, swapped[name], rtol=0, atol=0, msg=name)


def test_bad_mmproj_files_are_refused(pair, tmp_path):
    hf_dir, lm_path, mmproj, hf, proc = pair
    sd = hf.state_dict()

    def write(name, **kwargs):
        return str(
            save_tiny_mmproj(
                hf.config, kwargs.pop("state", sd), proc.image_processor, tmp_path / name, **kwargs
            )
        )

    with pytest.raises(ValueError, match="projector type 'qwen2vl_merger' is not served"):
        MmprojFile(write("qwen.gguf", projector_type="qwen2vl_merger"))
    with pytest.raises(ValueError, match="has no tensor 'mm.input_projection.weight'"):  # Gemma 3's
        MmprojFile(write("gemma.gguf", projector_type="gemma3"))
    with pytest.raises(ValueError, match="has no tensor 'v.blk.1.attn_k.weight'"):
        MmprojFile(write("missing.gguf", drop=("v.blk.1.attn_k.weight",)))
    data = mmproj.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) - 100])
    with pytest.raises(ValueError, match="truncated"):
        MmprojFile(str(tmp_path / "cut.gguf"))
    with pytest.raises(ValueError, match="not an mmproj file"):
        MmprojFile(str(lm_path))
    wide = dict(sd)
    wide["model.connector.modality_projection.proj.weight"] = torch.randn(48, 128)
    with pytest.raises(
        ValueError, match="projects images to 48 features, but the language model .* hidden size 64"
    ):
        load_model(str(lm_path), CPU, torch.float32, mmproj=write("wide.gguf", state=wide))
    short = dict(sd)
    short["model.vision_model.embeddings.position_embedding.weight"] = torch.randn(8, 32)
    with pytest.raises(
        ValueError, match="'v.position_embd.weight' has shape \\[8, 32\\]; the metadata needs"
    ):
        MmprojFile(write("short.gguf", state=short))
    with pytest.raises(ValueError, match="is not one"):
        load_model(str(hf_dir), CPU, torch.float32, mmproj=str(mmproj))
    plain = save_tiny_gguf(hf.config.text_config, language_model_tensors(hf, LM_PREFIX), tmp_path / "t.gguf")
    with pytest.raises(ValueError, match="the tokenizer has no <image> token"):  # the tiny byte-level one
        load_model(str(plain), CPU, torch.float32, mmproj=str(mmproj))
