"""Bad input gets a ValueError that names the problem, and the engine keeps serving afterwards."""

from __future__ import annotations

import pytest

from tests.helpers.engines import make_engine

GREEDY = {"temperature": 0, "max_new_tokens": 8}
CONTEXT = 128
KV_SLOTS = 96


@pytest.fixture(scope="module")
def small_engine(tiny_llama_dir):
    """A short context and a small KV pool, so both limits are easy to exceed."""
    engine = make_engine(tiny_llama_dir, context_length=CONTEXT, max_total_tokens=KV_SLOTS)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def baseline(small_engine) -> list[int]:
    return small_engine.generate("still serving?", GREEDY)["output_ids"]


BAD_PARAMS = [
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"temperature": -0.1}, "temperature"),
    ({"top_k": 0}, "top_k"),
    ({"min_p": 2.0}, "min_p"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"frequency_penalty": 3.0}, "frequency_penalty"),
    ({"min_new_tokens": 9, "max_new_tokens": 8}, "min_new_tokens"),
    ({"stop": [""]}, "stop"),
    ({"temprature": 0.5}, "temprature"),
]


@pytest.mark.parametrize("params,name", BAD_PARAMS, ids=[n for _, n in BAD_PARAMS])
def test_bad_sampling_parameter_is_named(small_engine, baseline, params, name):
    with pytest.raises(ValueError, match=name):
        small_engine.generate("hello", params)
    assert small_engine.generate("still serving?", GREEDY)["output_ids"] == baseline


@pytest.mark.parametrize(
    "prompt,kwargs",
    [("", {}), (None, {"input_ids": []}), ([], {})],
    ids=["empty_string", "empty_ids", "empty_list"],
)
def test_empty_prompt_is_rejected(small_engine, baseline, prompt, kwargs):
    with pytest.raises(ValueError, match="empty"):
        small_engine.generate(prompt, GREEDY, **kwargs)
    assert small_engine.generate("still serving?", GREEDY)["output_ids"] == baseline


def test_prompt_longer_than_the_context_is_rejected(small_engine, baseline):
    with pytest.raises(ValueError, match="context length"):
        small_engine.generate("y" * (CONTEXT + 10), GREEDY)
    with pytest.raises(ValueError, match="context length"):
        small_engine.generate("y" * CONTEXT, GREEDY)  # no room left for one new token
    assert small_engine.generate("still serving?", GREEDY)["output_ids"] == baseline


def test_request_that_can_never_fit_the_kv_pool_is_rejected(small_engine, baseline):
    with pytest.raises(ValueError, match="KV"):
        small_engine.generate("z" * 60, {"temperature": 0, "max_new_tokens": 60})
    assert small_engine.generate("still serving?", GREEDY)["output_ids"] == baseline


def test_token_ids_outside_the_vocabulary_are_rejected(small_engine, baseline):
    vocab = small_engine.model_info()["vocab_size"]
    with pytest.raises(ValueError, match="input_ids"):
        small_engine.generate(input_ids=[5, vocab], sampling_params=GREEDY)
    with pytest.raises(ValueError, match="input_ids"):
        small_engine.generate(input_ids=[5, -1], sampling_params=GREEDY)
    assert small_engine.generate("still serving?", GREEDY)["output_ids"] == baseline


def test_grammar_that_can_never_end_is_a_client_error(small_engine, baseline):
    """llguidance allows "a", then finds the grammar has no finite string: a ValueError (a 400 over
    HTTP) naming the grammar, not a server failure."""
    with pytest.raises(ValueError, match="grammar cannot be completed"):
        small_engine.generate("ab", {"ebnf": 'root ::= "a" root', "max_new_tokens": 4})
    assert small_engine.generate("still serving?", GREEDY)["output_ids"] == baseline


def test_one_bad_request_in_a_batch_does_not_break_the_others(small_engine, baseline):
    with pytest.raises(ValueError, match="context length"):
        small_engine.generate(["still serving?", "y" * (CONTEXT + 1)], GREEDY)
    outs = small_engine.generate(["still serving?", "another prompt"], GREEDY)
    assert outs[0]["output_ids"] == baseline and len(outs[1]["output_ids"]) == 8


def test_unknown_engine_option_is_named(tiny_llama_dir):
    with pytest.raises(ValueError, match="kv_cache_gigabytes"):
        make_engine(tiny_llama_dir, kv_cache_gigabytes=1)
    with pytest.raises(ValueError, match="schedule_policy"):
        make_engine(tiny_llama_dir, schedule_policy="longest-first")
