"""Compile the C++ CPU kernels once (torch.utils.cpp_extension + ninja) and cache the builds.

Each extension module (``_MODULES``: its sources) builds into
``$RADIXLM_CACHE/kernels/<name>-<torch version>-<hash>`` and is reused by later processes.
``load_gguf_kernels()`` and ``load_decode_kernels()`` return a compiled module behind Python-side
argument checks (``GGUFKernels``, ``DecodeKernels``), or None (with one warning per process) when the
CPU lacks AVX2/FMA/F16C or no compiler is found; callers then fall back to int8 or fp32 (GGUF
weights) or to the torch ops (decode attention).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

from radixlm.kernels.cpu.decode_ops import DecodeKernels
from radixlm.kernels.cpu.gguf_ops import GGUFKernels

logger = logging.getLogger(__name__)
_HERE = Path(__file__).parent
_MODULES = {  # extension module -> its C++ sources (headers in this folder are inputs of every build)
    "gguf_linear": ["gguf_linear.cpp"],
    "decode_kernels": [
        "decode_kernels.cpp",
        "decode_attention.cpp",
        "rmsnorm.cpp",
        "rotary.cpp",
        "small_batch_linear.cpp",
        "silu_and_mul.cpp",
    ],
}
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
    module = _load("gguf_linear", "GGUF CPU kernels unavailable (%s); falling back")
    return None if module is None else GGUFKernels(module)


@functools.lru_cache(maxsize=1)
def load_decode_kernels() -> DecodeKernels | None:
    """The compiled decode-step kernels (attention, RMSNorm, rotary, small-batch fp32 products,
    silu_and_mul), or None (warned once) when they cannot be built."""
    module = _load("decode_kernels", "CPU decode-step kernels unavailable (%s); using torch ops")
    return None if module is None else DecodeKernels(module)


def _load(name: str, warning: str) -> ModuleType | None:
    reason = unavailable_reason()
    if reason is None:
        try:
            return _build(name)
        except Exception as exc:  # a compiler error must not take the server down
            reason = f"building {name} failed: {exc}"
    logger.warning(warning, reason)
    return None


def _inputs(name: str) -> list[Path]:
    """The sources of ``name`` and every header of this folder."""
    return [*(_HERE / file for file in _MODULES[name]), *sorted(_HERE.glob("*.h"))]


def build_directory(name: str) -> Path:
    """Where extension module ``name`` is built and cached for this torch and these sources."""
    version = torch.__version__.replace("+", "_")
    # the sources' hash in the name: processes running different versions of the kernel (two
    # checkouts, an upgrade under a running server) never rebuild over each other's cache
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _inputs(name)) + " ".join(_FLAGS).encode())
    return _cache_root() / "kernels" / f"{name}-{version}-{digest.hexdigest()[:12]}"


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an advisory lock on ``path`` (released by the kernel if this process dies)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(name: str) -> ModuleType:
    files = {path.name: path.read_bytes() for path in _inputs(name)}
    return compile_sources(f"radixlm_{name}", build_directory(name), files, _MODULES[name])


def compile_sources(
    module_name: str, build_dir: Path, files: dict[str, bytes], sources: list[str]
) -> ModuleType:
    """Compile ``sources`` (names in ``files``, which maps every file the build reads, headers
    included, to its text) into extension module ``module_name``, built in ``build_dir`` and reused
    from there while the files stay the same."""
    from torch.utils.cpp_extension import load

    build_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(build_dir / "radixlm-build.lock"):
        # torch marks a build in progress with a plain file, "lock", that a killed build leaves
        # behind, and every later load then waits on it forever. Builds here go through this
        # flock, so while it is held such a file can only be stale.
        (build_dir / "lock").unlink(missing_ok=True)
        # Compiled from copies inside the build directory: ninja decides by paths and mtimes, so the
        # checkout's own files would make every other checkout of the same sources (a clean CI
        # clone, a worktree) rebuild the cache, and the next one rebuild it back.
        copies = build_dir / "src"
        copies.mkdir(exist_ok=True)
        for file_name, text in files.items():
            copy = copies / file_name
            if not copy.exists() or copy.read_bytes() != text:
                copy.write_bytes(text)
        return load(
            name=module_name,
            sources=[str(copies / f) for f in sources],
            extra_cflags=_FLAGS,
            extra_ldflags=["-pthread"],
            build_directory=str(build_dir),
            verbose=False,
        )
