"""Request bodies of the embedding server's routes (strict pydantic models; the OpenAPI document
publishes them): OpenAI's ``/v1/embeddings``, SGLang's ``/encode``, ``/v1/rerank`` and ``/classify``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# A string, strings, token ids, or lists of token ids (OpenAI's embeddings ``input``).
EncodeInput = str | list[str] | list[int] | list[list[int]]


class EmbeddingRequest(BaseModel):
    """OpenAI ``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="allow")

    input: EncodeInput
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class EncodeRequest(BaseModel):
    """SGLang ``POST /encode``: ``text`` or ``input_ids``."""

    model_config = ConfigDict(extra="allow")

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    dimensions: int | None = Field(default=None, ge=1)
    rid: str | list[str] | None = None


class RerankRequest(BaseModel):
    """``POST /v1/rerank`` (SGLang's, Cohere's and Jina's fields)."""

    model_config = ConfigDict(extra="allow")

    query: str
    documents: list[str]
    model: str | None = None
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = True
    instruction: str | None = None  # a decoder reranker's task (Qwen3-Reranker's <Instruct>)


class ClassifyRequest(BaseModel):
    """``POST /classify`` (vLLM's shape): a classifier's or reward model's scores."""

    model_config = ConfigDict(extra="allow")

    input: EncodeInput
    model: str | None = None
