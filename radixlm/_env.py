"""Process environment that must be set before torch is imported.

Thread contention is the first performance trap on small CPU machines: a torch process that spins
its OpenMP threads while another process is busy runs many times slower. Every radixlm entry point
imports this module first.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# torch's CPU allocator puts allocations of 2 MB and more on transparent huge pages (where the
# kernel allows them on request): weights streamed once per decode step read faster (a batch-1
# fp32 product: 25-30 -> 33-37 GB/s, benchmarks/log/cpu-decode-step-kernels.md)
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def limit_threads_for_helper_process() -> None:
    """Pin a helper process (tokenizer manager, detokenizer) to one compute thread.

    Call before importing torch or numpy-heavy code in that process.
    """
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"


_HUGE_PAGE_MALLOC = "glibc.malloc.hugetlb=1"


def with_huge_page_malloc(tunables: str | None) -> str:
    """A ``GLIBC_TUNABLES`` value: ``tunables`` plus glibc.malloc.hugetlb=1, unless it sets that itself.

    glibc's malloc then asks for transparent huge pages for its large blocks (glibc >= 2.35 reads it
    when a process starts; older ones ignore it). torch's own allocations already get them
    (``THP_MEM_ALLOC_ENABLE`` above), but FBGEMM's prepacked int8 weights come from malloc: batch-1
    int8 products over 400 MB of them read 23.7-26.3 GB/s on 4 KB pages, 28.0-28.3 on huge pages
    (benchmarks/log/cpu-decode-step-kernels.md)."""
    if tunables and "glibc.malloc.hugetlb" in tunables:
        return tunables
    return ":".join(t for t in (tunables, _HUGE_PAGE_MALLOC) if t)


def wants_huge_page_malloc(quantization: str) -> bool:
    """Whether a process serving weights quantized by ``quantization`` should start with
    ``with_huge_page_malloc``: only int8 (FBGEMM's malloc'd weights, +5% read speed). The others'
    weights are torch allocations, already on huge pages, and the fp32 engine's throughput measured
    ~4% lower with huge-page malloc (its temporaries then fault in 2 MB pages;
    benchmarks/log/cpu-decode-step-kernels.md)."""
    return quantization == "int8"


def weight_process_env(quantization: str, env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` for a process that will load weights quantized by ``quantization``:
    with huge-page malloc where ``wants_huge_page_malloc``."""
    out = dict(env)
    if wants_huge_page_malloc(quantization):
        out["GLIBC_TUNABLES"] = with_huge_page_malloc(out.get("GLIBC_TUNABLES"))
    return out


@contextlib.contextmanager
def huge_page_malloc_in_children(quantization: str) -> Iterator[None]:
    """Processes started inside this block (multiprocessing's spawn takes this process's
    environment) get ``weight_process_env(quantization, ...)``; the environment is restored after."""
    saved = os.environ.get("GLIBC_TUNABLES")
    wanted = weight_process_env(quantization, os.environ).get("GLIBC_TUNABLES")
    if wanted is not None:
        os.environ["GLIBC_TUNABLES"] = wanted
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("GLIBC_TUNABLES", None)
        else:
            os.environ["GLIBC_TUNABLES"] = saved
