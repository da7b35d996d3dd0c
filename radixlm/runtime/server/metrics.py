"""Prometheus metrics of the server (``--enable-metrics``, scraped at ``GET /metrics``).

Counters and histograms are updated as requests finish (in the TokenizerManager's event loop);
the gauges are read from the scheduler's live statistics at each scrape. Every metric is named
``radixlm:<name>`` (SGLang's are ``sglang:<name>``) and lives in the server's own registry.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from radixlm.runtime.messages import ReqTextOut

PREFIX = "radixlm:"
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
TPOT_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    """The server's metrics: ``on_finished`` per finished sample, ``render`` per scrape."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name}
        r = self.registry

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
            return Counter(PREFIX + name, doc, ["model_name", *extra], registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(PREFIX + name, doc, ["model_name"], buckets=buckets, registry=r).labels(**labels)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(PREFIX + name, doc, ["model_name"], registry=r).labels(**labels)

        self.model_name = model_name
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of finished requests").labels(**labels)
        self.generation_tokens = counter("generation_tokens", "Generated tokens").labels(**labels)
        self.cached_tokens = counter("cached_tokens", "Prompt tokens served from the prefix cache").labels(
            **labels
        )
        self.requests = counter("num_requests", "Finished requests by finish reason", ("finish_reason",))
        self.ttft = histogram("time_to_first_token_seconds", "Time to the first output token", TTFT_BUCKETS)
        self.tpot = histogram(
            "time_per_output_token_seconds", "Time per output token after the first", TPOT_BUCKETS
        )
        self.e2e = histogram("e2e_request_latency_seconds", "End-to-end request latency", E2E_BUCKETS)
        self.running = gauge("num_running_reqs", "Requests running in the scheduler")
        self.queued = gauge("num_queue_reqs", "Requests waiting for admission (and grammar compiles)")
        self.kv_usage = gauge("kv_usage", "Share of the KV pool held by requests (not the evictable cache)")
        self.kv_cached = gauge("kv_cache_usage", "Share of the KV pool holding the prefix cache")
        self.hit_rate = gauge("cache_hit_rate", "Prompt tokens found in the prefix cache / prompt tokens")
        self.spec_accept_rate = gauge("spec_accept_rate", "Speculative draft tokens accepted / proposed")
        self.spec_accept_length = gauge(
            "spec_accept_length", "Tokens emitted per speculative verify step (accepted drafts + 1)"
        )

        # Per data-parallel replica and per tensor-parallel rank (set only when there are several).
        def per(name: str, doc: str, label: str) -> Any:
            return Gauge(PREFIX + name, doc, ["model_name", label], registry=r)

        self.replica_running = per("replica_num_running_reqs", "Running requests of one replica", "dp_rank")
        self.replica_queued = per("replica_num_queue_reqs", "Waiting requests of one replica", "dp_rank")
        self.replica_kv_usage = per(
            "replica_kv_usage", "Share of one replica's KV pool held by requests", "dp_rank"
        )
        self.replica_hit_rate = per("replica_cache_hit_rate", "A replica's prefix cache hit rate", "dp_rank")
        self.replica_routed = per("replica_routed_requests", "Requests routed to one replica", "dp_rank")
        self.rank_alive = per("tp_rank_alive", "1 while a tensor-parallel rank's process lives", "tp_rank")
        self.queued_by_priority = per(
            "num_queue_reqs_by_priority", "Waiting requests by priority", "priority"
        )
        self.running_by_priority = per(
            "num_running_reqs_by_priority", "Running requests by priority", "priority"
        )
        # KV tiers under the radix cache (host, disk): cumulative counters read from the scheduler
        self.tier_gauges = {
            name: per("kv_tier_" + name, doc, "tier")
            for name, doc in (
                ("hit_tokens", "Prompt tokens loaded back from a KV tier"),
                ("loaded_bytes", "Bytes loaded back from a KV tier"),
                ("load_seconds", "Seconds spent loading KV back from a tier"),
                ("written_bytes", "Bytes written down to a KV tier"),
                ("errors", "Tier entries skipped (unreadable, foreign) or not written (disk full)"),
            )
        }

    def on_finished(self, out: ReqTextOut, started_at: float) -> None:
        """Count one finished sample; ``started_at`` is when its HTTP request arrived (perf_counter)."""
        now = time.perf_counter()
        meta = out.meta_info
        completion = int(meta.get("completion_tokens") or 0)
        self.prompt_tokens.inc(int(meta.get("prompt_tokens") or 0))
        self.generation_tokens.inc(completion)
        self.cached_tokens.inc(int(meta.get("cached_tokens") or 0))
        reason = (meta.get("finish_reason") or {}).get("type", "unknown")
        self.requests.labels(model_name=self.model_name, finish_reason=reason).inc()
        self.e2e.observe(max(now - started_at, 0.0))
        if out.first_token_at is not None and completion > 0:
            # NOTE: perf_counter is CLOCK_MONOTONIC on Linux, shared by the scheduler process.
            self.ttft.observe(max(out.first_token_at - started_at, 0.0))
            if completion > 1:
                self.tpot.observe(max(now - out.first_token_at, 0.0) / (completion - 1))

    def render(self, stats: dict[str, Any]) -> bytes:
        """The text exposition, with the gauges set from the scheduler's ``stats``."""
        total = max(int(stats.get("kv_total") or 0), 1)
        self.running.set(stats.get("num_running", 0))
        self.queued.set(stats.get("num_queued", 0) + stats.get("num_grammar_queue", 0))
        self.kv_usage.set(stats.get("kv_used", 0) / total)
        self.kv_cached.set(stats.get("kv_cached", 0) / total)
        self.hit_rate.set(stats.get("cache_hit_rate", 0.0))
        drafts, verifies = stats.get("spec_draft_tokens", 0), stats.get("spec_verify_steps", 0)
        accepted = stats.get("spec_accepted_tokens", 0)
        self.spec_accept_rate.set(accepted / drafts if drafts else 0.0)
        self.spec_accept_length.set((accepted + verifies) / verifies if verifies else 0.0)
        self._set_parallel_gauges(stats)
        self._set_priority_gauges(stats)
        for tier in ("host", "disk"):
            for name, g in self.tier_gauges.items():
                if f"{tier}_{name}" in stats:
                    g.labels(model_name=self.model_name, tier=tier).set(stats[f"{tier}_{name}"])
        return generate_latest(self.registry)

    def _set_parallel_gauges(self, stats: dict[str, Any]) -> None:
        for replica in stats.get("dp_replicas", []):
            labels = {"model_name": self.model_name, "dp_rank": str(replica.get("dp_rank", 0))}
            total = max(int(replica.get("kv_total") or 0), 1)
            self.replica_running.labels(**labels).set(replica.get("num_running", 0))
            self.replica_queued.labels(**labels).set(replica.get("num_queued", 0))
            self.replica_kv_usage.labels(**labels).set(replica.get("kv_used", 0) / total)
            self.replica_hit_rate.labels(**labels).set(replica.get("cache_hit_rate", 0.0))
            self.replica_routed.labels(**labels).set(replica.get("routed", 0))
        ranks = stats.get("tp_ranks", [])
        for rank in ranks if len(ranks) > 1 else []:
            self.rank_alive.labels(model_name=self.model_name, tp_rank=str(rank["tp_rank"])).set(
                1 if rank.get("alive") else 0
            )

    def _set_priority_gauges(self, stats: dict[str, Any]) -> None:
        # NOTE: cleared first, so a priority with no request left drops out instead of going stale.
        for gauge, key in (
            (self.queued_by_priority, "queued_by_priority"),
            (self.running_by_priority, "running_by_priority"),
        ):
            gauge.clear()
            for priority, n in stats.get(key, {}).items():
                gauge.labels(model_name=self.model_name, priority=priority).set(n)
