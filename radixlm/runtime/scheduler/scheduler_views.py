"""What the scheduler tells about itself (stats, the web UI's tree and batch, model info, the KV
ownership check) and the cache flush: read-mostly views that keep ``scheduler.py`` to the loop."""

from __future__ import annotations

from typing import Any

import torch

from radixlm.runtime.executor.model_runner import ModelRunner
from radixlm.runtime.messages import EncodeOut, FlushCacheOut, FlushCacheReq, GetStatsReq, StatsOut
from radixlm.runtime.pooling.encode_step import EncodeStep
from radixlm.runtime.scheduler.cache_manager import CacheManager
from radixlm.runtime.scheduler.grammar_queue import GrammarQueue
from radixlm.runtime.scheduler.pins import PinTable
from radixlm.runtime.scheduler.priority import count_by_priority
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.step_counters import StepCounters
from radixlm.runtime.speculative.speculator import Speculator


class SchedulerViews:
    """Mixed into ``Scheduler``: everything here only reads its state, except the flush."""

    cache: CacheManager
    runner: ModelRunner
    running: list[Req]
    waiting: list[Req]
    chunked: Req | None
    grammars: GrammarQueue
    pins: PinTable
    counters: StepCounters
    speculator: Speculator | None
    encoder: EncodeStep

    def has_work(self) -> bool:
        raise NotImplementedError

    def take_replies(self) -> list[EncodeOut]:
        """The ``EncodeOut`` answers completed by now, in order of arrival (call after ``step``)."""
        return self.encoder.take_replies()

    def _on_flush(self, msg: FlushCacheReq) -> FlushCacheOut:
        if self.has_work():
            return FlushCacheOut(False, "cannot flush the cache while requests are running")
        self.pins.release_all()
        self.cache.flush()
        if self.speculator is not None:
            self.speculator.flush()
        if msg.empty_cache and self.runner.device.type == "cuda":
            torch.cuda.empty_cache()
        return FlushCacheOut(True, "")

    def _on_stats(self, msg: GetStatsReq) -> StatsOut:
        if msg.tree_nodes <= 0:
            return StatsOut(self.stats())
        return StatsOut({**self.stats(), **self.snapshot(msg.tree_nodes)})

    def stats(self) -> dict[str, Any]:
        return {
            **self.cache.stats(),
            "num_running": len(self.running) + (1 if self.chunked else 0),
            "num_queued": len(self.waiting),
            **count_by_priority(self.waiting, self.running + ([self.chunked] if self.chunked else [])),
            "num_grammar_queue": len(self.grammars.pending),
            "num_pinned_contexts": len(self.pins),
            "gen_throughput": self.counters.gen_throughput(),
            "tp_ranks": self.runner.tp_status(),
            **self.counters.as_dict(),
            **self.encoder.stats(),
            **(self.speculator.stats if self.speculator is not None else {}),
        }

    def snapshot(self, max_nodes: int) -> dict[str, Any]:
        """The web UI's server view: ``tree`` (see ``radix.snapshot``) and ``batch`` (the running
        requests: rid, prompt and output tokens, cached prefix)."""
        from radixlm.radix.snapshot import tree_snapshot

        running = self.running + ([self.chunked] if self.chunked else [])
        holders = [(r.rid, r.last_node) for r in running if r.last_node is not None]
        batch = [
            dict(rid=r.rid, prompt=len(r.origin_input_ids), output=len(r.output_ids), cached=r.prefix_len)
            for r in running
        ]
        return {"tree": tree_snapshot(self.cache.tree.root, max_nodes, holders), "batch": batch}

    def check_kv_integrity(self) -> None:
        """Assert the KV ownership invariant (call when idle, or any time between steps)."""
        running = self.running + ([self.chunked] if self.chunked else [])
        self.cache.check_integrity(running)
        if self.speculator is not None:
            self.speculator.check_integrity(running)

    def model_info(self) -> dict[str, Any]:
        """What a client needs to know of the served model (``get_model_info``)."""
        return {**self.runner.model_info(), "kv_slots": self.cache.capacity}
