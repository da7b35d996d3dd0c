"""``LiteLLM``: any model LiteLLM reaches (``"gpt-4o"``, ``"anthropic/..."``, ``"vertex_ai/..."``,
``"openai/<name>"`` with ``base_url`` for an OpenAI-compatible server such as radixlm's ``/v1``).

As SGLang's backend: the program's finished turns are the ``messages`` (a program without roles is sent
as one user message), ``gen`` maps to ``max_tokens``, ``stop``, ``temperature``, ``top_p`` and the two
penalties, and ``stream=True`` streams. Options LiteLLM's ``completion`` does not take here (regex,
typed gens, ``n > 1``, logprobs, text already written in the assistant turn) raise
``UnsupportedFeatureError`` instead of being dropped; ``select`` generates greedily and takes the choice
sharing the longest prefix with the output, as ``OpenAI`` does for chat models.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.backends.openai import select_by_greedy_prefix
from radixlm.frontend.backends.token_usage import TokenUsage
from radixlm.frontend.chat_template import ChatTemplate, guess_chat_template
from radixlm.frontend.errors import UnsupportedFeatureError
from radixlm.program.context import Context, as_text
from radixlm.program.protocols import Request

_FIELDS = {
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "temperature": "temperature",
    "top_p": "top_p",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
}
_NEUTRAL: dict[str, Any] = {
    "n": 1,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "ignore_eos": False,
}


class LiteLLM(Backend):
    """SGLang's constructor: ``LiteLLM(model_name, chat_template=None, api_key=None, organization=None,
    base_url=None, timeout=600, max_retries=None, default_headers=None)``."""

    name = "LiteLLM"
    chat_mode = True

    def __init__(
        self,
        model_name: str,
        chat_template: str | ChatTemplate | None = None,
        api_key: str | None = None,
        organization: str | None = None,
        base_url: str | None = None,
        timeout: float | None = 600,
        max_retries: int | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(chat_template if chat_template is not None else guess_chat_template(model_name))
        import litellm

        self._litellm = litellm
        self.model_name = model_name
        self.client_params: dict[str, Any] = {
            "api_key": api_key,
            "organization": organization,
            "base_url": base_url,
            "timeout": timeout,
            "max_retries": litellm.num_retries if max_retries is None else max_retries,
            "default_headers": default_headers,
        }
        #: Prompt and completion tokens of every request so far (as ``OpenAI.token_usage``).
        self.token_usage = TokenUsage()

    def check_request(self, req: Request) -> None:
        sampling = req.get("sampling_params", {})
        for key in sampling:
            if key not in _FIELDS and sampling[key] != _NEUTRAL.get(key, object()):
                raise UnsupportedFeatureError(self.name, key, "use RuntimeEndpoint or Runtime for it")
        if req.get("return_logprob") or req.get("logprob_start_len", -1) >= 0:
            raise UnsupportedFeatureError(self.name, "logprobs")

    def _kwargs(self, req: Request) -> dict[str, Any]:
        sampling = req.get("sampling_params", {})
        messages = list(req.get("messages") or [])
        if messages and messages[-1]["role"] == "assistant":
            if messages[-1]["content"]:
                raise UnsupportedFeatureError(
                    self.name,
                    "gen after text in the assistant turn",
                    "write s += sgl.assistant(sgl.gen(...))",
                )
            messages.pop()
        if not messages:
            messages = [{"role": "user", "content": as_text(req["input_segments"], self.name)}]
        fields = {_FIELDS[k]: v for k, v in sampling.items() if k in _FIELDS and v is not None}
        return {"model": self.model_name, "messages": messages, **self.client_params, **fields}

    def generate(self, req: Request) -> Any:
        resp = self._litellm.completion(**self._kwargs(req))
        self.token_usage.add(getattr(resp, "usage", None))
        choice = resp.choices[0]
        meta = {"id": resp.id, "finish_reason": {"type": choice.finish_reason}}
        return {"text": choice.message.content or "", "meta_info": meta}

    def generate_stream(self, req: Request) -> Iterator[dict[str, Any]]:
        kwargs = {**self._kwargs(req), "stream": True, "stream_options": {"include_usage": True}}
        text, finish = "", None
        for chunk in self._litellm.completion(**kwargs):
            self.token_usage.add(getattr(chunk, "usage", None))
            if not chunk.choices:
                continue
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
            yield {"text": text, "meta_info": {"id": chunk.id, "finish_reason": {"type": finish}}}

    def select(
        self, context: Context, choices: list[str], method: Any, messages: list | None = None
    ) -> tuple[str, dict]:
        return select_by_greedy_prefix(self, context, choices, messages)

    def cache_prefix(self, context: Context) -> None:
        """Remote APIs manage their own caches."""

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model_name, "chat_template": None}
