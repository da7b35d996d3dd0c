"""The prompt a decoder reranker judges: Qwen3-Reranker's documented chat, one per document.

The system turn asks for a "yes" or "no"; the user turn carries the instruction, the query and the
document; the assistant turn is opened with an empty think block, so the next token is the answer
(whose "yes"/"no" logits the model's score head reads). The three parts are tokenized separately, as
the model card does (the special tokens sit at their edges, so it equals tokenizing the whole text).
"""

from __future__ import annotations

from typing import Any

QWEN3_YES_NO = "qwen3_yes_no"  # the model's ``rerank_format`` (models/llama_pooled.py)
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
)
_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def yes_no_prompt_ids(tokenizer: Any, query: str, document: str, instruction: str | None) -> list[int]:
    """The token ids of Qwen3-Reranker's prompt for ``(query, document)``; ``instruction`` defaults to
    the model card's web-search one."""
    body = f"<Instruct>: {instruction or DEFAULT_INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"
    return [
        int(t)
        for part in (_PREFIX, body, _SUFFIX)
        for t in tokenizer(part, add_special_tokens=False)["input_ids"]
    ]
