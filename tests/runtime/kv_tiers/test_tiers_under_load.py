"""Every tier stays accounted for between every two steps of a loaded scheduler, not only when idle.

Eight requests over four shared 96-token contexts run four at a time on a 320-slot pool, with a host
tier smaller than the working set (write_through: copies in the background) and a disk tier bounded
to three pages, so the pool evicts, the host drops and the disk deletes while requests are running.
"""

from __future__ import annotations

import numpy as np

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from tests.helpers.engines import tiny_scheduler

PAGE_BYTES = 64 * 2 * 2 * 2 * 16 * 4  # tokens x layers x K/V x kv heads x head dim x fp32 (tiny llama)


def _requests(round_: int) -> list[TokenizedGenerateReq]:
    reqs = []
    for i in range(8):
        context = (np.arange(96) * (i % 4 + 3) + i % 4) % 240 + 5
        question = np.array([250, round_, i], dtype=np.int64)
        ids = np.concatenate([context, question]).astype(np.int32)
        params = SamplingParams(max_new_tokens=6, ignore_eos=True, temperature=0)
        reqs.append(TokenizedGenerateReq(f"r{round_}-{i}", ids, params))
    return reqs


def _serve(sched: Scheduler, checked: bool) -> list[list[int]]:
    outputs: dict[str, list[int]] = {}
    for round_ in range(3):
        for req in _requests(round_):
            outputs[req.rid] = []
            sched.handle(req)
        for _ in range(500):
            for out in sched.step():
                outputs[out.rid].extend(out.new_token_ids.tolist())
            if checked:
                sched.check_kv_integrity()  # pool, host rows and disk bound, with requests running
            if not sched.has_work():
                break
        assert not sched.has_work()
    return list(outputs.values())


def test_every_tier_accounted_between_steps_and_outputs_unchanged(tiny_llama_dir, tmp_path):
    with tiny_scheduler(tiny_llama_dir, max_running_requests=8) as sched:
        reference = _serve(sched, checked=False)
        assert sched.stats()["cache_evicted_tokens"] == 0
    tiers = {
        "enable_hierarchical_cache": True,
        "hicache_write_policy": "write_through",
        "hicache_size": 260 * PAGE_BYTES / 64 / 1e9,  # 260 host rows
        "hicache_storage_dir": str(tmp_path),
        "hicache_storage_size": 3 * (PAGE_BYTES + 2048) / 1e9,  # three pages and their headers
    }
    with tiny_scheduler(tiny_llama_dir, max_total_tokens=320, max_running_requests=4, **tiers) as sched:
        outputs = _serve(sched, checked=True)
        stats = sched.stats()
    assert outputs == reference
    assert stats["cache_evicted_tokens"] > 0 and stats["host_dropped_tokens"] > 0
    assert stats["disk_dropped_tokens"] > 0 and stats["disk_stored_bytes"] <= 3 * (PAGE_BYTES + 2048)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.kv")) <= 3 * (PAGE_BYTES + 2048)
