"""A deterministic in-memory backend for unit tests of the language's plumbing.

Tokens are words with their leading space (``" yes"`` is one token, ``"yes"`` another) so select's
token-boundary handling is exercised; logprobs are a fixed hash of (previous token, token).
Completions are canned (by prompt suffix) or a hash-determined sequence of words. Prompts come as
``input_segments``; output ids are the pieces' ids (a table maps them back to text).
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Iterator
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.program.context import Context, is_batch
from radixlm.program.graph_executor import execute_program

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a test model.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_TOKEN = re.compile(r" ?\w+| ?[^\w\s]|\s")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


_PIECES: dict[int, str] = {}


def token_id(piece: str) -> int:
    tid = zlib.crc32(piece.encode()) % 50000
    _PIECES[tid] = piece
    return tid


def prompt_text(context: Context) -> str:
    """A context's text: ids segments decoded through the pieces seen so far."""
    return "".join(
        seg["text"] if "text" in seg else "".join(_PIECES[i] for i in seg["ids"]) for seg in context
    )


def prompts(req: dict[str, Any]) -> list[str]:
    """The prompt texts of a recorded request (one per prompt of a batch)."""
    segs = req["input_segments"]
    return [prompt_text(c) for c in segs] if is_batch(segs) else [prompt_text(segs)]


def logprob(prev: str, piece: str) -> float:
    return -(zlib.crc32(f"{prev}|{piece}".encode()) % 1000) / 200.0


class FakeBackend(Backend):
    name = "Fake"
    supports_graphs = True

    def __init__(
        self,
        canned: dict[str, str] | None = None,
        fail_on: str | None = None,
        chat_template: Any = None,
        graphs: bool = True,
    ) -> None:
        super().__init__(chat_template)
        self.canned = canned or {}
        self.fail_on = fail_on
        self.requests: list[dict[str, Any]] = []
        self.graph_runs = 0
        self.supports_graphs = graphs

    def complete(self, prompt: str, sp: dict[str, Any]) -> str:
        if self.fail_on and self.fail_on in prompt:
            raise RuntimeError(f"fake failure on {self.fail_on!r}")
        for suffix, text in self.canned.items():
            if prompt.endswith(suffix):
                out = text
                break
        else:
            seed = zlib.crc32(prompt.encode())
            out = "".join(f" w{(seed >> (i % 24)) % 97}" for i in range(40))
        if sp.get("dtype") == "int":
            out = str(zlib.crc32(prompt.encode()) % 1000)
        pieces = tokenize(out)[: sp.get("max_new_tokens", 128)]
        return "".join(pieces)

    def _one(self, prompt: str, req: dict[str, Any]) -> dict[str, Any]:
        sp = req.get("sampling_params", {})
        text = "" if sp.get("max_new_tokens") == 0 else self.complete(prompt, sp)
        output_ids = [token_id(p) for p in tokenize(text)]
        reason: dict[str, Any] = {"type": "length"}
        for stop in [sp["stop"]] if isinstance(sp.get("stop"), str) else sp.get("stop") or []:
            if stop in text:
                text, reason = text[: text.index(stop)], {"type": "stop", "matched": stop}
        pieces = tokenize(prompt)
        meta: dict[str, Any] = {
            "prompt_tokens": len(pieces),
            "completion_tokens": len(output_ids),
            "cached_tokens": 0,
            "finish_reason": reason,
        }
        if req.get("return_logprob"):
            start = max(req.get("logprob_start_len", 0), 0)
            meta["input_token_logprobs"] = [
                [None if i == 0 else logprob(pieces[i - 1], p), token_id(p), p]
                for i, p in enumerate(pieces)
                if i >= start
            ]
        return {"text": text, "output_ids": output_ids, "meta_info": meta}

    def generate(self, req: dict[str, Any]) -> Any:
        self.requests.append(req)
        texts = prompts(req)
        if is_batch(req["input_segments"]):
            return [self._one(t, req) for t in texts]
        n = req.get("sampling_params", {}).get("n", 1)
        if n > 1:
            return [self._one(texts[0], req) for _ in range(n)]
        return self._one(texts[0], req)

    async def agenerate(self, req: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        return self.generate(req)

    def generate_stream(self, req: dict[str, Any]) -> Iterator[dict[str, Any]]:
        final = self.generate(req)
        pieces = tokenize(final["text"])
        for i in range(1, len(pieces) + 1):
            yield {"text": "".join(pieces[:i]), "meta_info": final["meta_info"]}
        if not pieces:
            yield final

    def run_graph(self, graph: dict[str, Any]) -> dict[str, Any] | None:
        if not self.supports_graphs:
            return None
        self.graph_runs += 1
        return asyncio.run(execute_program(graph, self.agenerate))

    def model_info(self) -> dict[str, Any]:
        return {"model_path": "fake", "chat_template": CHATML}

    def get_server_info(self) -> dict[str, Any]:
        return {"requests": len(self.requests)}

    def flush_cache(self) -> Any:
        return True
