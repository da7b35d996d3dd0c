"""The transformers fallback (``model_impl="transformers"``) equals transformers on tiny random
checkpoints of Llama and of architectures we have no native code for, through our KV pools, radix
cache and Engine; ``auto`` picks the right implementation; what it cannot serve exactly is refused."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import (
    BloomConfig,
    FalconConfig,
    Gemma2Config,
    GPT2Config,
    GPTNeoXConfig,
    StableLmConfig,
    Starcoder2Config,
)

from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.layers.packed_weights import repack_weights
from radixlm.runtime.models.model_impl import choose_model_impl
from radixlm.runtime.weights.checkpoint import iter_safetensors
from tests.helpers.engines import make_engine
from tests.helpers.model_conformance import Reference, check_all_logits, check_engine_greedy, tokens
from tests.helpers.model_helpers import (
    TINY_VOCAB,
    PagedSession,
    assert_logits_close,
    make_runner,
    save_tiny_model,
    tiny_llama_config,
)

IDS = dict(vocab_size=TINY_VOCAB, bos_token_id=0, eos_token_id=0)
CONFIGS = {
    "llama": lambda: tiny_llama_config(),
    "llama-wide-heads": lambda: tiny_llama_config(head_dim=32),  # head_dim != hidden / heads
    "gpt2": lambda: GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=512, **IDS),
    "gpt-neox-partial-rotary": lambda: GPTNeoXConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=512,
        rotary_pct=0.5,
        **IDS,
    ),
    "stablelm-gqa": lambda: StableLmConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        **IDS,
    ),
    "starcoder2-gqa-window": lambda: Starcoder2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        sliding_window=512,  # not shorter than the context: exact without applying it
        **IDS,
    ),
    # transformers 5.25's Falcon goes through the attention interface (older ones picked their own
    # attention classes by name, and the fallback refused them: "could not build")
    "falcon": lambda: FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, **IDS),
}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict:
    return {name: save_tiny_model(make(), tmp_path_factory.mktemp(name)) for name, make in CONFIGS.items()}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_engine_greedy_match_transformers(model_dirs, name) -> None:
    ref = Reference(model_dirs[name], model_impl="transformers")
    assert ref.runner.model_info()["model_impl"] == "transformers"
    hf = ref.hf.config
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    assert (ref.runner.kv_pool.head_dim, ref.runner.loaded.num_layers) == (head_dim, hf.num_hidden_layers)
    check_all_logits(ref)
    check_engine_greedy(model_dirs[name], model_impl="transformers")


def test_fallback_equals_native_llama(model_dirs) -> None:
    native = PagedSession(make_runner(model_dirs["llama"], model_impl="native"))
    fallback = PagedSession(make_runner(model_dirs["llama"], model_impl="transformers"))
    seq = tokens(40, 3)
    outs = []
    for s in (native, fallback):
        row = s.open()
        prefill = s.extend([row], [seq[:30]], all_logits=True)[0]
        decoded = [s.decode([row], [t])[0] for t in seq[30:]]
        outs.append(torch.cat([prefill, torch.stack(decoded)]))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4)


def test_linear_layers_are_ours_and_a_tied_head_stays_tied(model_dirs) -> None:
    hf = make_runner(model_dirs["gpt2"], model_impl="transformers").model.hf
    assert not [m for m in hf.modules() if type(m) is torch.nn.Linear]
    assert isinstance(hf.lm_head, Linear) and hf.lm_head.weight is hf.transformer.wte.weight


@pytest.mark.parametrize("name", ["gpt2", "llama"])  # a tied head, an untied one
def test_load_weights_takes_the_checkpoint_and_names_what_is_missing(model_dirs, name) -> None:
    from transformers import AutoModelForCausalLM

    runner = make_runner(model_dirs[name], model_impl="transformers")
    with torch.no_grad():  # zero every weight and its packed copy: the load must renew both
        for p in runner.model.parameters():
            p.zero_()
    repack_weights(runner.model)
    weights = dict(iter_safetensors(model_dirs[name]))
    runner.model.load_weights(weights.items())
    seq = tokens(23, 5)  # more rows than the small-batch kernel takes: the packed product
    session = PagedSession(runner)
    ours = session.extend([session.open()], [seq], all_logits=True)[0]
    hf = AutoModelForCausalLM.from_pretrained(str(model_dirs[name]), dtype=torch.float32).eval()
    with torch.no_grad():
        assert_logits_close(ours, hf(torch.tensor([seq])).logits[0], rtol=1e-4)
    dropped = sorted(weights)[-1]
    with pytest.raises(ValueError, match=f"missing weights: {re.escape(dropped)}"):
        runner.model.load_weights((k, v) for k, v in weights.items() if k != dropped)


def test_auto_picks_native_when_we_have_it_else_transformers(model_dirs) -> None:
    assert choose_model_impl("x", {"architectures": ["LlamaForCausalLM"]}, "auto") == "native"
    assert choose_model_impl("x", {"architectures": ["GPT2LMHeadModel"]}, "auto") == "transformers"
    assert make_runner(model_dirs["gpt2"]).model_info()["model_impl"] == "transformers"


def test_constrained_decoding_and_server_info_on_the_fallback(model_dirs) -> None:
    engine = make_engine(
        str(model_dirs["gpt2"]), device="cpu", dtype="float32", num_threads=1, attention_backend="torch"
    )
    try:
        pattern = r"(yes|no) [0-9]{2,4}"
        params = {"temperature": 0.8, "max_new_tokens": 16, "regex": pattern}
        for out in engine.generate(["answer: ", "a b c", "x"], sampling_params=params):
            assert re.fullmatch(pattern, out["text"]), out["text"]
        info = engine.get_server_info()
        assert (info["model_impl"], info["model_info"]["model_impl"]) == ("transformers", "transformers")
    finally:
        engine.shutdown()


def test_native_refuses_an_unknown_architecture(model_dirs) -> None:
    with pytest.raises(ValueError, match="unsupported model architecture 'GPT2LMHeadModel'; supported:"):
        make_runner(model_dirs["gpt2"], model_impl="native")


@pytest.mark.parametrize(
    "config, error",
    [  # ALiBi in Bloom's own attention code
        (BloomConfig(hidden_size=64, n_layer=2, n_head=4, **IDS), "not go through transformers' attention")
    ],
    ids=["bloom"],
)
def test_refuses_attention_that_bypasses_the_interface(tmp_path, config, error) -> None:
    model = save_tiny_model(config, tmp_path, with_tokenizer=False)
    with pytest.raises(ValueError, match=f"cannot serve {config.architectures[0]}.*{error}"):
        make_runner(model, model_impl="transformers")


def test_refuses_a_window_shorter_than_the_context(tmp_path) -> None:
    config = CONFIGS["starcoder2-gqa-window"]()
    config.sliding_window = 64
    model = save_tiny_model(config, tmp_path, with_tokenizer=False)
    with pytest.raises(ValueError, match="sliding window of 64 tokens.*context_length of at most 64"):
        make_runner(model, model_impl="transformers", context_length=512)
    assert make_runner(model, model_impl="transformers", context_length=64).context_length == 64


def test_refuses_soft_capped_attention(tmp_path) -> None:
    config = Gemma2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        sliding_window=4096,
        attn_logit_softcapping=50.0,
        **IDS,
    )
    model = save_tiny_model(config, tmp_path, with_tokenizer=False)
    with pytest.raises(ValueError, match="Gemma2ForCausalLM.*do not apply softcap"):
        make_runner(model, model_impl="transformers")


def test_refuses_gguf_and_runtime_options_it_does_not_serve(model_dirs) -> None:
    llama = {"architectures": ["LlamaForCausalLM"]}
    with pytest.raises(ValueError, match="serves Hugging Face directories.*not GGUF"):
        choose_model_impl("model.gguf", llama, "transformers")
    with pytest.raises(ValueError, match="serves Hugging Face directories.*not GGUF"):
        choose_model_impl("smollm2-135m", llama, "transformers")
    with pytest.raises(ValueError, match="quantization 'int8'.*float weights only"):
        make_runner(model_dirs["gpt2"], quantization="int8")
    with pytest.raises(ValueError, match="unknown model_impl 'vllm'"):
        make_runner(model_dirs["gpt2"], model_impl="vllm")
