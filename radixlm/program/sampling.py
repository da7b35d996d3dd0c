"""Sampling options: their names, the run-level defaults, and how a ``gen``'s own options merge in.

A ``gen`` takes SGLang's option names (``max_tokens``, ``min_tokens``, ...); requests use the
native ``/generate`` names (``max_new_tokens``, ``min_new_tokens``, ...). Run-level defaults are
``run()``'s keywords, already in request names.
"""

from __future__ import annotations

from typing import Any

#: Options that go into ``sampling_params`` of a /generate request.
SAMPLING_KEYS = (
    "max_new_tokens",
    "min_new_tokens",
    "n",
    "stop",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "ignore_eos",
    "dtype",
    "regex",
    "json_schema",
    "stop_regex",
)
#: Options that are request-level fields of a /generate request.
LOGPROB_KEYS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")

#: Run-level sampling defaults (SGLang's ``run()`` keywords) and their values.
RUN_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128,
    "n": 1,
    "stop": None,
    "stop_token_ids": None,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "ignore_eos": False,
    "return_logprob": None,
    "logprob_start_len": None,
    "top_logprobs_num": None,
    "return_text_in_logprobs": None,
}

_GEN_TO_REQUEST = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}


def run_defaults(values: dict[str, Any], strict: bool = False) -> dict[str, Any]:
    """The run-level defaults with ``values`` applied; options left ``None`` are dropped. With
    ``strict``, names that are not run-level defaults raise ``TypeError``."""
    if strict:
        unknown = sorted(set(values) - set(RUN_DEFAULTS))
        if unknown:
            raise TypeError(f"unknown sampling default(s): {', '.join(unknown)}")
    merged = {k: values.get(k, v) for k, v in RUN_DEFAULTS.items()}
    return {k: v for k, v in merged.items() if v is not None}


def split_run_defaults(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(run-level defaults, the other keyword arguments)`` from a mixed ``**kwargs``."""
    sampling = {k: v for k, v in kwargs.items() if k in RUN_DEFAULTS}
    rest = {k: v for k, v in kwargs.items() if k not in RUN_DEFAULTS}
    return run_defaults(sampling), rest


def sampling_options(defaults: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Merge run-level defaults and a gen's own options (the gen's win) into request options."""
    merged = {**defaults}
    for key, val in params.items():
        if val is not None:
            merged[_GEN_TO_REQUEST.get(key, key)] = val
    return merged
