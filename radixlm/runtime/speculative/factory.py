"""Build the scheduler's speculator from the server flags (``--speculative-*``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixlm.runtime.speculative.draft_model import DraftModel
from radixlm.runtime.speculative.spec_args import (
    draft_pool_slots,
    resolve_algorithm,
    resolve_max_draft_len,
    resolve_spec_max_batch,
)
from radixlm.runtime.speculative.speculator import Speculator

if TYPE_CHECKING:
    from radixlm.runtime.executor.model_runner import ModelRunner
    from radixlm.runtime.scheduler.cache_manager import CacheManager
    from radixlm.runtime.server_args import ServerArgs


def create_speculator(
    args: ServerArgs, runner: ModelRunner, cache: CacheManager, context_length: int
) -> Speculator | None:
    """The speculator for ``args.speculative_algorithm`` on the runner's device (None without one:
    ``resolve_algorithm``); STANDALONE loads its draft model here, with a KV pool sized from the
    target's; NGRAM also reads the target's radix tree."""
    algorithm = resolve_algorithm(
        args.speculative_algorithm, args.speculative_draft_model_path, runner.device.type
    )
    if algorithm is None:
        return None
    max_draft_len = resolve_max_draft_len(args.speculative_num_steps, args.speculative_num_draft_tokens)
    max_batch = resolve_spec_max_batch(args.speculative_max_batch, runner.device.type)
    draft = None
    if algorithm == "STANDALONE":
        slots = draft_pool_slots(cache.capacity, max_batch, context_length, max_draft_len)
        draft = DraftModel.load(args, runner, slots)
    tree = cache.tree if draft is None else None
    return Speculator(
        algorithm,
        max_draft_len,
        max_batch,
        context_length,
        draft,
        tree,
        runner.vocab_size,
        speed_check=args.speculative_speed_check,
    )
