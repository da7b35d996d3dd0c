"""``Engine.encode``, ``Engine.rerank`` and ``Engine.classify``: an embedding server's calls in process."""

from __future__ import annotations

import math
from typing import Any

from radixlm.runtime.messages import CLIENT_ABORT_STATUS, EncodeOut, EncodeReq
from radixlm.runtime.pooling.encode_inputs import tokenize_inputs, tokenize_pairs
from radixlm.runtime.requests.request_validation import InvalidRequest


class EncodeAborted(RuntimeError):
    """An ``Engine.encode`` request aborted (``Engine.abort``) before it ran."""


class EncodeMixin:
    """Needs ``server_args``, ``tokenizer``, ``limits``, ``_loop`` and ``_new_rid`` (``Engine``)."""

    server_args: Any
    tokenizer: Any
    limits: Any
    _loop: Any

    def _new_rid(self) -> str:
        raise NotImplementedError

    def model_info(self) -> dict[str, Any]:
        raise NotImplementedError

    def encode(
        self, prompt: Any, dimensions: int | None = None, rid: str | None = None
    ) -> list[float] | list[list[float]]:
        """Embeddings of ``prompt`` (a string, a list of strings, token ids, or lists of them): one
        vector for a single input, else a list. ``dimensions`` truncates (Matryoshka models only).
        ``Engine.abort(rid)`` from another thread drops the request while it waits to run (a
        decoder's sequences also between prefill chunks): ``encode`` then raises ``EncodeAborted``."""
        ids, single = tokenize_inputs(self.tokenizer, prompt, self.limits, "prompt")
        vectors = self._encode(EncodeReq(rid or self._new_rid(), "embed", ids, dimensions=dimensions))
        return vectors[0] if single else vectors

    def classify(self, prompt: Any) -> list[float] | list[list[float]]:
        """The classification (or reward) head's logits for each input, shaped like ``encode``'s."""
        ids, single = tokenize_inputs(self.tokenizer, prompt, self.limits, "prompt")
        scores = self._encode(EncodeReq(self._new_rid(), "classify", ids))
        return scores[0] if single else scores

    def rerank(self, query: str, documents: list[str], instruction: str | None = None) -> list[float]:
        """The relevance of each document to ``query``, in the documents' order: a cross-encoder's one
        logit's sigmoid (as sentence-transformers' ``CrossEncoder.predict``), or a decoder reranker's
        P("yes") against "no" on its prompt, which alone takes an ``instruction``."""
        fmt = self.model_info().get("rerank_format")
        ids, types = tokenize_pairs(self.tokenizer, query, documents, self.limits, fmt, instruction)
        logits = self._encode(EncodeReq(self._new_rid(), "classify", ids, token_type_ids=types))
        if len(logits[0]) != 1:
            raise InvalidRequest(f"rerank needs a one-label cross-encoder; this model has {len(logits[0])}")
        return [1.0 / (1.0 + math.exp(-row[0])) for row in logits]

    def _encode(self, req: EncodeReq) -> list[list[float]]:
        if not self.server_args.is_embedding:
            raise ValueError("encode, rerank and classify need an embedding engine (is_embedding=True)")
        self._loop.reserve_encode(req.rid)
        out: EncodeOut = self._loop.call(req)
        if out.error and out.status == CLIENT_ABORT_STATUS:
            raise EncodeAborted(f"request {req.rid!r} was aborted")
        if out.error:
            raise (InvalidRequest(out.error) if out.status == 400 else RuntimeError(out.error))
        return out.vectors
