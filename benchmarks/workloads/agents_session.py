"""The agent loops of ``agents.py``: the task each loop gets, the call check both modes share,
and the session mode (the same loops over the native API with SGLang sessions).

Session mode, per loop: ``/open_session``, one ``/generate`` per turn with ``session_params``
``{"id", "rid"}`` (``rid`` the previous turn), ``/close_session`` at the end. How a turn's text is built:

- the server's own pieces render it: ``/get_model_info`` gives the chat template and tokenizer path the
  server uses, ``resolve_parser`` picks the tool-call parser the server picks (``--tool-call-parser
  auto``: hermes for SmolLM2's ChatML), and ``messages_for_template`` + the tokenizer's
  ``apply_chat_template`` render the conversation as ``plan_chat`` does for the OpenAI path (the tool
  prompt in the system message, calls in the parser's format, results as ``<tool_response>`` turns);
- turn 1 sends that rendering of [system + tools, user] whole (the OpenAI path's first prompt);
- a later turn sends only the new text: the chat template's text after the assistant's call (its
  end-of-turn, e.g. ``<|im_end|>\\n``, left out when the model itself ended with that token) plus the
  rendering of the tool result and the next generation prompt. The context before it is the previous
  turn's prompt ids plus the ids the model produced (the server keeps them), so the assistant's call is
  the model's own tokens, not a re-rendering of them as on the OpenAI path;
- a tool turn is generated under the regex the OpenAI path uses for ``tool_choice="required"`` without
  parallel calls (``forced_call_regex`` with the parser's wrapper), read with the same parser and
  validated with ``jsonschema``; the last turn (the text answer) is unconstrained, as under
  ``tool_choice="none"``, but unlike the OpenAI path it keeps the tool prompt (a session only appends).

Text is sent as ``input_segments`` (tokenized without special tokens, as the OpenAI path tokenizes its
templated prompt).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema

from radixlm.runtime.server.function_call.constraints import forced_call_regex
from radixlm.runtime.server.function_call.parsers import ToolCallParser
from radixlm.runtime.server.function_call.prompt import messages_for_template
from radixlm.runtime.server.function_call.protocol import FunctionDef
from radixlm.runtime.server.function_call.registry import resolve_parser
from tests.runtime.server.tool_schemas import SCHEMAS, tool

NAMES = list(SCHEMAS)


@dataclass
class LoopResult:
    calls: int = 0
    valid: int = 0
    prompt_tokens_later: int = 0  # prompt tokens of turns after the first
    cached_tokens_later: int = 0
    completed: bool = False
    errors: list[str] = field(default_factory=list)


def valid_call(name: str, arguments: str) -> bool:
    try:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        return True
    except (json.JSONDecodeError, jsonschema.ValidationError, KeyError):
        return False


def loop_task(i: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Loop ``i``'s two tools (OpenAI ``tools`` entries) and its first message."""
    names = [NAMES[i % len(NAMES)], NAMES[(i + 5) % len(NAMES)]]
    messages = [
        {
            "role": "user",
            "content": f"Task {i}: use {names[0].replace('_', ' ')} and then "
            f"{names[1].replace('_', ' ')}, then summarise.",
        }
    ]
    return [tool(n) for n in names], messages


def summarise(results: list[LoopResult], elapsed: float) -> dict[str, Any]:
    calls = sum(r.calls for r in results)
    prompt_later = sum(r.prompt_tokens_later for r in results)
    cached_later = sum(r.cached_tokens_later for r in results)
    completed = sum(r.completed for r in results)
    return {
        "seconds": round(elapsed, 1),
        "completed_loops": completed,
        "loops_per_minute": round(60 * completed / elapsed, 2),
        "tool_calls": calls,
        "valid_share": round(sum(r.valid for r in results) / calls, 4) if calls else None,
        "cache_hit_rate_after_first_turn": round(cached_later / prompt_later, 4) if prompt_later else None,
        "errors": [e for r in results for e in r.errors][:5],
    }


class Renderer:
    """The server's chat template, tokenizer and tool-call parser, to build a session turn's text."""

    def __init__(self, tokenizer: Any, template: str | None, parser: ToolCallParser) -> None:
        self.tokenizer, self.template, self.parser = tokenizer, template, parser

    @classmethod
    async def from_server(cls, client: httpx.AsyncClient) -> Renderer:
        from transformers import AutoTokenizer

        info = (await client.get("/get_model_info")).json()
        # the resolved files: ``tokenizer_path`` is the name the user gave (e.g. ``smollm2-135m``)
        path = info.get("local_tokenizer_path") or info["local_model_path"]
        tokenizer = AutoTokenizer.from_pretrained(path)
        template = info.get("chat_template")
        return cls(tokenizer, template, resolve_parser(None, template))

    def render(self, messages: list[dict[str, Any]], functions: list[FunctionDef], generation: bool) -> str:
        msgs, tools = messages_for_template(messages, functions, self.parser, self.template)
        return self.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=generation, chat_template=self.template, tools=tools
        )

    def next_text(
        self,
        messages: list[dict[str, Any]],
        functions: list[FunctionDef],
        call_text: str,
        ended_with: str | None,
    ) -> str:
        """The new text after an assistant call (``messages`` end with the call and its result)."""
        upto = self.render(messages[:-1], functions, generation=False)
        full = self.render(messages, functions, generation=True)
        at = upto.rfind(call_text)
        if at < 0 or not full.startswith(upto):
            raise ValueError(
                "the chat template does not render a call as the parser's text, or does not "
                "extend a conversation by appending: session mode cannot build its turns"
            )
        closing = upto[at + len(call_text) :]
        if ended_with and closing.startswith(ended_with):
            closing = closing[len(ended_with) :]
        return closing + full[len(upto) :]


async def _generate(
    client: httpx.AsyncClient, text: str, params: dict[str, Any], sid: str, rid: str, previous: str | None
) -> dict[str, Any]:
    r = await client.post(
        "/generate",
        json={
            "input_segments": [{"text": text}],
            "sampling_params": params,
            "rid": rid,
            "session_params": {"id": sid, "rid": previous},
        },
    )
    if r.status_code != 200:
        raise RuntimeError(f"/generate {r.status_code}: {r.text[:200]}")
    return r.json()


async def session_loop(client: httpx.AsyncClient, renderer: Renderer, i: int, tool_turns: int) -> LoopResult:
    out = LoopResult()
    r = await client.post("/open_session", json={})
    if r.status_code != 200:
        out.errors.append(f"loop {i}: /open_session {r.status_code}: {r.text[:200]}")
        return out
    sid = r.json()
    try:
        await _session_turns(client, renderer, i, tool_turns, sid, out)
    except (httpx.HTTPError, RuntimeError, ValueError) as e:
        out.errors.append(f"loop {i}: {e}")
    finally:
        await client.post("/close_session", json={"session_id": sid})
    return out


async def _session_turns(
    client: httpx.AsyncClient, renderer: Renderer, i: int, tool_turns: int, sid: str, out: LoopResult
) -> None:
    tools, messages = loop_task(i)
    functions = [FunctionDef(**t["function"]) for t in tools]
    parser = renderer.parser
    if parser.wrapper is None:
        raise ValueError(f"the {parser.name} format cannot be constrained")
    regex = forced_call_regex(functions, parser.wrapper, parallel=False)  # as tool_choice="required"
    text = renderer.render(messages, functions, generation=True)
    previous: str | None = None
    for turn in range(tool_turns + 1):
        final = turn == tool_turns
        params: dict[str, Any] = {"temperature": 0, "max_new_tokens": 48 if final else 160}
        if not final:
            params["regex"] = regex
        rid = f"{sid}-t{turn}"
        res = await _generate(client, text, params, sid, rid, previous)
        previous = rid
        meta = res["meta_info"]
        if turn > 0:
            out.prompt_tokens_later += meta["prompt_tokens"]
            out.cached_tokens_later += meta.get("cached_tokens") or 0
        if final:
            out.completed = isinstance(res.get("text"), str)
            return
        snap = parser.scan(res["text"], final=True)
        calls = [c for c in snap.calls if c.done][:1]
        if not calls:
            raise RuntimeError(
                f"turn {turn}: no tool call under the forced-call regex: {res['text'][:120]!r}"
            )
        call = calls[0]
        out.calls += 1
        ok = valid_call(call.name, call.arguments)
        out.valid += ok
        call_id = f"call_{i}_{turn}"
        function = {"name": call.name, "arguments": call.arguments}
        messages.append(
            {
                "role": "assistant",
                "content": snap.content.strip() or None,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )
        result = {"ok": True, "turn": turn} if ok else {"error": "invalid arguments"}
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
        try:  # the call as the template shows it (prompt.py: arguments as an object when they parse)
            arguments: Any = json.loads(call.arguments)
        except json.JSONDecodeError:
            arguments = call.arguments
        call_text = parser.render_all([(call.name, arguments)])
        matched = (meta.get("finish_reason") or {}).get("matched")
        ended = res["output_ids"][-1] if res.get("output_ids") else None
        ended_with = (
            renderer.tokenizer.decode([matched]) if isinstance(matched, int) and matched == ended else None
        )
        text = renderer.next_text(messages, functions, call_text, ended_with)


async def run_sessions(base_url: str, loops: int, tool_turns: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, timeout=1800) as client:
        renderer = await Renderer.from_server(client)
        start = time.perf_counter()
        results = await asyncio.gather(*(session_loop(client, renderer, i, tool_turns) for i in range(loops)))
        elapsed = time.perf_counter() - start
    return {
        "mode": "session",
        "loops": loops,
        "tool_turns": tool_turns,
        "tool_choice": "required",
        **summarise(list(results), elapsed),
    }
