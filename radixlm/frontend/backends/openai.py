"""``OpenAI``: any OpenAI-compatible server (OpenAI itself, vLLM, radixlm's ``/v1``).

Chat models get the conversation as ``messages`` (a ``gen`` must sit in an open assistant turn);
completion models get the program's text. Features the API cannot serve raise
``UnsupportedFeatureError`` naming them: ``regex`` and typed generation (``dtype``), prompt
scoring (so ``select`` picks the choice that best matches a greedy completion), images.

``token_usage`` sums the tokens of every request; ``@function(num_api_spec_tokens=N)`` fills several
gens from one request (``radixlm.frontend.api_speculation``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.backends.token_usage import TokenUsage
from radixlm.frontend.chat_template import ChatTemplate, guess_chat_template
from radixlm.frontend.errors import UnsupportedFeatureError
from radixlm.program.context import Context, as_text
from radixlm.program.protocols import Request

# /generate sampling params -> OpenAI request fields (the rest go in ``extra_body`` when set).
_STANDARD = {
    "max_new_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "n": "n",
    "stop": "stop",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "seed": "seed",
}
_NEUTRAL = {
    "top_k": -1,
    "min_p": 0.0,
    "ignore_eos": False,
    "min_new_tokens": 0,
    "repetition_penalty": 1.0,
    "stop_token_ids": [],
}

#: Models SGLang's backend treats as completion models when ``is_chat_model`` is not given.
INSTRUCT_MODELS = ("gpt-3.5-turbo-instruct",)


class OpenAI(Backend):
    """``OpenAI("gpt-4o-mini")`` or ``OpenAI("smollm2-135m", base_url="http://127.0.0.1:30000/v1",
    api_key="none")``. ``is_chat_model`` defaults to True except for SGLang's instruct (completion)
    models."""

    name = "OpenAI"
    api_speculation = True

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        is_chat_model: bool | None = None,
        chat_template: str | ChatTemplate | None = None,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(chat_template if chat_template is not None else guess_chat_template(model_name))
        import openai

        self.model_name = model_name
        self.is_chat_model = model_name not in INSTRUCT_MODELS if is_chat_model is None else is_chat_model
        self.chat_mode = self.is_chat_model
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", **client_kwargs)
        #: Prompt and completion tokens of every request so far (SGLang's ``token_usage``).
        self.token_usage = TokenUsage()

    def check_request(self, req: Request) -> None:
        sampling = req.get("sampling_params", {})
        for feature in ("regex", "dtype"):
            if sampling.get(feature) is not None:
                raise UnsupportedFeatureError(
                    self.name,
                    feature,
                    "use RuntimeEndpoint or Runtime for constrained generation with a regex or a type",
                )
        if req.get("logprob_start_len", -1) >= 0 or sampling.get("max_new_tokens") == 0:
            raise UnsupportedFeatureError(self.name, "prompt logprobs")

    def _body(self, req: Request) -> dict[str, Any]:
        sampling = dict(req.get("sampling_params", {}))
        body: dict[str, Any] = {"model": self.model_name}
        extra: dict[str, Any] = {}
        for key, val in sampling.items():
            if key in _STANDARD:
                body[_STANDARD[key]] = val
            elif key == "json_schema":
                schema = json.loads(val) if isinstance(val, str) else val
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": schema},
                }
            elif _NEUTRAL.get(key, object()) != val:
                extra[key] = val
        if req.get("return_logprob"):
            body["logprobs"] = True if self.is_chat_model else max(1, req.get("top_logprobs_num") or 1)
            if self.is_chat_model and req.get("top_logprobs_num"):
                body["top_logprobs"] = req["top_logprobs_num"]
        if extra:
            body["extra_body"] = extra
        if self.is_chat_model:
            messages = req.get("messages") or []
            if not messages or messages[-1]["role"] != "assistant" or messages[-1]["content"]:
                raise UnsupportedFeatureError(
                    self.name,
                    "gen outside an empty assistant turn",
                    "with a chat model, write s += sgl.assistant(sgl.gen(...)), or speculate the "
                    "whole turn with @function(num_api_spec_tokens=...)",
                )
            body["messages"] = messages[:-1]
        else:
            body["prompt"] = as_text(req["input_segments"], self.name)
        return body

    def generate(self, req: Request) -> Any:
        body = self._body(req)
        if self.is_chat_model:
            resp = self.client.chat.completions.create(**body)
            texts = [c.message.content or "" for c in resp.choices]
        else:
            resp = self.client.completions.create(**body)
            texts = [c.text for c in resp.choices]
        self.token_usage.add(resp.usage)
        outs = [{"text": t, "meta_info": self._meta(resp, c)} for t, c in zip(texts, resp.choices)]
        return outs[0] if len(outs) == 1 else outs

    def generate_stream(self, req: Request) -> Iterator[dict[str, Any]]:
        body = self._body(req)
        create = self.client.chat.completions.create if self.is_chat_model else self.client.completions.create
        text = ""
        finish = None
        for chunk in create(**body, stream=True, stream_options={"include_usage": True}):
            self.token_usage.add(getattr(chunk, "usage", None))
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            text += (choice.delta.content or "") if self.is_chat_model else (choice.text or "")
            finish = choice.finish_reason or finish
            yield {"text": text, "meta_info": {"id": chunk.id, "finish_reason": finish}}

    def select(
        self, context: Context, choices: list[str], method: Any, messages: list | None = None
    ) -> tuple[str, dict]:
        """No prompt scoring over this API: see ``select_by_greedy_prefix``."""
        return select_by_greedy_prefix(self, context, choices, messages)

    def cache_prefix(self, context: Context) -> None:
        """Remote APIs manage their own caches."""

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model_name, "chat_template": None}

    def _meta(self, resp: Any, choice: Any) -> dict[str, Any]:
        usage = getattr(resp, "usage", None)
        return {
            "id": resp.id,
            "finish_reason": {"type": choice.finish_reason},
            "prompt_tokens": getattr(usage, "prompt_tokens", None),
            "completion_tokens": getattr(usage, "completion_tokens", None),
        }


def select_by_greedy_prefix(
    backend: Backend, context: Context, choices: list[str], messages: list | None
) -> tuple[str, dict]:
    """``select`` for APIs that cannot score a prompt: generate greedily and take the choice sharing
    the longest prefix with the output (ties: the first)."""
    longest = max(len(c) for c in choices)
    req = {
        "input_segments": list(context),
        "messages": (messages or []) + [{"role": "assistant", "content": ""}],
        "sampling_params": {"max_new_tokens": max(1, longest // 2 + 4), "temperature": 0},
    }
    if messages and messages[-1]["role"] == "assistant":
        req["messages"] = messages
    out = backend.generate(req)
    text = (out[0] if isinstance(out, list) else out)["text"].strip()
    scores = [_common_prefix(text, c.strip()) for c in choices]
    best = max(range(len(choices)), key=lambda i: scores[i])
    return choices[best], {"choices": choices, "completion": text, "match_lengths": scores}


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
