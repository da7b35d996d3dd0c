"""GGUF files of the non-Llama architectures load and match transformers on the same weights.

Each case: a tiny random transformers model, written as GGUF the way llama.cpp's converter lays it out
(``tests/helpers/gguf_writer.py``), checked first against transformers' own GGUF loader (so the writer
follows llama.cpp's conventions), then our runner on the GGUF file against the transformers model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from radixlm.runtime.weights.gguf_source import GGUFSource
from tests.helpers.model_conformance import Reference, check_all_logits, check_engine_greedy, tokens
from tests.helpers.model_helpers import save_tiny_gguf, save_tiny_model, tiny_kwargs


def _gemma2():
    from transformers import Gemma2Config

    # query_pre_attn_scalar = head_dim: what llama.cpp (and so a GGUF file) assumes
    # llama.cpp ties Gemma 2's LM head to the embedding (its gemma2 has no output tensor)
    kwargs = tiny_kwargs(head_dim=32, sliding_window=8, query_pre_attn_scalar=32, tie_word_embeddings=True)
    config = Gemma2Config(**kwargs)
    return config, {"query_pre_attn_scalar": 32}


def _gemma3():
    from transformers import Gemma3TextConfig

    rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 4.0},
    }
    # six layers: llama.cpp makes every sixth global, the rest sliding
    config = Gemma3TextConfig(
        **tiny_kwargs(num_hidden_layers=6, head_dim=32, sliding_window=8, query_pre_attn_scalar=32),
        rope_parameters=rope,
    )
    return config, {"rope_parameters": rope, "query_pre_attn_scalar": 32}


def _phi3():
    from transformers import Phi3Config

    return Phi3Config(**tiny_kwargs(num_key_value_heads=4)), {"pad_token_id": 2}


def _phi3_longrope():
    from transformers import Phi3Config

    half = 8  # head_dim 16 -> 8 frequencies
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "long_factor": [1.0 + 0.5 * i for i in range(half)],
        "short_factor": [1.0 + 0.1 * i for i in range(half)],
    }
    kwargs = tiny_kwargs(num_key_value_heads=4, max_position_embeddings=256)
    return Phi3Config(**kwargs, original_max_position_embeddings=64, rope_parameters=rope), {}


def _qwen3_moe():
    from transformers import Qwen3MoeConfig

    kwargs = tiny_kwargs(head_dim=32, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    # transformers' GGUF reader leaves out expert_feed_forward_length
    return Qwen3MoeConfig(**kwargs, norm_topk_prob=True), {
        "moe_intermediate_size": 32,
        "norm_topk_prob": True,
    }


def _mixtral():
    from transformers import MixtralConfig

    return MixtralConfig(**tiny_kwargs(intermediate_size=32, num_local_experts=4, num_experts_per_tok=2)), {}


def _mistral():
    from transformers import MistralConfig

    return MistralConfig(**tiny_kwargs(sliding_window=8)), {}


def _granite():
    from transformers import GraniteConfig

    multipliers = dict(embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2)
    return GraniteConfig(**tiny_kwargs(**multipliers, logits_scaling=2.0)), {}


def _olmo2():
    from transformers import Olmo2Config

    return Olmo2Config(**tiny_kwargs()), {}


def _smollm3():
    from transformers import SmolLM3Config

    # four layers: llama.cpp's NoPE on every fourth (the file has no key for it), as transformers' default
    return SmolLM3Config(**tiny_kwargs(num_hidden_layers=4, no_rope_layer_interval=4)), {}


def _olmoe():
    from transformers import OlmoeConfig

    kwargs = tiny_kwargs(intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    return OlmoeConfig(**kwargs, norm_topk_prob=False), {}


# transformers 5.24 reads none of these GGUF files (or reads a llama file with experts or a sliding
# window as a plain Llama)
NOT_IN_TRANSFORMERS_GGUF = {"mixtral", "mistral", "granite", "olmo2", "smollm3", "olmoe"}
CASES = {
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "phi3": _phi3,
    "phi3-longrope": _phi3_longrope,
    "qwen3moe": _qwen3_moe,
    "mixtral": _mixtral,
    "mistral": _mistral,  # llama with a sliding window in its metadata
    "granite": _granite,
    "olmo2": _olmo2,
    "smollm3": _smollm3,
    "olmoe": _olmoe,
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory) -> tuple[str, Path, Path, dict]:
    """(name, HF directory, its fp32 GGUF file, config fields transformers' GGUF reader leaves out)."""
    from transformers import AutoModelForCausalLM

    config, hf_only = CASES[request.param]()
    tmp = tmp_path_factory.mktemp(request.param)
    hf_dir = save_tiny_model(config, tmp / "hf", seed=5)
    hf = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32)
    gguf_path = save_tiny_gguf(config, hf.state_dict(), tmp / "model.gguf")
    return request.param, hf_dir, gguf_path, hf_only


@torch.no_grad()
def test_the_writer_follows_llamacpp(case) -> None:
    """transformers' GGUF loader reads our file back as the model we wrote."""
    from transformers import AutoModelForCausalLM

    name, hf_dir, gguf_path, hf_only = case
    if name == "phi3-longrope":
        pytest.skip("transformers' GGUF loader does not read Phi-3's rope_factors tensors")
    if name in NOT_IN_TRANSFORMERS_GGUF:
        pytest.skip(f"transformers' GGUF loader does not read {name} files")
    hf = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    from_gguf = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32, **hf_only
    ).eval()
    seq = torch.tensor([tokens(20, 3)])
    torch.testing.assert_close(from_gguf(seq).logits, hf(seq).logits, rtol=1e-4, atol=1e-4)


def test_gguf_logits_match_transformers(case) -> None:
    _, hf_dir, gguf_path, _ = case
    check_all_logits(Reference(hf_dir, served=gguf_path))


@pytest.mark.parametrize("name", ["gemma2", "qwen3moe", "smollm3", "olmoe"])
def test_engine_greedy_on_gguf_matches_transformers(name, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    config, _ = CASES[name]()
    hf_dir = save_tiny_model(config, tmp_path / "hf", seed=8)
    state = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).state_dict()
    check_engine_greedy(hf_dir, max_new_tokens=8, served=save_tiny_gguf(config, state, tmp_path / "m.gguf"))


def test_gguf_config_names_the_architecture(case) -> None:
    name, hf_dir, gguf_path, _ = case
    import json

    want = json.loads((hf_dir / "config.json").read_text())["architectures"]
    assert GGUFSource(str(gguf_path)).hf_config()["architectures"] == want


def test_phi3_rope_factor_tensors_become_longrope(tmp_path) -> None:
    """The rope_factors_long/short tensors and the original context come back as the config's LongRoPE
    (the logit checks stay within the original context, where transformers and we agree on the
    short factors)."""
    config, _ = _phi3_longrope()
    hf_dir = save_tiny_model(config, tmp_path / "hf", with_tokenizer=False)
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).state_dict()
    ours = GGUFSource(str(save_tiny_gguf(config, state, tmp_path / "m.gguf"))).hf_config()
    rope = config.rope_parameters
    assert ours["rope_parameters"]["rope_type"] == "longrope"
    assert ours["original_max_position_embeddings"] == 64
    for key in ("long_factor", "short_factor"):
        assert ours["rope_parameters"][key] == pytest.approx(rope[key], rel=1e-6)


@pytest.mark.parametrize("name", ["gemma3", "phi3", "qwen3moe"])
def test_q8_0_gguf_loads_and_serves_the_files_blocks(name, tmp_path) -> None:
    """Linear weights stored as Q8_0 (Phi-3's fused ones cut into row views, Qwen3-MoE's stacked
    experts): dequantized, the model matches transformers' reading of the same file; served as the
    file's blocks (auto: GGUFLinear, GGUFExperts), each layer holds exactly those values (the logits
    then differ by the kernel's int8 activations)."""
    from transformers import AutoModelForCausalLM

    from radixlm.kernels.cpu import gguf_blocks
    from radixlm.runtime.layers.moe import GGUFExperts
    from radixlm.runtime.layers.quantized_linear import GGUFLinear
    from tests.helpers.model_helpers import assert_logits_close, make_runner, prefill_then_decode_logits

    config, hf_only = CASES[name]()
    hf_dir = save_tiny_model(config, tmp_path / "hf", seed=6, with_tokenizer=False)
    state = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).state_dict()
    path = save_tiny_gguf(config, state, tmp_path / "q8.gguf", block_types={"proj": "Q8_0"})
    ref = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, dtype=torch.float32, **hf_only
    ).eval()
    dequantized = make_runner(path, quantization="none")
    seq = tokens(16, 7)
    with torch.no_grad():
        want = ref(torch.tensor([seq])).logits[0]
    outs = prefill_then_decode_logits(dequantized, seq)
    assert_logits_close(torch.cat([outs[0], *(o[None] for o in outs[1:])]), want)

    native = make_runner(path, quantization="auto")
    assert native.quantization == "q8_0"
    float_params = dict(dequantized.model.named_parameters())
    served = {n: m for n, m in native.model.named_modules() if isinstance(m, GGUFLinear)}
    assert "model.layers.0.self_attn.qkv_proj" in served
    for module_name, module in served.items():
        assert module.fmt == "q8_0"
        want_rows = float_params[f"{module_name}.weight"]
        assert torch.equal(gguf_blocks.dequantize(module.blocks, "q8_0"), want_rows)
    experts = [m for m in native.model.modules() if isinstance(m, GGUFExperts)]
    assert len(experts) == (config.num_hidden_layers if name == "qwen3moe" else 0)
    for module_name, module in native.model.named_modules():
        if isinstance(module, GGUFExperts):  # the file's blocks, served as stored
            assert torch.equal(module.dequantized().gate_up_proj, float_params[f"{module_name}.gate_up_proj"])
            assert torch.equal(module.dequantized().down_proj, float_params[f"{module_name}.down_proj"])
    outs = prefill_then_decode_logits(native, seq)
    assert_logits_close(torch.cat([outs[0], *(o[None] for o in outs[1:])]), want, rtol=0.1)


def test_gguf_tokenizer_comes_from_the_file(case) -> None:
    """The tokenizer and chat template come from the GGUF metadata (no --tokenizer), also for the
    architectures transformers' GGUF model reader refuses (granite, olmo2, smollm3, olmoe) and for a
    Gemma file with a byte-level vocabulary (whose family class is sentencepiece's): ids are the
    file's own vocabulary, its merge applied, its specials whole."""
    import gguf

    from radixlm.runtime.weights.tokenizer_files import tokenizer_for
    from tests.helpers.model_helpers import CHATML_TEMPLATE

    _, _, gguf_path, _ = case
    vocab = gguf.GGUFReader(str(gguf_path)).get_field("tokenizer.ggml.tokens").contents()
    tokenizer = tokenizer_for(str(gguf_path))
    text = "<|im_start|>t t<|im_end|>"
    want = [1, vocab.index("t"), vocab.index("Ġt"), 2]
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == want
    assert tokenizer.decode(want) == text
    assert tokenizer.chat_template == CHATML_TEMPLATE
    assert tokenizer.eos_token_id == 2
