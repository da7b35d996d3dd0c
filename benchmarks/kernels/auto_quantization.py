"""What ``--quantization auto`` should serve a 16-bit safetensors checkpoint with on the CPU: one linear
layer of a ~1.5B Llama (2048 <-> 8192) per method, fp32 (the layer as served: ``Linear``, oneDNN-packed
above a few rows), int8 (FBGEMM) and q8_0 (our kernel), at decode batch sizes; ms per call, median.
Quality is ``python -m benchmarks.quality.quantized_quality --methods q8_0,int8``.

    python -m benchmarks.kernels.auto_quantization [--threads 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip


def main() -> None:
    from radixlm.kernels.cpu import gguf_blocks
    from radixlm.kernels.cpu.build import load_gguf_kernels
    from radixlm.runtime.layers.linear import Linear
    from radixlm.runtime.layers.packed_weights import pack_weight, packing_supported
    from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_gguf_kernels()
    print("| layer (out x in) | batch | fp32 ms | int8 ms | q8_0 ms |\n|---|---:|---:|---:|---:|")
    for n, k in [(8192, 2048), (2048, 8192)]:
        w = (torch.randn(n, k) * 0.02).bfloat16().float()  # a 16-bit checkpoint's values
        fp32 = Linear.from_weight(w)
        if packing_supported(w.device, w.dtype):
            fp32.packed = pack_weight(w)
        layers = {
            "fp32": fp32,
            "int8": Int8Linear(w),
            "q8_0": GGUFLinear(gguf_blocks.quantize(w, "q8_0"), "q8_0", k),
        }
        for batch in (1, 4, 16):
            x = torch.randn(batch, k)
            cells = []
            for layer in layers.values():
                layer(x)
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    layer(x)
                    times.append(time.perf_counter() - start)
                cells.append(f"{statistics.median(times) * 1e3:.2f}")
            print(f"| {n}x{k} | {batch} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
