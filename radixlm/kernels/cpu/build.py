"""Compile the C++ CPU kernels once (torch.utils.cpp_extension + ninja) and cache the build.

The build lands in ``$RADIXLM_CACHE/kernels/<name>-<torch version>`` and is reused by later processes.
``load_gguf_kernels()`` returns the compiled module behind Python-side argument checks
(``GGUFKernels``), or None (with one warning per process) when the
CPU lacks AVX2/FMA/F16C or no compiler is found; callers then fall back to int8 or fp32.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
from pathlib import Path
from types import ModuleType

import torch

from radixlm.kernels.cpu.gguf_ops import GGUFKernels

logger = logging.getLogger(__name__)
_SOURCE = Path(__file__).with_name("gguf_linear.cpp")
# -ffp-contract=off: no fused multiply-adds the source does not ask for, so every output element
# takes the same arithmetic path at any batch size (batch invariance; gguf_linear.cpp)
_FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-pthread", "-ffp-contract=off"]


def _cache_root() -> Path:
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm").expanduser()


def _cpu_has_avx2() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    return all(f" {flag}" in flags for flag in ("avx2", "fma", "f16c"))


def unavailable_reason() -> str | None:
    """Why the kernels cannot be built here, or None when they can."""
    if not _cpu_has_avx2():
        return "this CPU lacks AVX2/FMA/F16C"
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler!r}) on PATH"
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401
        except ImportError:
            return "ninja is not installed"
    return None


@functools.lru_cache(maxsize=1)
def load_gguf_kernels() -> GGUFKernels | None:
    """The compiled ``gguf_linear`` kernels, or None (warned once) when they cannot be built."""
    reason = unavailable_reason()
    if reason is None:
        try:
            return GGUFKernels(_build())
        except Exception as exc:  # a compiler error must not take the server down
            reason = f"building {_SOURCE.name} failed: {exc}"
    logger.warning("GGUF CPU kernels unavailable (%s); falling back", reason)
    return None


def _build() -> ModuleType:
    from torch.utils.cpp_extension import load

    version = torch.__version__.replace("+", "_")
    # the source's hash in the name: processes running different versions of the kernel (two
    # checkouts, an upgrade under a running server) never rebuild over each other's cache
    sources = sorted(_SOURCE.parent.glob("*.cpp")) + sorted(_SOURCE.parent.glob("*.h"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + " ".join(_FLAGS).encode())
    digest = digest.hexdigest()[:12]
    build_dir = _cache_root() / "kernels" / f"gguf_linear-{version}-{digest}"
    build_dir.mkdir(parents=True, exist_ok=True)
    return load(name="radixlm_gguf_linear", sources=[str(_SOURCE)], extra_cflags=_FLAGS,
                extra_ldflags=["-pthread"], build_directory=str(build_dir), verbose=False)
