"""Requests waiting for their grammar to compile, and the per-step vocabulary masks."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable

import torch

from radixlm.kernels.token_bitmask import apply_token_bitmask
from radixlm.runtime.constrained.backend import GrammarBackend
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.server_args import ServerArgs


class GrammarQueue:
    """Compiles grammars off the loop (the backend's compile pool) and masks constrained rows.

    A request waits here until its compiled grammar is ready; other requests keep running.
    """

    def __init__(self, args: ServerArgs, tokenizer, eos_token_ids: list[int], vocab_size: int) -> None:
        self.args = args
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.vocab_size = vocab_size
        self.pending: list[Req] = []
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._deadlines: dict[int, float] = {}
        self._backend: GrammarBackend | None = None

    def _get_backend(self) -> GrammarBackend:
        """The grammar backend, built on first use (it indexes the whole vocabulary)."""
        if self._backend is None:
            whitespace = self.args.json_whitespace_pattern
            self._backend = GrammarBackend(
                self.tokenizer,
                self.eos_token_ids,
                self.vocab_size,
                cache_size=self.args.grammar_cache_size,
                cache_bytes=self.args.grammar_cache_bytes,
                whitespace_pattern=whitespace,
                backend=self.args.grammar_backend,
                compile_timeout=self.args.grammar_compile_timeout,
                max_concurrent=self.args.grammar_max_concurrent_compiles,
            )
        return self._backend

    def submit(self, req: Req) -> str | None:
        """Validate and start compiling; returns an error message for a bad grammar."""
        assert req.grammar_key is not None, "only a constrained request waits for a grammar"
        kind, text = req.grammar_key
        backend = self._get_backend()
        try:
            backend.validate(kind, text)
        except ValueError as e:
            return f"invalid {kind}: {e}"
        self._futures[id(req)] = backend.submit(kind, text)
        self._deadlines[id(req)] = time.monotonic() + self.args.grammar_compile_timeout
        self.pending.append(req)
        return None

    def poll(self, on_error: Callable[[Req, str], None], wait_s: float = 0.0) -> list[Req]:
        """Requests whose grammar is ready, in arrival order; failures and compiles past
        ``grammar_compile_timeout`` finish through ``on_error``. With ``wait_s`` (nothing else to
        do), block up to that long for a compile to finish instead of spinning."""
        if wait_s > 0 and self.pending:
            concurrent.futures.wait(
                list(self._futures.values()), timeout=wait_s, return_when=concurrent.futures.FIRST_COMPLETED
            )
        ready: list[Req] = []
        now = time.monotonic()
        for req in list(self.pending):
            fut = self._futures[id(req)]
            if not fut.done():
                if now > self._deadlines[id(req)]:
                    self.pending.remove(req)
                    self.discard(req)
                    timeout = self.args.grammar_compile_timeout
                    on_error(req, f"grammar compilation timed out after {timeout:g} s")
                continue
            self.pending.remove(req)
            self.discard(req)
            try:
                req.grammar = fut.result().new_matcher()
            except Exception as e:  # compile failure fails only this request
                on_error(req, f"grammar compilation failed: {e}")
                continue
            ready.append(req)
        return ready

    def discard(self, req: Req) -> None:
        self._futures.pop(id(req), None)
        self._deadlines.pop(id(req), None)

    def apply_masks(self, reqs: list[Req], logits: torch.Tensor) -> dict[int, str]:
        """Mask the constrained rows of ``logits`` in place; unconstrained rows cost nothing.

        Returns the rows whose matcher failed to fill its mask (row -> what it raised); those rows
        are left unmasked and must not be sampled."""
        matchers = {i: r.grammar for i, r in enumerate(reqs) if r.grammar is not None}
        rows = list(matchers)
        errors: dict[int, str] = {}
        if not rows:
            return errors
        words = (logits.shape[1] + 31) // 32
        bitmask = torch.zeros((len(rows), words), dtype=torch.int32)
        for j, i in enumerate(rows):
            try:
                matchers[i].fill_bitmask(bitmask, j)
            except Exception as e:  # noqa: BLE001 - one matcher's failure is its request's
                errors[i] = f"its grammar matcher failed to give the allowed tokens: {type(e).__name__}: {e}"
        if errors:  # only then a copy of the bitmask without the failed rows
            keep = [j for j, i in enumerate(rows) if i not in errors]
            bitmask, rows = bitmask[keep], [rows[j] for j in keep]
        if rows:
            indices = torch.tensor(rows, dtype=torch.int64, device=logits.device)
            apply_token_bitmask(logits, bitmask.to(logits.device), indices)
        return errors

    def shutdown(self) -> None:
        if self._backend is not None:
            self._backend.shutdown()
