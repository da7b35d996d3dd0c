"""sentence-transformers as the reference for embedding tests.

sentence-transformers imports scikit-learn at import time for its evaluators and similarity helpers,
which no test here calls. Where scikit-learn is absent (the shared dev environment), the names it
imports are bound to functions that raise, so the encoders themselves stay the real ones.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

_SKLEARN_NAMES = (
    "pairwise_distances",
    "average_precision_score",
    "f1_score",
    "dcg_score",
    "ndcg_score",
    "matthews_corrcoef",
)


def _unavailable(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"sklearn.metrics.{name} is not installed here")

    return call


def sentence_transformers() -> Any:
    """The ``sentence_transformers`` module (pytest skips the caller when it is not installed)."""
    import pytest

    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("sentence-transformers is not installed (pip install radixlm[test])")
    if importlib.util.find_spec("sklearn") is None and "sklearn" not in sys.modules:
        sklearn = types.ModuleType("sklearn")
        metrics = types.ModuleType("sklearn.metrics")
        sklearn.__spec__ = importlib.machinery.ModuleSpec("sklearn", None, is_package=True)
        metrics.__spec__ = importlib.machinery.ModuleSpec("sklearn.metrics", None)
        for name in _SKLEARN_NAMES:
            setattr(metrics, name, _unavailable(name))
        sklearn.metrics = metrics  # type: ignore[attr-defined]
        sys.modules["sklearn"], sys.modules["sklearn.metrics"] = sklearn, metrics
    import sentence_transformers as st

    return st
