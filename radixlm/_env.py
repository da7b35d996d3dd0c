"""Process environment that must be set before torch is imported.

Thread contention is the first performance trap on small CPU machines: a torch process that spins
its OpenMP threads while another process is busy runs many times slower. Every radixlm entry point
imports this module first.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# torch's CPU allocator puts allocations of 2 MB and more on transparent huge pages (where the
# kernel allows them on request): weights streamed once per decode step read faster (a batch-1
# fp32 product: 25-30 -> 33-37 GB/s, benchmarks/README.md)
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def limit_threads_for_helper_process() -> None:
    """Pin a helper process (tokenizer manager, detokenizer) to one compute thread.

    Call before importing torch or numpy-heavy code in that process.
    """
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
