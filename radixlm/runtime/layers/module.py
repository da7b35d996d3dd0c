"""``Module``: the base of the runtime's layers and models, an ``nn.Module`` called without hook dispatch.

``nn.Module.__call__`` goes through two wrappers that look at eight hook registries (the module's own
and the global ones) before it reaches ``forward``. The runtime registers no hooks, and a decode step
of a 30-layer model makes ~270 module calls, so at batch 1 that dispatch was ~5% of the step
(``benchmarks/kernels/module_call_ab.py``; ``benchmarks/log/packed-weights-attention-and-call-overhead.md``).
Calling a ``Module`` calls ``self.forward`` and nothing else, so a ``forward`` set on the instance
(``--enable-deterministic-inference`` wraps the model's) still wins.

What a plain ``nn.Module`` offers beyond that is unchanged (parameters, buffers, ``to``,
``state_dict``). Hooks cannot run here: registering one on these modules raises rather than being
ignored, and the global hooks of ``torch.nn.modules.module`` do not reach them.
"""

from __future__ import annotations

from typing import Any, NoReturn

from torch import nn


class Module(nn.Module):
    """An ``nn.Module`` called without hook dispatch (see the module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def _no_hooks(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"{type(self).__name__} is a radixlm runtime module: it is called "
            "without hook dispatch, so hooks registered on it would never run"
        )

    register_forward_hook = _no_hooks  # type: ignore[assignment]
    register_forward_pre_hook = _no_hooks  # type: ignore[assignment]
    register_full_backward_hook = _no_hooks  # type: ignore[assignment]
    register_full_backward_pre_hook = _no_hooks  # type: ignore[assignment]
    register_backward_hook = _no_hooks  # type: ignore[assignment]
