"""The compiled CPU kernels for test modules, without compiling anything at import or collection."""

from __future__ import annotations

from typing import Any

import pytest

from radixlm.kernels.cpu.build import DECODE_KERNELS, GGUF_KERNELS, unavailable_reason
from radixlm.kernels.cpu.kernel_slot import KernelSlot

needs_cpu_kernels = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


class BuiltKernels:
    """The kernels of ``slot``, loaded on first use (the session fixture ``compiled_kernels`` built
    them before the first test ran)."""

    def __init__(self, slot: KernelSlot[Any]) -> None:
        self._slot = slot

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # pytest's collector probes module globals for ``__test__``
            raise AttributeError(name)
        kernels = self._slot.wait()
        if kernels is None:
            pytest.fail(f"the {self._slot.name} kernels did not build")
        return getattr(kernels, name)


decode_kernels = BuiltKernels(DECODE_KERNELS)
gguf_kernels = BuiltKernels(GGUF_KERNELS)
