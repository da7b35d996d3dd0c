"""``radixlm build-kernels``: build the C++ CPU kernels ahead of serving and say where, for what."""

from __future__ import annotations

import time
from typing import TextIO

from radixlm.kernels.cpu.build import (
    MODULES,
    READY,
    build,
    build_directory,
    build_in_progress,
    unavailable_reason,
)
from radixlm.kernels.cpu.build_key import compiler_command, compiler_identity, python_abi, torch_install


def build_kernels(out: TextIO) -> int:
    """Build every kernel module into the cache (waiting for a build in progress); 0 when all are
    ready, 1 (with the reason) when they cannot be built here and the torch ops will serve."""
    reason = unavailable_reason()
    if reason is not None:
        print(f"cannot build the CPU kernels here: {reason}; the torch ops will serve", file=out)
        return 1
    print(f"for torch {torch_install()}", file=out)
    print(f"    python {python_abi()}; compiler {compiler_identity(compiler_command())}", file=out)
    status = 0
    for name in MODULES:
        directory = build_directory(name)
        cached = (directory / READY).exists()
        if not cached and build_in_progress(directory):
            print(f"{name}: waiting for another process's build in {directory}", file=out, flush=True)
        start = time.monotonic()
        try:
            build(name)
        except Exception as exc:  # the compiler's message, for the user to act on
            print(f"{name}: build failed in {directory}:\n{exc}", file=out)
            status = 1
            continue
        done = "already built" if cached else f"built in {time.monotonic() - start:.0f} s"
        print(f"{name}: {done}: {directory}", file=out)
    return status
