"""Sessions and pins use the tiers: a pinned context the pool must give up sinks to the host tier (and
was saved to disk at release), so the turn that continues it loads it back instead of recomputing."""

from __future__ import annotations

import numpy as np

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from tests.helpers.engines import tiny_scheduler

CONTEXT = ((np.arange(150) * 7) % 240 + 5).astype(np.int32)
OTHER = ((np.arange(200) * 11 + 3) % 240 + 5).astype(np.int32)


def _run(sched: Scheduler, rid: str, ids: np.ndarray, **pin) -> list[int]:
    params = SamplingParams(max_new_tokens=8, ignore_eos=True, temperature=0)
    sched.handle(TokenizedGenerateReq(rid, ids, params, **pin))
    out: list[int] = []
    while sched.has_work():
        for o in sched.step():
            out.extend(o.new_token_ids.tolist())
    return out


def _session(sched: Scheduler) -> list[int]:
    """Turn 1 (pinned for its continuation), other traffic that needs the pool, turn 2."""
    first = _run(sched, "turn1", CONTEXT, pin_children=1, pin_timeout_s=600.0)
    assert sched.stats()["num_pinned_contexts"] == 1
    _run(sched, "other", OTHER)  # cannot be admitted next to the pin: the pin is dropped first
    turn2 = np.concatenate([CONTEXT, np.array(first, dtype=np.int32), np.array([9, 8, 7], dtype=np.int32)])
    return _run(sched, "turn2", turn2)


def test_a_dropped_pin_sinks_to_the_host_tier_and_its_continuation_loads_it(tiny_llama_dir, tmp_path):
    with tiny_scheduler(tiny_llama_dir) as sched:
        reference = _session(sched)
    tiers = {"enable_hierarchical_cache": True, "hicache_storage_dir": str(tmp_path)}
    with tiny_scheduler(tiny_llama_dir, max_total_tokens=256, **tiers) as sched:
        assert _session(sched) == reference
        stats = sched.stats()
        sched.check_kv_integrity()
    assert stats["num_pinned_contexts"] == 0 and stats["cache_evicted_tokens"] > 0
    assert stats["host_hit_tokens"] >= len(CONTEXT) - 8  # turn 1's context came back from the host
    assert len(list(tmp_path.glob("*.kv"))) >= 2  # and its full pages are on disk for a restart
