"""The in-process Engine (``from radixlm.runtime.engine import Engine, EngineError``)."""

from __future__ import annotations

from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.engine.loop import EngineError

__all__ = ["Engine", "EngineError"]
