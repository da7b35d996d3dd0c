"""Requests waiting for their grammar to compile, and the per-step vocabulary masks."""
from __future__ import annotations

import concurrent.futures
from typing import Callable, Optional

import torch

from radixlm.kernels.token_bitmask import apply_token_bitmask
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.server_args import ServerArgs


class GrammarQueue:
    """Compiles grammars off the loop (the backend's thread pool) and masks constrained rows.

    A request waits here until its compiled grammar is ready; other requests keep running.
    """

    def __init__(self, args: ServerArgs, tokenizer, eos_token_ids: list[int], vocab_size: int) -> None:
        self.args = args
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.vocab_size = vocab_size
        self.pending: list[Req] = []
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._backend = None

    def _get_backend(self):
        if self._backend is None:
            from radixlm.runtime.constrained.backend import GrammarBackend

            whitespace = self.args.json_whitespace_pattern
            self._backend = GrammarBackend(
                self.tokenizer, self.eos_token_ids, self.vocab_size,
                cache_size=self.args.grammar_cache_size, whitespace_pattern=whitespace,
            )
        return self._backend

    def submit(self, req: Req) -> Optional[str]:
        """Validate and start compiling; returns an error message for a bad grammar."""
        kind, text = req.grammar_key
        try:
            backend = self._get_backend()
        except ImportError:
            return f"constrained decoding ({kind}) is not supported yet"
        try:
            backend.validate(kind, text)
        except ValueError as e:
            return f"invalid {kind}: {e}"
        self._futures[id(req)] = backend.submit(kind, text)
        self.pending.append(req)
        return None

    def validate(self, kind: str, text: str) -> None:
        """Raise ``ValueError`` for a grammar that cannot compile (front ends call it for a 400)."""
        self._get_backend().validate(kind, text)

    def poll(self, on_error: Callable[[Req, str], None]) -> list[Req]:
        """Requests whose grammar is ready, in arrival order; failures finish through ``on_error``."""
        ready: list[Req] = []
        for req in list(self.pending):
            fut = self._futures[id(req)]
            if not fut.done():
                continue
            self.pending.remove(req)
            del self._futures[id(req)]
            try:
                req.grammar = fut.result().new_matcher()
            except Exception as e:  # compile failure fails only this request
                on_error(req, f"grammar compilation failed: {e}")
                continue
            ready.append(req)
        return ready

    def discard(self, req: Req) -> None:
        self._futures.pop(id(req), None)

    def apply_masks(self, reqs: list[Req], logits: torch.Tensor) -> None:
        """Mask the constrained rows of ``logits`` in place; unconstrained rows cost nothing."""
        rows = [i for i, r in enumerate(reqs) if r.grammar is not None]
        if not rows:
            return
        words = (logits.shape[1] + 31) // 32
        bitmask = torch.zeros((len(rows), words), dtype=torch.int32)
        for j, i in enumerate(rows):
            reqs[i].grammar.fill_bitmask(bitmask, j)
        apply_token_bitmask(logits, bitmask.to(logits.device),
                            torch.tensor(rows, dtype=torch.int64, device=logits.device))

    def shutdown(self) -> None:
        if self._backend is not None:
            self._backend.shutdown()
