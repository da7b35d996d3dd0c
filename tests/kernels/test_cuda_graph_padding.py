"""CudaGraphRunner's buckets and padding, checked on the CPU with graphs replaced by eager calls.

The padded batch (dummy row 0, dummy slot 0, length 1) must give the real rows the eager logits;
the graph capture itself is checked by the GPU test.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from radixlm.runtime.executor import cuda_graph_runner as cgr
from radixlm.runtime.executor.forward_batch import ForwardMode
from tests.helpers.model_helpers import (
    PagedSession,
    assert_logits_close,
    make_runner,
    save_tiny_model,
    tiny_llama_config,
)

pytestmark = pytest.mark.triton_interpret


class EagerGraph:
    """Stands in for a captured graph: runs the bucket's static batch eagerly."""

    def __init__(self, runner: cgr.CudaGraphRunner, bs: int) -> None:
        self.runner, self.bs = runner, bs

    def replay(self) -> None:  # like a graph, writes into the bucket's one output buffer
        out = self.runner._run_model(self.runner._batch(self.bs))
        self.runner._outputs.setdefault(self.bs, out).copy_(out)


def test_buckets():
    assert cgr.batch_size_buckets(1) == [1]
    assert cgr.batch_size_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert cgr.batch_size_buckets(160)[4:7] == [16, 24, 32] and cgr.batch_size_buckets(160)[-1] == 160


def test_padded_static_batch_matches_eager(tmp_path, device):
    runner = make_runner(
        save_tiny_model(tiny_llama_config(), tmp_path, with_tokenizer=False),
        device=str(device),
        attention_backend="triton",
        disable_cuda_graph=True,
    )
    with mock.patch.object(cgr.CudaGraphRunner, "capture"), mock.patch("torch.cuda.graph_pool_handle"):
        graphs = cgr.CudaGraphRunner(runner, max_bs=8)
    graphs._graphs = {bs: EagerGraph(graphs, bs) for bs in graphs.buckets}
    session = PagedSession(runner)
    rows = [session.open() for _ in range(5)]
    session.extend(rows, [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [11, 12]])
    kept = []
    for bs in (5, 3, 5):  # padded to buckets 8 and 4, then 8 again
        fb = session._build(ForwardMode.DECODE, rows[:bs], [[7]] * bs, False)
        eager = runner.forward(fb)
        assert graphs.can_run(fb)
        replayed = graphs.replay(fb)
        assert_logits_close(replayed, eager, rtol=1e-5)
        kept.append((replayed, eager))
    for replayed, eager in kept:  # a later replay of the same bucket must not change earlier logits
        assert_logits_close(replayed, eager, rtol=1e-5)
    assert torch.all(runner.req_to_token_pool.req_to_token[0] == 0)  # the dummy row stays dummy
