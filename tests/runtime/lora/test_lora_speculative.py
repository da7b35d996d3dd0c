"""LoRA with speculative decoding: drafts (n-gram or the base draft model's) are verified under each
request's own adapter, so greedy output is still PEFT's, token for token."""

from __future__ import annotations

import pytest

from tests.helpers.engines import tiny_scheduler
from tests.helpers.lora_helpers import PeftReference
from tests.helpers.model_helpers import TINY_SEQ
from tests.runtime.lora.test_lora_scheduler import _req, _run

NEW = 12


@pytest.mark.parametrize("algorithm", ["NGRAM", "STANDALONE"])
def test_speculative_steps_verify_under_each_requests_adapter(algorithm, lora_base, adapters):
    spec = {"speculative_algorithm": algorithm, "speculative_num_steps": 4, "speculative_max_batch": 64}
    spec["speculative_speed_check"] = False  # verify every draft, however fast
    if algorithm == "STANDALONE":  # the base model drafts for every adapter
        spec["speculative_draft_model_path"] = str(lora_base)
    paths = [f"{n}={adapters[n]}" for n in ("all8", "mlp16")]
    names = ["all8", None, "mlp16", "all8"]
    prompts = [TINY_SEQ * 2, TINY_SEQ[3:] * 2, TINY_SEQ[:12] * 2, TINY_SEQ[5:] + TINY_SEQ]
    with tiny_scheduler(
        str(lora_base), enable_lora=True, lora_paths=paths, max_lora_rank=16, **spec
    ) as sched:
        for i, (n, p) in enumerate(zip(names, prompts)):
            sched.handle(_req(f"r{i}", p, n, new=NEW))
        outs: dict = {}
        _run(sched, outs)
        stats = sched.stats()
        sched.check_kv_integrity()
    assert stats["spec_verify_steps"] > 0 and stats["spec_draft_tokens"] > 0, stats
    refs = {n: PeftReference(lora_base, adapters[n] if n else None) for n in set(names)}
    for i, (n, p) in enumerate(zip(names, prompts)):
        assert outs[f"r{i}"]["ids"] == refs[n].greedy(p, NEW), (i, n)
