"""/metrics by priority: the scheduler's per-priority counts become labelled gauges, and stale ones go."""

from __future__ import annotations

from radixlm.runtime.router.dp_controller import merge_stats
from radixlm.runtime.server.metrics import ServerMetrics


def test_queue_and_running_gauges_by_priority():
    metrics = ServerMetrics("m")
    text = metrics.render({"queued_by_priority": {"0": 3, "7": 1}, "running_by_priority": {"0": 2}}).decode()
    assert 'radixlm:num_queue_reqs_by_priority{model_name="m",priority="0"} 3.0' in text
    assert 'radixlm:num_queue_reqs_by_priority{model_name="m",priority="7"} 1.0' in text
    assert 'radixlm:num_running_reqs_by_priority{model_name="m",priority="0"} 2.0' in text
    text = metrics.render({"queued_by_priority": {"0": 1}, "running_by_priority": {}}).decode()
    assert 'priority="7"' not in text  # nothing waits at 7 any more


def test_data_parallel_replicas_sum_per_priority():
    merged = merge_stats(
        [
            {"queued_by_priority": {"0": 1, "5": 2}},
            {"queued_by_priority": {"5": 1}, "running_by_priority": {"1": 1}},
        ]
    )
    assert merged["queued_by_priority"] == {"0": 1, "5": 3} and merged["running_by_priority"] == {"1": 1}
