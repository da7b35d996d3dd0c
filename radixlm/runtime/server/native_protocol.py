"""Validation of the native ``POST /generate`` body (SGLang's ``GenerateReqInput``).

Beyond SGLang's fields, for the language's programs:

- ``input_segments`` (instead of ``text`` or ``input_ids``): a prompt as a list of segments
  ``{"text": "..."}`` or ``{"ids": [token ids]}`` (a list of such lists for a batch). Each text
  segment is tokenized on its own without special tokens and the segments' ids are concatenated,
  so a program continues exactly the tokens the model generated.
Pins (server-internal: only ``/program`` sets them on the requests of its own graph; a client's
``/generate`` that sends them gets a 400, since one client could otherwise hold or release another's
cached context):

- ``pin_children`` (an integer, one per prompt for a batch; needs ``n == 1``): when the request
  finishes, its context stays locked in the radix cache until that many requests naming its
  ``rid`` in their ``unpin_rids`` are admitted (or the pin times out).
- ``unpin_rids`` (a list of rids; for a batch, one list or null per prompt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixlm.runtime.multimodal.request_images import per_prompt_images
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.priority_field import parse_priority
from radixlm.runtime.server.tokenizer_manager import GenerateItem

PER_ITEM_FIELDS = (
    "sampling_params",
    "lora_path",
    "rid",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "pin_children",
    "custom_logit_processor",
)
PROMPT_FIELDS = ("text", "input_ids", "input_segments")
FIELDS = {
    *PROMPT_FIELDS,
    "stream",
    "return_text_in_logprobs",
    "unpin_rids",
    "session_params",
    "priority",
    "image_data",  # SGLang's shape: per prompt an image (data URL, base64, path, URL) or a list
    *PER_ITEM_FIELDS,
}
# SGLang fields we accept only when unset (null, false or empty): anything else is a clear 400.
UNSUPPORTED_IF_SET = {
    "audio_data",
    "video_data",
    "modalities",
    "return_hidden_states",
    "data_parallel_rank",
    "log_metrics",
    "input_embeds",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
}


@dataclass
class GenerateRequest:
    """A parsed ``/generate`` body: its prompts and how to answer."""

    items: list[GenerateItem]
    is_batch: bool
    stream: bool
    return_text_in_logprobs: bool
    session_params: dict[str, Any] | None = None  # a session turn (see ``runtime/server/sessions.py``)


PIN_FIELDS = ("pin_children", "unpin_rids")


def parse_generate(body: Any, pins_allowed: bool = False) -> GenerateRequest:
    """Validate a ``/generate`` body; raises ``ApiError`` (400) naming the first problem.
    ``pins_allowed``: the body comes from ``/program``, which owns the pins it names."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    pinned = [k for k in PIN_FIELDS if not is_unset(body.get(k))]
    if pinned and not pins_allowed:
        raise ApiError(
            f"{', '.join(pinned)}: set by the server for /program requests only, not by clients",
            param=pinned[0],
        )
    unknown = sorted(k for k in body if k not in FIELDS and k not in UNSUPPORTED_IF_SET)
    if unknown:
        raise ApiError(f"unknown field(s): {', '.join(unknown)}")
    unsupported = sorted(k for k in UNSUPPORTED_IF_SET if not is_unset(body.get(k)))
    if unsupported:
        raise ApiError(f"not supported by this server: {', '.join(unsupported)}")
    prompts, is_batch = _prompts(body)
    priority = parse_priority(body.get("priority"))
    n = len(prompts)
    try:
        images = per_prompt_images(
            None if is_unset(body.get("image_data")) else body["image_data"], n, not is_batch
        )
    except ValueError as e:
        raise ApiError(str(e), param="image_data") from e
    items = []
    for i, (key, prompt) in enumerate(prompts):
        values = {name: _per_item(body, name, i, n, is_batch) for name in PER_ITEM_FIELDS}
        sampling_params = _sampling_params(values["sampling_params"], values["custom_logit_processor"])
        pin_children = _int(values["pin_children"], "pin_children", default=0, minimum=0)
        items.append(
            GenerateItem(
                sampling_params=sampling_params,
                text=prompt if key == "text" else None,
                input_ids=prompt if key == "input_ids" else None,
                input_segments=prompt if key == "input_segments" else None,
                image_data=images[i],
                rid=_optional(values["rid"], str, "rid"),
                return_logprob=bool(_optional(values["return_logprob"], bool, "return_logprob") or False),
                logprob_start_len=_int(
                    values["logprob_start_len"], "logprob_start_len", default=-1, minimum=-1
                ),
                top_logprobs_num=_int(values["top_logprobs_num"], "top_logprobs_num", default=0, minimum=0),
                pin_children=pin_children,
                unpin_rids=_unpin_rids(body.get("unpin_rids"), i, n, is_batch),
                priority=priority,
                lora_name=_optional(values["lora_path"], str, "lora_path"),
            )
        )
    stream = _optional(body.get("stream"), bool, "stream") or False
    text_in_logprobs = _first(body.get("return_text_in_logprobs"))
    text_in_logprobs = _optional(text_in_logprobs, bool, "return_text_in_logprobs")
    session_params = body.get("session_params")
    if session_params is not None and (is_batch or not isinstance(session_params, dict)):
        raise ApiError("session_params must be an object, for a single prompt", param="session_params")
    return GenerateRequest(items, is_batch, stream, bool(text_in_logprobs), session_params)


def is_unset(value: Any) -> bool:
    """null, false or empty: how SGLang's client sends a field it does not use (0 is not unset)."""
    return value is None or value is False or (isinstance(value, (str, list, dict)) and not value)


def _prompts(body: dict[str, Any]) -> tuple[list[tuple[str, Any]], bool]:
    given = [name for name in PROMPT_FIELDS if body.get(name) is not None]
    if len(given) != 1:
        raise ApiError("exactly one of text and input_ids (or input_segments) must be given")
    text, input_ids, segments = body.get("text"), body.get("input_ids"), body.get("input_segments")
    if segments is not None:
        if isinstance(segments, list) and segments and all(isinstance(x, list) for x in segments):
            return [
                ("input_segments", _segments(x, f"input_segments[{i}]")) for i, x in enumerate(segments)
            ], True
        return [("input_segments", _segments(segments, "input_segments"))], False
    if text is not None:
        if isinstance(text, str):
            return [("text", text)], False
        if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            return [("text", t) for t in text], True
        raise ApiError("text must be a string or a non-empty list of strings", param="text")
    if _is_ids(input_ids):
        return [("input_ids", input_ids)], False
    if isinstance(input_ids, list) and input_ids and all(_is_ids(x) for x in input_ids):
        return [("input_ids", x) for x in input_ids], True
    raise ApiError(
        "input_ids must be a list of token ids or a non-empty list of such lists", param="input_ids"
    )


def _segments(value: Any, where: str) -> list[dict[str, Any]]:
    """A prompt given as segments: a non-empty list of ``{"text": str}`` / ``{"ids": [int]}``."""
    if not isinstance(value, list) or not value:
        raise ApiError(
            f'{where} must be a non-empty list of segments {{"text": ...}} or {{"ids": [...]}}',
            param="input_segments",
        )
    for j, seg in enumerate(value):
        ok = (
            isinstance(seg, dict)
            and len(seg) == 1
            and (isinstance(seg.get("text"), str) or ("ids" in seg and _is_ids(seg["ids"])))
        )
        if not ok:
            raise ApiError(
                f'{where}[{j}] must be {{"text": string}} or {{"ids": [token ids]}}, not {seg!r:.80}',
                param="input_segments",
            )
    return value


def _unpin_rids(value: Any, i: int, n: int, is_batch: bool) -> list[str]:
    """A list of rids; for a batch, one list (or null) per prompt."""
    if value is None:
        return []
    if is_batch:
        if not isinstance(value, list) or len(value) != n:
            raise ApiError(
                f"for a batch, unpin_rids must hold one list of rids (or null) per prompt ({n})",
                param="unpin_rids",
            )
        value = value[i] if value[i] is not None else []
    if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
        raise ApiError("unpin_rids must be a list of rids (strings)", param="unpin_rids")
    return value


def _is_ids(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in x)


def _per_item(body: dict[str, Any], name: str, i: int, n: int, is_batch: bool) -> Any:
    """A field given once for all prompts, or as a list with one value per prompt."""
    value = body.get(name)
    if not isinstance(value, list):
        return value
    if not is_batch and len(value) == 1:  # SGLang's client sends e.g. [null] for a single prompt
        return value[0]
    if len(value) != n:
        raise ApiError(f"{name} has {len(value)} values for {n} prompts", param=name)
    return value[i]


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _sampling_params(value: Any, processor: Any) -> SamplingParams:
    """``sampling_params`` with the request's top-level ``custom_logit_processor`` (SGLang's place)."""
    if value is not None and not isinstance(value, dict):
        raise ApiError("sampling_params must be an object", param="sampling_params")
    if processor is not None:
        value = {**(value or {}), "custom_logit_processor": processor}
    try:
        return SamplingParams.from_dict(value)
    except (ValueError, TypeError) as e:
        raise ApiError(str(e), param="sampling_params") from e


def _optional(value: Any, kind: type, name: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise ApiError(f"{name} must be a {kind.__name__}", param=name)
    return value


def _int(value: Any, name: str, default: int, minimum: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ApiError(f"{name} must be an integer >= {minimum}", param=name)
    return value
