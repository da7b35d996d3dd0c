"""The data-parallel controller process (``--dp-size N``): it takes the tokenizer manager's messages
in place of a scheduler, routes each generation request to one of N scheduler replicas by the
routing policy, and passes the replicas' outputs on to the detokenizer.

Requests of one program follow their parents: a request naming parents in ``unpin_rids`` goes to
the replica that ran the first of them (their context is cached and pinned there). Aborts and pin
releases go to every replica; flush and stats are asked of every replica and answered once, merged
(stats keep each replica's own under ``dp_replicas``).
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections import Counter, deque
from typing import Any

import zmq

from radixlm import _env
from radixlm.runtime.ipc import recv_all, watch_parent, zmq_socket

IDLE_POLL_MS = 200
RID_MEMORY = 100_000  # finished rids remembered for their children's routing


class DataParallelController:
    """Routing state and reply merging, free of sockets (``route`` returns where messages go)."""

    def __init__(self, num_replicas: int, policy: Any) -> None:
        self.n = num_replicas
        self.policy = policy
        self.rid_replica: dict[str, int] = {}
        self._rid_order: deque[str] = deque()
        self._pending: dict[type, deque[list[Any]]] = {}

    def route(self, msg: Any) -> list[int]:
        """The replicas ``msg`` goes to."""
        from radixlm.runtime.messages import TokenizedGenerateReq

        if not isinstance(msg, TokenizedGenerateReq):
            return list(range(self.n))
        parent = next((self.rid_replica[r] for r in msg.unpin_rids if r in self.rid_replica), None)
        key = [int(t) for t in msg.input_ids]
        if parent is not None:
            replica = parent
            self.policy.replicas[replica].index.insert(key)
            self.policy.replicas[replica].routed += 1
        else:
            replica = self.policy.choose(key)
        self.policy.started(replica)
        self._remember(msg.rid, replica)
        return [replica]

    def on_output(self, replica: int, msg: Any) -> Any:
        """What to pass on for ``msg`` from ``replica`` (None: held until every replica answered)."""
        from radixlm.runtime.messages import BatchTokenOut, FlushCacheOut, StatsOut

        if isinstance(msg, BatchTokenOut):
            for out in msg.outs:
                if out.finish_reason is not None:
                    self.policy.finished(replica)
            return msg
        if isinstance(msg, (StatsOut, FlushCacheOut)):
            waiting = self._pending.setdefault(type(msg), deque())
            for replies in waiting:
                if replies[replica] is None:
                    replies[replica] = msg
                    break
            else:
                replies = [None] * self.n
                replies[replica] = msg
                waiting.append(replies)
            if waiting and all(r is not None for r in waiting[0]):
                return self._merge(waiting.popleft())
            return None
        return msg

    def _merge(self, replies: list[Any]) -> Any:
        from radixlm.runtime.messages import FlushCacheOut, StatsOut

        if isinstance(replies[0], FlushCacheOut):
            return FlushCacheOut(
                all(r.success for r in replies), "; ".join(r.message for r in replies if r.message)
            )
        merged = merge_stats([r.stats for r in replies])
        for i, (stats, route) in enumerate(zip(merged["dp_replicas"], self.policy.status())):
            stats.update({"dp_rank": i, "routed": route["routed"], "router_load": route["load"]})
        return StatsOut(merged)

    def _remember(self, rid: str, replica: int) -> None:
        self.rid_replica[rid] = replica
        self._rid_order.append(rid)
        while len(self._rid_order) > RID_MEMORY:
            self.rid_replica.pop(self._rid_order.popleft(), None)


def merge_stats(per_replica: list[dict[str, Any]]) -> dict[str, Any]:
    """Numbers summed over the replicas (throughput too; the hit rate recomputed from the summed
    tokens), the rest from replica 0, each replica's own stats under ``dp_replicas``."""
    merged: dict[str, Any] = dict(per_replica[0])
    for name, value in per_replica[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            merged[name] = sum(s.get(name, 0) for s in per_replica)
    for name in ("queued_by_priority", "running_by_priority"):  # counts per priority: summed per key
        totals: Counter[str] = Counter()
        for s in per_replica:
            totals.update(s.get(name, {}))
        merged[name] = dict(totals)
    if "cache_requested_tokens" in merged:  # a rate is not a sum
        hits, asked = merged.get("cache_hit_tokens", 0), merged["cache_requested_tokens"]
        merged["cache_hit_rate"] = hits / max(asked, 1)
    merged["dp_size"] = len(per_replica)
    merged["dp_replicas"] = [dict(s) for s in per_replica]
    return merged


def run_dp_controller(
    server_args: Any,
    inbox: str,
    replica_inboxes: list[str],
    replica_outboxes: list[str],
    detokenizer: str,
    parent_pid: int,
    socket_dir: str,
) -> None:
    """Process entry point: loop forever between the tokenizer manager, the replicas and the detokenizer."""
    _env.limit_threads_for_helper_process()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid, socket_dir)
    from radixlm.runtime.messages import SchedulerDied
    from radixlm.runtime.router.policy import RoutingPolicy

    ctx = zmq.Context()
    pull = zmq_socket(ctx, zmq.PULL, inbox, bind=True)
    to_replicas = [zmq_socket(ctx, zmq.PUSH, a, bind=False) for a in replica_inboxes]
    from_replicas = [zmq_socket(ctx, zmq.PULL, a, bind=True) for a in replica_outboxes]
    push = zmq_socket(ctx, zmq.PUSH, detokenizer, bind=False)
    policy = RoutingPolicy(
        len(replica_inboxes),
        server_args.load_balance_method,
        server_args.balance_abs_threshold,
        server_args.balance_rel_threshold,
    )
    controller = DataParallelController(len(replica_inboxes), policy)
    poller = zmq.Poller()
    for sock in [pull, *from_replicas]:
        poller.register(sock, zmq.POLLIN)
    try:
        while True:
            ready = dict(poller.poll(IDLE_POLL_MS))
            if pull in ready:
                for msg in recv_all(pull, timeout_ms=0):
                    for replica in controller.route(msg):
                        to_replicas[replica].send_pyobj(msg)
            for i, sock in enumerate(from_replicas):
                if sock in ready:
                    for msg in recv_all(sock, timeout_ms=0):
                        out = controller.on_output(i, msg)
                        if out is not None:
                            push.send_pyobj(out)
    except Exception:
        push.send_pyobj(SchedulerDied("data-parallel controller", traceback.format_exc()))
        push.close(linger=2000)
        sys.exit(1)
