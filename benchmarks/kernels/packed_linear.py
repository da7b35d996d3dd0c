"""fp32 products on the CPU: weights packed once for oneDNN vs ``F.linear`` vs our small-batch kernel.

The shapes are SmolLM2-135M's: 30 layers of fused q/k/v (960 x 576), o (576 x 576), fused gate/up
(3072 x 576) and down (576 x 1536), with distinct random weights per layer so that, as in a forward
pass, every weight comes from memory (the layers' 425 MB do not fit the caches); and the tied LM head
(49152 x 576). Each cell is the median of ``--repeats`` passes, the three ways run in turn.

    python -m benchmarks.kernels.packed_linear                   # rows 1 2 4 8 12 16 24 32 64 128 331
    python -m benchmarks.kernels.packed_linear --rows 8 16 --repeats 9
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import radixlm._env  # noqa: F401  (thread settings before torch)  # isort: skip
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.linear import packed_linear
from radixlm.runtime.layers.packed_weights import pack_weight

LAYERS = 30
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
HEAD = (49152, 576)

Product = Callable[[torch.Tensor, tuple[torch.Tensor, torch.Tensor]], torch.Tensor]


def ways() -> dict[str, Product]:
    kernels = load_decode_kernels()
    found: dict[str, Product] = {
        "F.linear": lambda x, w: F.linear(x, w[0]),
        "packed": lambda x, w: packed_linear(x, w[1], None, w[0].shape[0]),
    }
    if kernels is not None:
        found["kernel"] = lambda x, w: kernels.small_batch_linear(x, w[0], None)
    return found


def timed(
    product: Product, inputs: dict[int, torch.Tensor], weights: list[tuple[torch.Tensor, torch.Tensor]]
) -> float:
    start = time.perf_counter()
    for w in weights:
        product(inputs[w[0].shape[1]], w)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 331])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    layers = [(w, pack_weight(w)) for _ in range(LAYERS) for w in (torch.randn(s) * 0.02 for s in SHAPES)]
    head_weight = torch.randn(HEAD) * 0.02
    head = [(head_weight, pack_weight(head_weight))]
    products = ways()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; ms per pass "
        "(median); x = F.linear's time / packed's, kernel's time / packed's\n"
    )
    print(
        "| rows | layers F.linear | layers kernel | layers packed | x F.linear | x kernel "
        "| head F.linear | head kernel | head packed | x F.linear | x kernel |"
    )
    print("|---:|" + "---:|" * 10)
    with torch.inference_mode():
        for rows in args.rows:
            inputs = {k: torch.randn(rows, k) for k in (576, 1536)}
            cells = []
            for weights in (layers, head):
                times: dict[str, list[float]] = {name: [] for name in products}
                for _ in range(args.repeats):
                    for name, product in products.items():
                        times[name].append(timed(product, inputs, weights))
                med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
                kernel = med.get("kernel", float("nan"))
                cells += [
                    f"{med['F.linear']:.1f}",
                    f"{kernel:.1f}",
                    f"{med['packed']:.1f}",
                    f"{med['F.linear'] / med['packed']:.2f}",
                    f"{kernel / med['packed']:.2f}",
                ]
            print(f"| {rows} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
