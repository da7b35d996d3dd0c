"""Engine fixtures that check the KV ownership invariant after every test that serves requests."""
from __future__ import annotations

import pytest

from tests.conftest import make_engine


@pytest.fixture(scope="module")
def tiny_engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    yield engine
    engine.shutdown()


@pytest.fixture(autouse=True)
def _kv_integrity_after_test(request):
    """After each test, every KV slot of each engine it used is free or in the radix tree."""
    yield
    for name in request.fixturenames:
        if name.endswith("engine"):
            engine = request.getfixturevalue(name)
            engine.check_kv_integrity()
            info = engine.get_server_info()
            assert info["kv_used"] == 0, f"{info['kv_used']} KV slots still owned by requests"
            assert info["kv_free"] + info["kv_cached"] == info["kv_total"]
