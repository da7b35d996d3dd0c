"""Loading at the checkpoint's own size: GGUF tensors served from the mapped file, safetensors converted
one tensor at a time, the model built on the meta device, and bad files refused before serving."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from benchmarks.models.random_gguf import LlamaShape, write_random_llama
from radixlm.runtime.layers.quantized_linear import GGUFLinear, QuantizedEmbedding
from radixlm.runtime.layers.rotary import rope_inv_freq
from radixlm.runtime.layers.stacked_linear import StackedLinear
from radixlm.runtime.weights.gguf_source import GGUFSource
from radixlm.runtime.weights.loader import load_model
from tests.helpers.model_helpers import (
    PagedSession,
    assert_logits_close,
    make_runner,
    save_tiny_gguf,
    save_tiny_model,
    tiny_llama_config,
)

CPU = torch.device("cpu")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _hf(path: Path, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()


def _our_logits(model: str | Path, tokens: list[int], **overrides) -> torch.Tensor:
    session = PagedSession(make_runner(model, **overrides))
    return session.extend([session.open()], [tokens], all_logits=True)[0]


TOKENS = list(range(3, 40, 2))


@pytest.fixture
def tiny_gguf(tmp_path) -> Path:
    """A tiny Llama in fp32 GGUF (its gpt2 tokenizer gives random_gguf a small vocabulary)."""
    config = tiny_llama_config()
    return save_tiny_gguf(
        config, _hf(save_tiny_model(config, tmp_path / "hf")).state_dict(), tmp_path / "t.gguf"
    )


def test_f16_gguf_loads_as_the_model_it_stores(tmp_path, cache) -> None:
    config = tiny_llama_config()
    hf = _hf(save_tiny_model(config, tmp_path / "hf"))
    with torch.no_grad():  # the reference holds the values an F16 file stores
        for p in hf.parameters():
            p.copy_(p.half().float())
    path = save_tiny_gguf(config, hf.state_dict(), tmp_path / "f16.gguf", block_types={"proj": "F16"})
    assert {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors} == {"F16", "F32"}
    with torch.no_grad():
        assert_logits_close(_our_logits(path, TOKENS), hf(torch.tensor([TOKENS])).logits[0])


def test_bf16_safetensors_loads_converted_tensor_by_tensor(tmp_path) -> None:
    config = tiny_llama_config()
    hf = _hf(save_tiny_model(config, tmp_path / "hf")).to(torch.bfloat16)
    hf.save_pretrained(str(tmp_path / "bf16"))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "bf16" / f).write_bytes((tmp_path / "hf" / f).read_bytes())
    reference = _hf(tmp_path / "bf16")  # the bf16 values, computed in fp32
    assert reference.model.layers[0].mlp.down_proj.weight.dtype == torch.float32
    with torch.no_grad():
        assert_logits_close(
            _our_logits(tmp_path / "bf16", TOKENS), reference(torch.tensor([TOKENS])).logits[0]
        )
    auto = load_model(str(tmp_path / "bf16"), CPU, torch.float32, quantization="auto")
    assert auto.quantization == "q8_0"  # auto_for_16bit: the fastest at equal quality on the CPU
    assert {m.fmt for m in auto.model.modules() if isinstance(m, GGUFLinear)} == {"q8_0"}


def test_quantized_gguf_serves_the_files_blocks_in_place(tmp_path, cache, tiny_gguf) -> None:
    shape = LlamaShape(hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, vocab=320)
    path = write_random_llama(tmp_path / "k.gguf", shape, "Q4_K_M", tokenizer_gguf=tiny_gguf)
    loaded = load_model(str(path), CPU, torch.float32, quantization="auto")
    assert loaded.quantization == "q4_k"
    layer = loaded.model.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, StackedLinear)  # q/k in Q4_K, v in Q6_K
    assert isinstance(layer.mlp.down_proj, GGUFLinear) and layer.mlp.down_proj.fmt == "q6_k"
    assert isinstance(loaded.model.model.embed_tokens, QuantizedEmbedding)
    assert isinstance(loaded.model.lm_head, GGUFLinear) and loaded.model.lm_head.fmt == "q6_k"
    # o_proj's blocks are the file's bytes, read through the mapping (no copy)
    reader = gguf.GGUFReader(str(path))
    stored = next(t for t in reader.tensors if t.name == "blk.0.attn_output.weight")
    blocks = layer.self_attn.o_proj.blocks
    assert _mapped_file(blocks.data_ptr()) == str(path.resolve()) and np.array_equal(
        blocks.numpy(), stored.data
    )
    unquantized = load_model(str(path), CPU, torch.float32, quantization="none")
    assert torch.equal(
        unquantized.model.model.layers[0].self_attn.o_proj.weight,
        torch.from_numpy(gguf.quants.dequantize(stored.data, stored.tensor_type)),
    )


def _mapped_file(address: int) -> str | None:
    """The file mapped at ``address`` in this process (None: anonymous memory)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if start <= address < end:
            return fields[5] if len(fields) > 5 else None
    return None


def test_gguf_rope_freqs_become_freq_factors(tmp_path, tiny_gguf) -> None:
    factors = np.linspace(1.0, 8.0, 8, dtype=np.float32)  # head_dim 16
    path = _rewrite(tiny_gguf, tmp_path / "r.gguf", add={"rope_freqs.weight": factors})
    rope = GGUFSource(str(path)).hf_config()["rope_parameters"]
    assert rope["rope_type"] == "freq_factors" and rope["factors"] == factors.tolist()
    expected = rope_inv_freq(16, rope["rope_theta"], None) / torch.from_numpy(factors)
    assert torch.equal(rope_inv_freq(16, rope["rope_theta"], rope), expected)
    load_model(str(path), CPU, torch.float32)  # the model builds and loads with them


def _rewrite(src: Path, dst: Path, drop=(), add=None, arch: str | None = None, retype=None) -> Path:
    """A copy of GGUF file ``src`` without tensors ``drop``, with tensors ``add`` (name -> array), the
    architecture renamed, or tensors ``retype`` (name -> numpy dtype) stored in another type."""
    reader = gguf.GGUFReader(str(src))
    old_arch = reader.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(str(dst), arch or old_arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        key = key.replace(f"{old_arch}.", f"{arch}.") if arch else key
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, field.contents())
        else:
            writer.add_key_value(key, field.contents(), field.types[0])
    for t in reader.tensors:
        if t.name in drop:
            continue
        if retype and t.name in retype:
            writer.add_tensor(t.name, np.asarray(t.data).astype(retype[t.name]))
        else:
            writer.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    for name, array in (add or {}).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def test_bad_gguf_files_are_refused_with_their_reason(tmp_path, tiny_gguf) -> None:
    def refused(path: Path, match: str) -> None:
        with pytest.raises(ValueError, match=match):
            load_model(str(path), CPU, torch.float32)

    refused(_rewrite(tiny_gguf, tmp_path / "a.gguf", arch="gpt2"), "unsupported GGUF architecture 'gpt2'")
    refused(
        _rewrite(tiny_gguf, tmp_path / "m.gguf", drop={"blk.1.ffn_down.weight"}),
        r"missing weights: model\.layers\.1\.mlp\.down_proj\.weight",
    )
    refused(
        _rewrite(tiny_gguf, tmp_path / "i.gguf", retype={"blk.0.attn_q.weight": np.int32}),
        "'blk.0.attn_q.weight' is stored as I32, which no path reads",
    )
    truncated = tmp_path / "trunc.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[:-5000])
    refused(truncated, "truncated")
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    refused(corrupt, "not a readable GGUF file")
    shape_mismatch = _rewrite(
        tiny_gguf,
        tmp_path / "s.gguf",
        drop={"output_norm.weight"},
        add={"output_norm.weight": np.ones(3, np.float32)},
    )
    refused(shape_mismatch, r"model\.norm\.weight: checkpoint shape \(3,\)")


_PEAK_SCRIPT = """
import json, sys, torch
from radixlm.kernels.cpu.build import load_gguf_kernels
from radixlm.runtime.weights.loader import load_model
from tests.helpers.model_helpers import PagedSession, make_runner
torch.set_num_threads(1)
load_gguf_kernels()
def status(key):
    line = next(l for l in open("/proc/self/status") if l.startswith(key + ":"))
    return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # restart the peak (VmHWM) from here
before = status("VmRSS")
session = PagedSession(make_runner(sys.argv[1], quantization="auto", max_total_tokens=256, context_length=64))
session.extend([session.open()], [[5, 6, 7]])  # touches every weight
print(json.dumps({"before": before, "peak": status("VmHWM")}))
"""


def test_loading_a_gguf_file_costs_about_its_size_in_memory(tmp_path, cache, tiny_gguf) -> None:
    from radixlm.runtime.weights.tokenizer_files import tokenizer_dir

    shape = LlamaShape(hidden=2048, intermediate=8192, layers=5, heads=32, kv_heads=8, vocab=320)
    path = write_random_llama(tmp_path / "big.gguf", shape, "Q4_0", tokenizer_gguf=tiny_gguf)
    size = path.stat().st_size
    tokenizer_dir(str(path))  # the tokenizer cache is built here, outside the measurement
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(path)], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    grown = result["peak"] - result["before"]
    # fp32 weights would be ~7x the file; blocks from the mapping plus the joined q/k/v and gate/up
    # copies (their file pages dropped) are about the file, plus the KV pools and activations
    assert grown <= 1.2 * size + 96 * 2**20, (grown / 2**20, size / 2**20)


def test_gguf_gate_and_up_back_to_back_in_the_file_are_joined_without_a_copy(tmp_path, tiny_gguf) -> None:
    shape = LlamaShape(hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, vocab=320)
    path = write_random_llama(tmp_path / "q.gguf", shape, "Q4_0", tokenizer_gguf=tiny_gguf)
    loaded = load_model(str(path), CPU, torch.float32, quantization="auto")
    reader = gguf.GGUFReader(str(path))
    stored = {t.name: t.data for t in reader.tensors}
    mlp = loaded.model.model.layers[1].mlp
    blocks = mlp.gate_up_proj.blocks
    assert _mapped_file(blocks.data_ptr()) == str(path.resolve())  # the file's bytes, not a copy
    expected = np.concatenate([stored["blk.1.ffn_gate.weight"], stored["blk.1.ffn_up.weight"]])
    assert np.array_equal(blocks.numpy(), expected)
    # q and k are repacked (llama.cpp's rope permutation undone): their join is a copy
    qkv = loaded.model.model.layers[1].self_attn.qkv_proj.blocks
    assert _mapped_file(qkv.data_ptr()) != str(path.resolve())
    x = torch.randn(3, shape.hidden)
    reference = torch.cat([x @ w.t() for w in (_dequantized(stored, "gate"), _dequantized(stored, "up"))], -1)
    torch.testing.assert_close(mlp.gate_up_proj(x), reference, rtol=0.05, atol=0.05)


def _dequantized(stored: dict[str, np.ndarray], part: str) -> torch.Tensor:
    data = stored[f"blk.1.ffn_{part}.weight"]
    return torch.from_numpy(gguf.quants.dequantize(data, gguf.GGMLQuantizationType.Q4_0)).float()


def test_join_rows_copies_parts_that_are_not_back_to_back() -> None:
    from radixlm.runtime.weights.source import join_rows

    whole = torch.arange(60, dtype=torch.uint8).view(6, 10)
    joined, copied = join_rows([whole[0:2], whole[2:5]])
    assert not copied and joined.data_ptr() == whole.data_ptr() and torch.equal(joined, whole[0:5])
    joined, copied = join_rows([whole[0:2], whole[3:5]])  # a gap
    assert copied and torch.equal(joined, torch.cat([whole[0:2], whole[3:5]]))
    joined, copied = join_rows([whole[2:4], whole[0:2]])  # out of order
    assert copied and torch.equal(joined, torch.cat([whole[2:4], whole[0:2]]))
