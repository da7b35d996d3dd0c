"""Which backend a program talks to: the one passed in, else the process-wide default."""

from __future__ import annotations

from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.backends.engine import EngineBackend

_default_backend: Backend | None = None


def as_backend(backend: Any) -> Backend:
    """A ``Backend`` as is; a ``radixlm.Engine`` wrapped in the in-process backend."""
    if isinstance(backend, Backend):
        return backend
    if hasattr(backend, "async_generate") and hasattr(backend, "model_info"):
        return EngineBackend(backend)
    raise TypeError(f"not a backend: {backend!r}")


def set_default_backend(backend: Any) -> None:
    """The backend programs use when ``run()`` gets none (a Backend or a ``radixlm.Engine``;
    ``None`` clears it)."""
    global _default_backend
    _default_backend = as_backend(backend) if backend is not None else None


def current_default_backend() -> Backend | None:
    """The default backend, or ``None`` when none is set."""
    return _default_backend


def get_default_backend() -> Backend:
    if _default_backend is None:
        raise ValueError(
            "no backend: pass backend= or call radixlm.set_default_backend() first, e.g. "
            "radixlm.set_default_backend(radixlm.Runtime(model='smollm2-135m'))"
        )
    return _default_backend


def resolve_backend(backend: Any | None) -> Backend:
    """``backend`` as a ``Backend`` (see ``as_backend``), or the default one when it is ``None``."""
    return as_backend(backend) if backend is not None else get_default_backend()
