"""Turn what a client sends to embed, rerank or classify into checked token ids (Engine and server).

Inputs are a string, a list of strings, a list of token ids, or a list of such lists (the OpenAI
embeddings ``input``). Every failure is an ``InvalidRequest`` naming the field.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.pooling.fast_tokenize import encode_text
from radixlm.runtime.pooling.rerank_prompt import QWEN3_YES_NO, yes_no_prompt_ids
from radixlm.runtime.requests.request_validation import InvalidRequest, ModelLimits

MAX_INPUTS = 2048  # OpenAI's cap on one embeddings request's inputs


def tokenize_inputs(
    tokenizer: Any, inputs: Any, limits: ModelLimits, field: str
) -> tuple[list[list[int]], bool]:
    """The token ids of each input, and whether a single input (not a list) was given."""
    if isinstance(inputs, str):
        return [_check(_encode(tokenizer, inputs, field), limits, field)], True
    if not isinstance(inputs, list) or not inputs:
        raise InvalidRequest(f"{field} must be a string, a list of strings or token ids, non-empty", field)
    if all(_is_id(x) for x in inputs):
        return [_check(list(inputs), limits, field)], True
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequest(f"{field} holds {len(inputs)} inputs; at most {MAX_INPUTS}", field)
    out = []
    for i, item in enumerate(inputs):
        name = f"{field}[{i}]"
        if isinstance(item, str):
            out.append(_check(_encode(tokenizer, item, name), limits, name))
        elif isinstance(item, list) and item and all(_is_id(x) for x in item):
            out.append(_check(list(item), limits, name))
        else:
            raise InvalidRequest(f"{name} must be a string or a non-empty list of token ids", name)
    return out, False


def tokenize_pairs(
    tokenizer: Any,
    query: Any,
    documents: Any,
    limits: ModelLimits,
    rerank_format: str | None = None,
    instruction: Any = None,
) -> tuple[list[list[int]], list[list[int]]]:
    """A reranker's inputs with their token type ids: ``query`` paired with each document through the
    tokenizer (a cross-encoder), or, with ``rerank_format`` (the model info's), each pair in a decoder
    reranker's prompt (which alone takes an ``instruction``)."""
    if not isinstance(query, str) or not query:
        raise InvalidRequest("query must be a non-empty string", "query")
    if instruction is not None and (rerank_format is None or not isinstance(instruction, str)):
        why = "must be a string" if rerank_format else "is taken by decoder rerankers only, not this model"
        raise InvalidRequest(f"instruction {why}", "instruction")
    if not isinstance(documents, list) or not documents or len(documents) > MAX_INPUTS:
        raise InvalidRequest(f"documents must be a list of 1 to {MAX_INPUTS} strings", "documents")
    ids, types = [], []
    for i, doc in enumerate(documents):
        if not isinstance(doc, str):
            raise InvalidRequest(f"documents[{i}] must be a string", f"documents[{i}]")
        if tokenizer is None:
            raise InvalidRequest("this model has no tokenizer: rerank needs one", "documents")
        if rerank_format == QWEN3_YES_NO:
            seq, tt = yes_no_prompt_ids(tokenizer, query, doc, instruction), None
        else:
            enc = tokenizer(query, doc)
            seq, tt = list(enc["input_ids"]), enc.get("token_type_ids")
        ids.append(_check(seq, limits, f"documents[{i}]"))
        types.append(list(tt or [0] * len(seq)))
    return ids, types


def _encode(tokenizer: Any, text: str, field: str) -> list[int]:
    if tokenizer is None:
        raise InvalidRequest(f"{field}: this model has no tokenizer; send token ids", field)
    return encode_text(tokenizer, text)


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check(ids: list[int], limits: ModelLimits, field: str) -> list[int]:
    if not ids:
        raise InvalidRequest(f"{field} is empty", field)
    bad = next((t for t in ids if not 0 <= t < limits.vocab_size), None)
    if bad is not None:
        raise InvalidRequest(
            f"{field}: token id {bad} is outside the vocabulary [0, {limits.vocab_size})", field
        )
    if len(ids) > limits.context_length:
        raise InvalidRequest(
            f"{field}: {len(ids)} tokens exceed the context length {limits.context_length}", field
        )
    return ids
