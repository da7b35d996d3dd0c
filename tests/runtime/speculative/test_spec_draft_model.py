"""A draft model proposes (STANDALONE): greedy output unchanged with it on and off, ~all drafts
accepted when the draft is the target itself, and every draft slot free or in the draft's prefix
cache (nothing locked) after finishes, retraction and aborts. A draft with another vocabulary is
refused at load."""

from __future__ import annotations

import pytest

from radixlm.runtime.messages import AbortReq, FlushCacheReq
from radixlm.runtime.server_args import ServerArgs
from tests.helpers.engines import make_engine, tiny_scheduler
from tests.helpers.model_helpers import save_tiny_model, tiny_qwen2_config
from tests.runtime.speculative.spec_helpers import repetitive_prompt, request, run_all, serve, standalone


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory) -> str:
    """A smaller random model of another architecture with the same tokenizer as the tiny Llama."""
    config = tiny_qwen2_config(num_hidden_layers=1, hidden_size=32, intermediate_size=64)
    return str(save_tiny_model(config, tmp_path_factory.mktemp("tiny-draft"), seed=7))


def _serve_draft(model: str, draft: str, reqs: list, **more) -> tuple[dict, dict]:
    with tiny_scheduler(model, **standalone(draft, **more)) as sched:
        got = run_all(sched, reqs)  # checks the target's and the draft's KV ownership when idle
        dm = sched.speculator.draft_model  # type: ignore[union-attr]
        assert dm is not None and not dm.seqs
        _all_returned(dm)
        return got, sched.stats()


def _all_returned(dm) -> None:
    assert dm.tree.protected_size() == 0, "no draft row locks the draft's prefix cache"
    assert dm.allocator.available_size() + dm.tree.total_size() == dm.capacity


def _batch(n: int = 4, max_new_tokens: int = 40) -> list:
    return [
        request(f"r{i}", repetitive_prompt(30 + 5 * i, 3 + i), logprobs=i == 0, max_new_tokens=max_new_tokens)
        for i in range(n)
    ]


def _same_ids(off: dict, on: dict) -> None:
    assert off.keys() == on.keys()
    for rid in off:
        assert on[rid]["ids"] == off[rid]["ids"], rid
        assert on[rid]["finish"] == off[rid]["finish"], rid


def test_greedy_identical_with_another_draft_model(tiny_llama_dir, draft_dir):
    off, _ = serve(tiny_llama_dir, _batch(), False)
    on, stats = _serve_draft(tiny_llama_dir, draft_dir, _batch())
    _same_ids(off, on)
    assert stats["spec_verify_steps"] > 0 and stats["spec_draft_tokens"] > 0


def test_a_later_request_reuses_the_drafts_prefix_cache(tiny_llama_dir, draft_dir):
    prompt = repetitive_prompt(80, 5)
    with tiny_scheduler(tiny_llama_dir, **standalone(draft_dir)) as sched:
        dm = sched.speculator.draft_model  # type: ignore[union-attr]
        first = run_all(sched, [request("a", prompt, max_new_tokens=20)])
        assert dm is not None and dm.tree.total_size() >= len(prompt)
        hits = dm.tree.stats().get("hit_tokens", 0)
        second = run_all(sched, [request("b", prompt, max_new_tokens=20)])
        assert dm.tree.stats()["hit_tokens"] - hits >= len(prompt) - 1
        assert second["b"]["ids"] == first["a"]["ids"]
        _all_returned(dm)


def test_draft_equal_to_target_accepts_nearly_everything(tiny_llama_dir):
    off, _ = serve(tiny_llama_dir, _batch(), False)
    on, stats = _serve_draft(tiny_llama_dir, tiny_llama_dir, _batch())
    _same_ids(off, on)
    rate = stats["spec_accepted_tokens"] / stats["spec_draft_tokens"]
    assert rate > 0.9, stats
    # each verify step emits its accepted drafts plus the model's own token
    per_step = (stats["spec_accepted_tokens"] + stats["spec_verify_steps"]) / stats["spec_verify_steps"]
    assert per_step > 3.0, stats
    assert on["r0"]["spec"]["spec_accept_rate"] > 0.9


@pytest.mark.parametrize("no_cache", [False, True])
def test_retraction_keeps_tokens_and_frees_the_draft_pool(tiny_llama_dir, no_cache):
    def make():
        return [request(f"k{i}", repetitive_prompt(60, 3 + i, first=i), max_new_tokens=120) for i in range(6)]

    pool = {"max_total_tokens": 640, "disable_radix_cache": no_cache}
    off, _ = serve(tiny_llama_dir, make(), False, **pool)
    on, stats = _serve_draft(tiny_llama_dir, tiny_llama_dir, make(), **pool)
    _same_ids(off, on)
    assert stats["num_retractions"] > 0 and stats["spec_accepted_tokens"] > 0


def test_abort_mid_generation_frees_the_draft_rows(tiny_llama_dir, draft_dir):
    with tiny_scheduler(tiny_llama_dir, **standalone(draft_dir)) as sched:
        for r in _batch(3, max_new_tokens=200):
            sched.handle(r)
        for _ in range(6):
            sched.step()
        dm = sched.speculator.draft_model  # type: ignore[union-attr]
        assert dm is not None and dm.seqs, "running requests hold draft rows"
        sched.handle(AbortReq("r1"))
        sched.step()
        assert all(req.rid != "r1" for req in dm.seqs)
        sched.check_kv_integrity()
        for r in ("r0", "r2"):
            sched.handle(AbortReq(r))
        got = run_all(sched, [])
        assert not dm.seqs
        _all_returned(dm)
        assert got == {} or all(v["finish"] is not None for v in got.values())


def test_a_draft_with_another_tokenizer_is_refused(tiny_llama_dir, tmp_path):
    from transformers import AutoTokenizer

    other = save_tiny_model(tiny_qwen2_config(num_hidden_layers=1), tmp_path / "other")
    tok = AutoTokenizer.from_pretrained(str(other))
    tok.add_tokens(["<not-in-the-target>"])
    tok.save_pretrained(str(other))
    with pytest.raises(ValueError, match="another tokenizer than the target"):
        with tiny_scheduler(tiny_llama_dir, **standalone(str(other))):
            pass


def test_a_draft_without_tokenizer_needs_the_same_vocabulary_size(tiny_llama_dir, tmp_path):
    other = save_tiny_model(tiny_qwen2_config(vocab_size=300), tmp_path / "bare", with_tokenizer=False)
    with pytest.raises(ValueError, match="vocabulary size 300 differs"):
        with tiny_scheduler(tiny_llama_dir, **standalone(str(other))):
            pass


def test_flags_are_checked():
    with pytest.raises(ValueError, match="STANDALONE needs speculative_draft_model_path"):
        ServerArgs(speculative_algorithm="STANDALONE")
    # an SGLang EAGLE launch line (served by NGRAM) names its EAGLE head: ignored with a warning
    args = ServerArgs(speculative_algorithm="NGRAM", speculative_draft_model_path="x")
    assert args.speculative_algorithm == "NGRAM"


def test_seeded_sampling_and_grammars_are_unchanged(tiny_llama_dir, draft_dir):
    def make():
        return [
            request("s", repetitive_prompt(40, 5), temperature=0.7, top_k=5, seed=3),
            request("re", repetitive_prompt(40, 4), max_new_tokens=30, regex="(ab|cd|[0-9])+"),
            request("free", repetitive_prompt(44, 4), max_new_tokens=30),
        ]

    off, _ = serve(tiny_llama_dir, make(), False)
    for draft in (draft_dir, tiny_llama_dir):
        on, stats = _serve_draft(tiny_llama_dir, draft, make())
        _same_ids(off, on)
        assert stats["spec_verify_steps"] > 0


def test_a_failing_draft_forward_costs_only_the_drafts(tiny_llama_dir):
    with tiny_scheduler(tiny_llama_dir, **standalone(tiny_llama_dir)) as sched:
        dm = sched.speculator.draft_model  # type: ignore[union-attr]
        assert dm is not None
        real_forward, calls = dm.runner.forward, []

        def flaky(fb):
            calls.append(1)
            if len(calls) % 3 == 0:
                raise RuntimeError("draft forward failed")
            return real_forward(fb)

        dm.runner.forward = flaky  # type: ignore[method-assign]
        on = run_all(sched, _batch(3))
        off, _ = serve(tiny_llama_dir, _batch(3), False)
        _same_ids(off, on)
        assert len(calls) >= 3
        dm.runner.forward = real_forward  # type: ignore[method-assign]
        _all_returned(dm)
        assert sched.handle(FlushCacheReq()).success
        assert dm.tree.total_size() == 0 and dm.allocator.available_size() == dm.capacity


def test_engine_with_a_draft_model_reports_acceptance(tiny_llama_dir):
    ids = repetitive_prompt(48, 4).tolist()
    params = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}
    plain, _ = serve(tiny_llama_dir, [request("p", ids, max_new_tokens=24)], False)
    spec = standalone(tiny_llama_dir)
    engine = make_engine(tiny_llama_dir, device="cpu", dtype="float32", num_threads=1, **spec)
    try:
        out = engine.generate(input_ids=ids, sampling_params=params)
        samples = engine.generate(input_ids=ids, sampling_params={**params, "n": 2})
    finally:
        engine.shutdown()
    assert out["output_ids"] == plain["p"]["ids"]
    assert [s["output_ids"] for s in samples] == [plain["p"]["ids"]] * 2
    assert out["meta_info"]["spec_accept_rate"] > 0.9 and out["meta_info"]["spec_accept_length"] >= 3
