"""Compile the C++ CPU kernels (torch.utils.cpp_extension + ninja) and cache the builds.

Each extension module (``_MODULES``: its sources; every header of this folder is an input too) builds
into ``build_directory(name)``, keyed on everything that changes the binary (``build_key.py``), and
is reused by later processes. Two slots (``kernel_slot.py``) hold what a process has loaded:

- ``decode_kernels_if_ready()`` / ``gguf_kernels_if_ready()``: what the dispatch points call. They
  never wait: None until the kernels are loaded, while a separate process builds them
  (``python -m radixlm.kernels.cpu.build <name>``).
- ``load_decode_kernels()`` / ``load_gguf_kernels()``: build in this process and return them
  (``radixlm build-kernels``, tests, benchmarks).

Both return the compiled module behind Python-side argument checks (``DecodeKernels``,
``GGUFKernels``), or None (warned once per process) when the CPU lacks AVX2/FMA/F16C, no compiler is
found or the build failed.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

from radixlm.kernels.cpu.build_key import compiler_command, keyed_directory
from radixlm.kernels.cpu.decode_ops import DecodeKernels
from radixlm.kernels.cpu.gguf_ops import GGUFKernels
from radixlm.kernels.cpu.kernel_slot import KernelSlot, SlotBuilder

logger = logging.getLogger(__name__)
_HERE = Path(__file__).parent
MODULES = {  # extension module -> its C++ sources (headers in this folder are inputs of every build)
    "gguf_linear": [
        "gguf_linear.cpp",
        "gguf_linear_vnni.cpp",
        "gguf_interleave.cpp",
        "gguf_interleave_k.cpp",
        "gguf_interleave_k_vnni.cpp",
        "gguf_interleave_q4_1.cpp",
        "gguf_interleave_vnni.cpp",
    ],
    "decode_kernels": [
        "decode_kernels.cpp",
        "decode_attention.cpp",
        "rmsnorm.cpp",
        "rotary.cpp",
        "small_batch_linear.cpp",
        "panel_linear.cpp",
        "silu_and_mul.cpp",
    ],
}
# -ffp-contract=off: no fused multiply-adds the source does not ask for, so every output element
# takes the same arithmetic path at any batch size (batch invariance; gguf_linear.cpp)
_FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-pthread", "-ffp-contract=off"]
READY = "ready"  # written in a build directory once its library is complete


def _cpu_has_avx2() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    return all(f" {flag}" in flags for flag in ("avx2", "fma", "f16c"))


def unavailable_reason() -> str | None:
    """Why the kernels can never be built here, or None when they can."""
    if not _cpu_has_avx2():
        return "this CPU lacks AVX2/FMA/F16C"
    compiler = compiler_command()
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler!r}) on PATH"
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401
        except ImportError:
            return "ninja is not installed"
    return None


def _files(name: str) -> dict[str, bytes]:
    """The sources of ``name`` and every header of this folder, by file name."""
    paths = [*(_HERE / file for file in MODULES[name]), *sorted(_HERE.glob("*.h"))]
    return {path.name: path.read_bytes() for path in paths}


def build_directory(name: str) -> Path:
    """Where extension module ``name`` is built and cached for these sources, this torch, this
    Python and this compiler."""
    return keyed_directory(name, _files(name), _FLAGS)


def _library(build_dir: Path, module_name: str) -> Path:
    return build_dir / f"{module_name}.so"


def import_library(build_dir: Path, module_name: str) -> ModuleType | None:
    """The finished build of ``module_name`` in ``build_dir``, imported; None when there is none."""
    library = _library(build_dir, module_name)
    if not (build_dir / READY).exists() or not library.exists():
        return None
    spec = importlib.util.spec_from_file_location(module_name, library)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_in_progress(build_dir: Path) -> bool:
    """Whether another process holds ``build_dir``'s build lock right now."""
    try:
        handle = open(build_dir / "radixlm-build.lock")
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


@contextlib.contextmanager
def exclusive_build(build_dir: Path) -> Iterator[None]:
    """Hold ``build_dir``'s build lock (an advisory lock, released by the kernel if this process dies)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / "radixlm-build.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def compile_sources(
    module_name: str, build_dir: Path, files: dict[str, bytes], sources: list[str]
) -> ModuleType:
    """Compile ``sources`` (names in ``files``, which maps every file the build reads, headers
    included, to its text) into extension module ``module_name``, built in ``build_dir`` and reused
    from there (a finished build is only imported)."""
    from torch.utils.cpp_extension import load

    with exclusive_build(build_dir):
        # torch marks a build in progress with a plain file, "lock", that a killed build leaves
        # behind, and every later load then waits on it forever. Builds here go through this
        # flock, so while it is held such a file can only be stale.
        (build_dir / "lock").unlink(missing_ok=True)
        built = import_library(build_dir, module_name)
        if built is not None:
            return built
        (build_dir / READY).unlink(missing_ok=True)
        # Compiled from copies inside the build directory: ninja decides by paths and mtimes, so the
        # checkout's own files would make every other checkout of the same sources (a clean CI
        # clone, a worktree) rebuild the cache, and the next one rebuild it back.
        copies = build_dir / "src"
        copies.mkdir(exist_ok=True)
        for file_name, text in files.items():
            copy = copies / file_name
            if not copy.exists() or copy.read_bytes() != text:
                copy.write_bytes(text)
        module = load(
            name=module_name,
            sources=[str(copies / f) for f in sources],
            extra_cflags=_FLAGS,
            extra_ldflags=["-pthread"],
            build_directory=str(build_dir),
            verbose=False,
        )
        (build_dir / READY).write_text(module_name + "\n")
        return module


def build(name: str) -> ModuleType:
    """Build (or reuse) extension module ``name`` and import it in this process."""
    return compile_sources(f"radixlm_{name}", build_directory(name), _files(name), MODULES[name])


def _start_build(name: str) -> subprocess.Popen:
    """``build(name)`` in a separate, lower-priority process (its output in ``build.log``), importing
    the same radixlm as this process whatever its working directory."""
    build_dir = build_directory(name)
    build_dir.mkdir(parents=True, exist_ok=True)
    package_root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    with open(build_dir / "build.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "radixlm.kernels.cpu.build", name],
            cwd=build_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not interrupted by a Ctrl-C meant for the server
        )


def _builder(name: str) -> SlotBuilder:
    return SlotBuilder(
        unavailable_reason=unavailable_reason,
        import_built=lambda: import_library(build_directory(name), f"radixlm_{name}"),
        build=lambda: build(name),
        start_build=lambda: _start_build(name),
    )


DECODE_KERNELS: KernelSlot[DecodeKernels] = KernelSlot(
    "decode_kernels", DecodeKernels, _builder("decode_kernels")
)
GGUF_KERNELS: KernelSlot[GGUFKernels] = KernelSlot("gguf_linear", GGUFKernels, _builder("gguf_linear"))


def decode_kernels_if_ready() -> DecodeKernels | None:
    """The decode-step kernels (attention, RMSNorm, rotary, small-batch fp32 products, silu_and_mul)
    if loaded now; never waits (a background build swaps them in)."""
    return DECODE_KERNELS.get()


def gguf_kernels_if_ready() -> GGUFKernels | None:
    """The ``gguf_linear`` kernels if loaded now; never waits (a background build swaps them in)."""
    return GGUF_KERNELS.get()


def load_decode_kernels() -> DecodeKernels | None:
    """The decode-step kernels, built in this process if need be; None when they cannot be."""
    return DECODE_KERNELS.wait()


def load_gguf_kernels() -> GGUFKernels | None:
    """The ``gguf_linear`` kernels, built in this process if need be; None when they cannot be."""
    return GGUF_KERNELS.wait()


if __name__ == "__main__":  # the background build: python -m radixlm.kernels.cpu.build <name>...
    os.nice(10)  # the server it builds for keeps the CPU first
    for module in sys.argv[1:]:
        build(module)
