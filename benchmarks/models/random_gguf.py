"""Write a random-weight Llama GGUF file of a given shape, fast: block bytes are drawn at random with
sane fp16 scales, one tensor at a time (no float model in memory), with the embedded model's tokenizer
metadata so llama.cpp and transformers can load it.

    python -m benchmarks.models.random_gguf --shape 1.5b --quant Q4_0 /tmp/llama-1.5b-q4_0.gguf
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class LlamaShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int


SHAPES = {
    "tiny": LlamaShape(256, 512, 2, 4, 2, 49152),
    "135m": LlamaShape(576, 1536, 30, 9, 3, 49152),  # the embedded model's shape
    "1.5b": LlamaShape(2048, 8192, 16, 32, 8, 49152),
    "8b": LlamaShape(4096, 14336, 32, 32, 8, 128256),
}
# the fp16 scale's byte offset in each block, and its magnitude: weights come out ~N(0, 0.02)-sized
_SCALES: dict[Q, tuple[tuple[int, ...], float]] = {
    Q.Q4_0: ((0,), 0.005),
    Q.Q8_0: ((0,), 0.0003),
    Q.Q4_K: ((0, 2), 0.0005),  # d and dmin
    Q.Q6_K: ((208,), 0.00005),
}


def random_blocks(rows: int, cols: int, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """uint8 ``[rows, row bytes]`` of random ``qtype`` blocks with small positive fp16 scales."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    offsets, scale = _SCALES[qtype]
    scales = (rng.random((rows, cols // block, 1)) * scale + scale / 2).astype(np.float16)
    for offset in offsets:
        data[:, :, offset : offset + 2] = scales.view(np.uint8)
    return data.reshape(rows, -1)


def _tensors(shape: LlamaShape, quant: str) -> list[tuple[str, int, int, Q | None]]:
    """(name, rows, cols, type: None for F32 norms) like llama.cpp's pure Q4_0 / Q4_K_M mixes."""
    main = Q[quant.removesuffix("_M")]
    heavy = Q.Q6_K if quant == "Q4_K_M" else main  # attn_v / ffn_down
    head_dim = shape.hidden // shape.heads
    kv = shape.kv_heads * head_dim
    out: list[tuple[str, int, int, Q | None]] = [("token_embd.weight", shape.vocab, shape.hidden, main)]
    for i in range(shape.layers):
        out += [
            (f"blk.{i}.attn_norm.weight", shape.hidden, 0, None),
            (f"blk.{i}.attn_q.weight", shape.hidden, shape.hidden, main),
            (f"blk.{i}.attn_k.weight", kv, shape.hidden, main),
            (f"blk.{i}.attn_v.weight", kv, shape.hidden, heavy),
            (f"blk.{i}.attn_output.weight", shape.hidden, shape.hidden, main),
            (f"blk.{i}.ffn_norm.weight", shape.hidden, 0, None),
            (f"blk.{i}.ffn_gate.weight", shape.intermediate, shape.hidden, main),
            (f"blk.{i}.ffn_up.weight", shape.intermediate, shape.hidden, main),
            (f"blk.{i}.ffn_down.weight", shape.hidden, shape.intermediate, heavy),
        ]
    return out + [
        ("output_norm.weight", shape.hidden, 0, None),
        ("output.weight", shape.vocab, shape.hidden, Q.Q6_K),
    ]


_RESERVED_CONTROL_TOKENS = 256


def copy_tokenizer(writer: gguf.GGUFWriter, vocab: int, tokenizer_gguf: Path) -> None:
    """Write ``tokenizer_gguf``'s tokenizer keys into ``writer``, its vocabulary padded to ``vocab``."""
    reader = gguf.GGUFReader(str(tokenizer_gguf))
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        pad = vocab - len(value) if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type") else 0
        # as in Llama 3's vocabulary: a few hundred reserved control tokens, the rest ordinary ones
        # (79k control tokens would make transformers' tokenizer load seconds slower than a real file's)
        control = min(pad, _RESERVED_CONTROL_TOKENS)
        if key == "tokenizer.ggml.tokens":
            value = value + [f"<|reserved_{i}|>" for i in range(control)]
            value = value + [f"pad{i}" for i in range(pad - control)]
        elif key == "tokenizer.ggml.token_type":
            value = value + [3] * control + [1] * (pad - control)
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, field.types[0])


def write_random_llama(
    path: str | Path,
    shape: LlamaShape,
    quant: str = "Q4_0",
    seed: int = 0,
    tokenizer_gguf: Path | None = None,
) -> Path:
    """Write a Llama of ``shape`` in ``quant`` (``Q4_0``, ``Q8_0`` or ``Q4_K_M``) to ``path``.

    ``tokenizer_gguf``: the file whose tokenizer metadata is copied (default: the embedded model's)."""
    if tokenizer_gguf is None:
        from radixlm.runtime.weights.model_registry import known_model_gguf

        tokenizer_gguf = known_model_gguf("smollm2-135m")
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"random-llama-{quant}")
    writer.add_block_count(shape.layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_Q4_K_M if quant == "Q4_K_M" else gguf.LlamaFileType[f"MOSTLY_{quant}"]
    )
    copy_tokenizer(writer, shape.vocab, tokenizer_gguf)
    tensors = _tensors(shape, quant)
    for name, rows, cols, qtype in tensors:
        if qtype is None:
            writer.add_tensor_info(name, (rows,), np.dtype(np.float32), rows * 4)
        else:
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            writer.add_tensor_info(
                name, (rows, cols // block * size), np.dtype(np.uint8), rows * cols // block * size, qtype
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, rows, cols, qtype in tensors:
        if qtype is None:
            writer.write_tensor_data(np.ones(rows, dtype=np.float32))
        else:
            writer.write_tensor_data(random_blocks(rows, cols, qtype, rng))
    writer.close()
    return Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    ap.add_argument("--quant", choices=["Q4_0", "Q8_0", "Q4_K_M"], default="Q4_0")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    path = write_random_llama(args.path, SHAPES[args.shape], args.quant, args.seed)
    print(f"{path}: {path.stat().st_size / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
