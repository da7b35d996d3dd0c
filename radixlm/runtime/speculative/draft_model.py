"""A draft model (SGLang's ``STANDALONE``): a second, smaller model sharing the target's vocabulary,
run in the scheduler process with its own paged KV pool, proposing ``k`` tokens greedily per request.

Its cache follows the target's accepted tokens by construction: each request's draft row records the
tokens whose KV it holds (the request's tokens, then the drafts it proposed last step). Before a
proposal the row is cut back to its longest common prefix with the request's current tokens (the
KV of rejected drafts goes back to the pool there) and caught up by one extend over the rest. A
request that ends or is retracted gives its row and every slot back (``release``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from radixlm.radix import create_prefix_cache
from radixlm.runtime.speculative.draft_batches import draft_decode_batch, draft_extend_batch

if TYPE_CHECKING:
    from radixlm.runtime.executor.model_runner import ModelRunner
    from radixlm.runtime.scheduler.req import Req
    from radixlm.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


# NOTE: up to this many new tokens per request catch up as decode rows, more (a new prompt) as an extend
SHORT_CATCH_UP = 16


@dataclass
class _DraftSeq:
    """A request's draft row: KV of ``tokens``; ``[0, prefix_len)`` is the draft tree's (locked at
    ``last_node``), the rest the row's own."""

    row: int
    last_node: Any
    prefix_len: int
    tokens: list[int] = field(default_factory=list)


@dataclass
class _Work:
    """One request's proposal this step: ``new`` tokens to catch up on into ``slots``, then ``k - 1``
    draft positions."""

    index: int
    k: int
    seq: _DraftSeq
    new: list[int]
    slots: torch.Tensor


def check_same_vocabulary(target: Any, draft: Any, draft_path: str) -> None:
    """Raise ValueError unless the draft runner's tokenizer (or, lacking tokenizers, its vocabulary
    size) is the target's: a draft token id must mean the same text to both models."""
    t_tok, d_tok = target.loaded.tokenizer, draft.loaded.tokenizer
    if t_tok is not None and d_tok is not None:
        t_vocab, d_vocab = t_tok.get_vocab(), d_tok.get_vocab()
        if t_vocab != d_vocab:
            differ = sum(1 for tok, i in d_vocab.items() if t_vocab.get(tok) != i)
            raise ValueError(
                f"speculative_draft_model_path {draft_path!r} has another tokenizer than the target: "
                f"{len(d_vocab)} vs {len(t_vocab)} tokens, {differ} mapped differently; a draft model "
                f"must share the target's vocabulary"
            )
    elif target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"speculative_draft_model_path {draft_path!r}: vocabulary size {draft.vocab_size} differs "
            f"from the target's {target.vocab_size} (and no tokenizers to compare); a draft model must "
            f"share the target's vocabulary"
        )


class DraftModel:
    """The draft runner and each request's draft row. ``propose`` is batched over the requests."""

    def __init__(self, runner: ModelRunner, vocab_limit: int, disable_radix_cache: bool = False) -> None:
        self.runner = runner
        self.vocab_limit = vocab_limit  # ids the target can verify (padded vocabularies differ)
        self.table = runner.req_to_token_pool.req_to_token
        self.allocator = runner.kv_pool.allocator
        self.tree = create_prefix_cache(self.allocator, disabled=disable_radix_cache)
        self.seqs: dict[Req, _DraftSeq] = {}

    @classmethod
    def load(cls, target_args: ServerArgs, target: ModelRunner, num_slots: int) -> DraftModel:
        """Load ``target_args.speculative_draft_model_path`` next to ``target`` with ``num_slots`` KV
        slots and the target's context length and row count."""
        from radixlm.runtime.executor.model_runner import ModelRunner

        path = target_args.speculative_draft_model_path
        if path is None:
            raise ValueError("speculative_algorithm STANDALONE needs speculative_draft_model_path")
        args = target_args.replace(
            model=path,
            tokenizer=None,
            context_length=target.context_length,
            max_total_tokens=num_slots,
            speculative_algorithm=None,
            speculative_draft_model_path=None,
            tp_size=1,  # the draft runs in the scheduler's process only
            dp_size=1,
            nnodes=1,
            node_rank=0,
            disable_cuda_graph=True,  # the draft's steps run eagerly
            enable_lora=False,  # LoRA requests take the base draft's guesses; the target verifies them
            lora_paths=(),
        )
        draft = ModelRunner(args)
        check_same_vocabulary(target, draft, path)
        logger.info("draft model %s: %d KV slots", path, num_slots)
        return cls(draft, min(draft.vocab_size, target.vocab_size), target_args.disable_radix_cache)

    @property
    def capacity(self) -> int:
        return self.runner.kv_pool.allocator.num_slots

    def propose(self, reqs: list[Req], ks: list[int]) -> list[list[int]]:
        """Up to ``ks[i]`` greedy draft tokens after each request's tokens (none where ``ks[i]`` is 0
        or the draft pool is full)."""
        drafts: list[list[int]] = [[] for _ in reqs]
        live = set(reqs)
        work: list[_Work] = []
        for i, (req, k) in enumerate(zip(reqs, ks)):
            synced = self._sync(req, k, live) if k > 0 else None
            if synced is not None:
                work.append(_Work(i, k, *synced))
        if not work:
            return drafts
        try:
            self._run(work, drafts)
        except BaseException:
            for w in work:  # taken by _sync, never recorded in a row's tokens
                self.allocator.free(w.slots)
            raise
        for w in work:
            w.seq.tokens.extend(w.new)
            w.seq.tokens.extend(drafts[w.index][:-1])  # the last draft token was never fed
        return drafts

    def _run(self, work: list[_Work], drafts: list[list[int]]) -> None:
        """The forwards of one proposal: the catch-up (with the first draft token), then ``k - 1``
        one-token decodes; appends to ``drafts``."""
        long = [w for w in work if len(w.new) > SHORT_CATCH_UP]
        if long:
            fb = draft_extend_batch(
                self.runner,
                [w.seq.row for w in long],
                [len(w.seq.tokens) for w in long],
                [w.new for w in long],
                [w.slots[: len(w.new)] for w in long],
            )
            for w, token in zip(long, self._greedy(fb)):
                drafts[w.index].append(token)
        short = [w for w in work if len(w.new) <= SHORT_CATCH_UP]
        if short:
            for w, token in zip(short, self._greedy(self._catch_up_rows(short))):
                drafts[w.index].append(token)
        for step in range(1, max(w.k for w in work)):
            active = [w for w in work if w.k > step]
            fb = draft_decode_batch(
                self.runner,
                [w.seq.row for w in active],
                [len(w.seq.tokens) + len(w.new) + step - 1 for w in active],
                [drafts[w.index][-1] for w in active],
                torch.stack([w.slots[len(w.new) + step - 1] for w in active]),
            )
            for w, token in zip(active, self._greedy(fb)):
                drafts[w.index].append(token)

    def _catch_up_rows(self, work: list[_Work]) -> Any:
        """A few new tokens per request as decode rows, one per position (an extend's attention over
        a long context costs more on a CPU); logits at each request's last row."""
        rows: list[int] = []
        positions: list[int] = []
        tokens: list[int] = []
        last: list[int] = []
        for w in work:
            start = len(w.seq.tokens)
            rows.extend([w.seq.row] * len(w.new))
            positions.extend(range(start, start + len(w.new)))
            tokens.extend(w.new)
            last.append(len(rows) - 1)
        slots = torch.cat([w.slots[: len(w.new)] for w in work])
        return draft_decode_batch(self.runner, rows, positions, tokens, slots, last)

    def _greedy(self, fb: Any) -> list[int]:
        logits = self.runner.forward(fb)
        return logits[:, : self.vocab_limit].argmax(dim=-1).tolist()

    def _sync(self, req: Req, k: int, live: set[Req]) -> tuple[_DraftSeq, list[int], torch.Tensor] | None:
        """Cut ``req``'s draft row back to what still matches its tokens and take the slots for the
        rest plus ``k - 1`` draft positions; None (the row released) when the pool cannot."""
        fill = req.fill_ids
        seq = self.seqs.get(req)
        keep = 0 if seq is None else min(_common_prefix(seq.tokens, fill), len(fill) - 1)
        if seq is not None and keep < seq.prefix_len:  # the request's tokens changed under the tree's part
            self.release(req)
            seq = None
        if seq is None:
            seq = self._open(req, fill)
            if seq is None:
                return None
            keep = len(seq.tokens)
        self.allocator.free(self.table[seq.row, keep : len(seq.tokens)].clone())
        del seq.tokens[keep:]
        need = len(fill) - keep + k - 1
        slots = self._alloc(need, live)
        if slots is None:
            self.release(req)
            return None
        self.runner.req_to_token_pool.write(seq.row, keep, slots)
        return seq, fill[keep:], slots

    def _open(self, req: Req, fill: list[int]) -> _DraftSeq | None:
        """A draft row for ``req`` starting from the draft tree's longest match of its tokens (all
        but the last, which must be computed for its logits)."""
        row = self.runner.req_to_token_pool.alloc()
        if row is None:
            return None
        match = self.tree.match_prefix(fill[: len(fill) - 1])
        self.tree.inc_lock(match.last_node)
        cached = int(match.slots.numel())
        self.runner.req_to_token_pool.write(row, 0, match.slots)
        seq = self.seqs[req] = _DraftSeq(row, match.last_node, cached, fill[:cached])
        return seq

    def _alloc(self, n: int, live: set[Req]) -> torch.Tensor | None:
        """``n`` slots: free ones, then evicted tree leaves, then the rows of requests not speculating
        this step (released into the tree first)."""
        for attempt in range(2):
            if attempt:
                for other in [r for r in self.seqs if r not in live]:
                    self.release(other)
            short = n - self.allocator.available_size()
            if short > 0:
                self.tree.evict(short)
            slots = self.allocator.alloc(n)
            if slots is not None:
                return slots
        return None

    def release(self, req: Req) -> None:
        """``req`` ended or was retracted: the KV of its tokens (not of rejected drafts) goes into the
        draft tree, every other slot back to the pool, and its row is freed."""
        seq = self.seqs.pop(req, None)
        if seq is None:
            return
        n = len(seq.tokens)
        row_slots = self.table[seq.row, :n].clone()
        valid = _common_prefix(seq.tokens, req.fill_ids)
        cached = self.tree.insert(seq.tokens[:valid], row_slots[:valid])
        kept = int(self.tree.match_prefix(seq.tokens[:valid], count=False).slots.numel())
        own = torch.ones(n, dtype=torch.bool)
        own[: seq.prefix_len] = False  # the tree's already
        own[cached:kept] = False  # the tree took these
        self.allocator.free(row_slots[own])
        self.tree.dec_lock(seq.last_node)
        self.runner.req_to_token_pool.free(seq.row)

    def check_integrity(self, running: list[Req]) -> None:
        """Assert that only running requests hold draft rows and that every draft slot is in exactly
        one of: the free list, the draft tree, one row's own part."""
        stray = [r.rid for r in self.seqs if r not in set(running)]
        assert not stray, f"draft rows held by requests not running: {stray}"
        parts = [self.allocator.free_slots(), self.tree.all_slots()]
        parts += [self.table[s.row, s.prefix_len : len(s.tokens)] for s in self.seqs.values()]
        every = torch.cat([p.to(torch.int64).cpu() for p in parts]).sort().values
        assert torch.equal(every, torch.arange(1, self.capacity + 1)), "draft KV ownership broken"
        self.tree.check_invariants()
        rows = self.runner.req_to_token_pool
        assert rows.available_size() + len(self.seqs) == rows.size, "a draft row leaked"

    def flush(self) -> None:
        """Drop the draft's prefix cache (only while no request holds a draft row)."""
        assert not self.seqs, "flushing the draft cache while requests hold draft rows"
        self.tree.reset()
        self.allocator.clear()

    def close(self) -> None:
        self.runner.close()


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n
