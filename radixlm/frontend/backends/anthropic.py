"""``Anthropic``: a Messages API (Anthropic's, or radixlm's ``/v1/messages``) through the ``anthropic`` SDK.

As SGLang's backend: the program's finished turns are the ``messages`` (a leading ``system`` turn
becomes ``system``; a program without roles is sent as one user message), ``gen`` maps to
``max_tokens``, ``stop_sequences``, ``temperature``, ``top_p``, ``top_k``, and streaming uses the
SDK's stream. Unlike SGLang's, text already written in the open assistant turn is sent as Anthropic's
assistant prefill, ``json_schema`` goes out as ``output_config``, and options the API has no field
for (regex, typed gens, penalties, ``n > 1``, prompt logprobs) raise ``UnsupportedFeatureError``
instead of being dropped. ``select`` is refused: the API cannot score choices (SGLang's raises
``NotImplementedError``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.backends.token_usage import TokenUsage, counts
from radixlm.frontend.chat_template import ChatTemplate
from radixlm.frontend.errors import UnsupportedFeatureError
from radixlm.program.context import Context, as_text
from radixlm.program.protocols import Request

#: SGLang's ``claude`` template: how the program's text reads (the API receives messages).
CLAUDE = ChatTemplate(
    "claude", {"system": ("", ""), "user": ("\n\nHuman: ", ""), "assistant": ("\n\nAssistant:", "")}
)
# Options with no Messages API field, and the values that mean "not used".
_NEUTRAL: dict[str, Any] = {
    "n": 1,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "ignore_eos": False,
    "stop_token_ids": [],
}
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}


class Anthropic(Backend):
    """``Anthropic("claude-sonnet-4-5")`` (the key from ``ANTHROPIC_API_KEY``), or against radixlm:
    ``Anthropic("smollm2-135m", base_url="http://127.0.0.1:30000", api_key="none")``. Other
    arguments go to ``anthropic.Anthropic`` as in SGLang."""

    name = "Anthropic"
    chat_mode = True

    def __init__(self, model_name: str, *args: Any, **client_kwargs: Any) -> None:
        super().__init__(CLAUDE)
        import anthropic

        self.model_name = model_name
        self.client = anthropic.Anthropic(*args, **client_kwargs)
        #: Input and output tokens of every request so far (as ``OpenAI.token_usage``).
        self.token_usage = TokenUsage()

    def check_request(self, req: Request) -> None:
        sampling = req.get("sampling_params", {})
        for feature in ("regex", "dtype", "stop_regex"):
            if sampling.get(feature) is not None:
                raise UnsupportedFeatureError(self.name, feature, "use RuntimeEndpoint or Runtime for it")
        for key, neutral in _NEUTRAL.items():
            if sampling.get(key, neutral) not in (neutral, None):
                raise UnsupportedFeatureError(self.name, key, "the Messages API has no such field")
        if req.get("return_logprob") or req.get("logprob_start_len", -1) >= 0:
            raise UnsupportedFeatureError(self.name, "logprobs")
        if sampling.get("max_new_tokens") == 0:
            raise UnsupportedFeatureError(
                self.name, "max_tokens=0", "the Messages API generates at least one"
            )

    def _body(self, req: Request) -> dict[str, Any]:
        sampling = req.get("sampling_params", {})
        messages = [dict(m) for m in req.get("messages") or []]
        if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
            messages.pop()  # the open turn the gen fills
        system = messages.pop(0)["content"] if messages and messages[0]["role"] == "system" else None
        if not messages:
            messages = [{"role": "user", "content": as_text(req["input_segments"], self.name)}]
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": messages,
            "max_tokens": sampling.get("max_new_tokens", 128),
        }
        if system:
            body["system"] = system
        stop = sampling.get("stop")
        if stop:
            body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        if sampling.get("json_schema") is not None:
            schema = sampling["json_schema"]
            schema = json.loads(schema) if isinstance(schema, str) else schema
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        # NOTE: the SDK no longer lists these as arguments; the API still takes them.
        extra = {k: sampling[k] for k in ("temperature", "top_p") if sampling.get(k) is not None}
        if sampling.get("top_k", -1) not in (-1, 0, None):
            extra["top_k"] = sampling["top_k"]
        if extra:
            body["extra_body"] = extra
        return body

    def generate(self, req: Request) -> Any:
        resp = self.client.messages.create(**self._body(req))
        self.token_usage.add(resp.usage)
        text = "".join(block.text for block in resp.content if block.type == "text")
        return {"text": text, "meta_info": self._meta(resp)}

    def generate_stream(self, req: Request) -> Iterator[dict[str, Any]]:
        text = ""
        with self.client.messages.stream(**self._body(req)) as stream:
            for delta in stream.text_stream:
                text += delta
                yield {"text": text, "meta_info": {"id": stream.current_message_snapshot.id}}
            final = stream.get_final_message()
        self.token_usage.add(final.usage)
        yield {"text": text, "meta_info": self._meta(final)}

    def select(
        self, context: Context, choices: list[str], method: Any, messages: list | None = None
    ) -> tuple[str, dict]:
        raise UnsupportedFeatureError(
            self.name,
            "select",
            "the Messages API cannot score choices (SGLang's Anthropic backend has no select either); "
            "use RuntimeEndpoint or Runtime",
        )

    def cache_prefix(self, context: Context) -> None:
        """The API manages its own cache."""

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model_name, "chat_template": None}

    def _meta(self, resp: Any) -> dict[str, Any]:
        finish: dict[str, Any] = {"type": _STOP_REASONS.get(resp.stop_reason, resp.stop_reason)}
        if resp.stop_sequence is not None:
            finish["matched"] = resp.stop_sequence
        prompt, completion = counts(resp.usage)
        meta = {"id": resp.id, "finish_reason": finish}
        return {**meta, "prompt_tokens": prompt, "completion_tokens": completion}
