"""The Engine tests' shared engine on the tiny random model."""

from __future__ import annotations

import pytest

from tests.helpers.engines import make_engine


@pytest.fixture(scope="module")
def tiny_engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    yield engine
    engine.shutdown()
