"""Pinned program contexts stay cached until their children are admitted, and never leak."""

from __future__ import annotations

import pytest

from tests.helpers.engines import make_engine

GREEDY = {"temperature": 0, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def pin_engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    yield engine
    engine.shutdown()


def _protected(engine) -> int:
    return engine.get_server_info()["kv_protected"]


def test_pinned_context_survives_until_children_admitted(pin_engine):
    parent = pin_engine.generate("parent context " * 4, GREEDY, rid="p1", pin_children=2)
    assert _protected(pin_engine) > 0
    assert pin_engine.get_server_info()["num_pinned_contexts"] == 1
    # Under pressure, eviction cannot take a pinned path: flush-free eviction via a fresh big request
    child_ids = (
        pin_engine.tokenizer.encode("parent context " * 4, add_special_tokens=False) + parent["output_ids"]
    )
    first = pin_engine.generate(input_ids=child_ids + [5, 6], sampling_params=GREEDY, unpin_rids=["p1"])
    assert first["meta_info"]["cached_tokens"] >= len(child_ids) - 1
    assert pin_engine.get_server_info()["num_pinned_contexts"] == 1  # one child still expected
    pin_engine.generate(input_ids=child_ids + [7], sampling_params=GREEDY, unpin_rids=["p1"])
    info = pin_engine.get_server_info()
    assert info["num_pinned_contexts"] == 0 and info["kv_protected"] == 0


def test_rejected_child_releases_its_parent(pin_engine):
    pin_engine.generate("rejected child parent", GREEDY, rid="p3", pin_children=1)
    with pytest.raises(ValueError):
        pin_engine.generate(input_ids=[1] * 10_000, sampling_params=GREEDY, unpin_rids=["p3"])
    assert pin_engine.get_server_info()["num_pinned_contexts"] == 0


def test_flush_releases_pins(pin_engine):
    pin_engine.generate("flushed parent", GREEDY, rid="p4", pin_children=3)
    assert pin_engine.flush_cache() is True
    info = pin_engine.get_server_info()
    assert info["num_pinned_contexts"] == 0 and info["kv_cached"] == 0
