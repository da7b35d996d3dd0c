"""The language's public functions, with SGLang's names and parameters (the default backend's
setters live in ``radixlm.frontend.default_backend``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from radixlm.frontend.default_backend import resolve_backend
from radixlm.frontend.function import SglFunction
from radixlm.frontend.ir import (
    Expr,
    ExprLike,
    ExprList,
    Gen,
    Image,
    RoleBegin,
    RoleEnd,
    Select,
    SeparateReasoning,
    role,
)
from radixlm.frontend.media import sample_frames
from radixlm.program.choices import ChoicesSamplingMethod, method_name


def function(func: Callable[..., Any] | None = None, num_api_spec_tokens: int | None = None) -> Any:
    """Decorate a program ``def prog(s, ...)``; bare (``@function``) or with options."""
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens)
    return lambda f: SglFunction(f, num_api_spec_tokens=num_api_spec_tokens)


# ---- backends -------------------------------------------------------------------------------
def flush_cache(backend: Any | None = None, empty_cache: bool = False) -> Any:
    """Drop the runtime's prefix cache (with ``empty_cache``, also the device allocator's cache)."""
    target = resolve_backend(backend)
    # NOTE: backends written before empty_cache existed override flush_cache() without it.
    return target.flush_cache(empty_cache=True) if empty_cache else target.flush_cache()


def get_server_info(backend: Any | None = None) -> dict[str, Any]:
    """The runtime's configuration and statistics."""
    return resolve_backend(backend).get_server_info()


# ---- expressions ----------------------------------------------------------------------------
def gen(
    name: str | None = None,
    max_tokens: int | None = None,
    min_tokens: int | None = None,
    n: int | None = None,
    stop: str | list[str] | None = None,
    stop_token_ids: list[int] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    ignore_eos: bool | None = None,
    return_logprob: bool | None = None,
    logprob_start_len: int | None = None,
    top_logprobs_num: int | None = None,
    return_text_in_logprobs: bool | None = None,
    dtype: type | str | None = None,
    choices: list[str] | None = None,
    choices_method: ChoicesSamplingMethod | None = None,
    regex: str | None = None,
    json_schema: str | dict | None = None,
    stop_regex: str | list[str] | None = None,
) -> Expr:
    """Generate into variable ``name``. Unset options take the run's defaults. With ``choices``
    this is ``select``. ``regex``, ``json_schema`` and ``dtype`` (int, float, bool, str) constrain
    the output; the value is the generated text. ``stop_regex`` stops where a regular expression
    matches the output (the match is cut like a stop string)."""
    if choices:
        return select(name, choices, 0.0 if temperature is None else temperature, choices_method)
    if regex is not None:
        re.compile(regex)  # a bad pattern fails here, in the user's code
    for pattern in [stop_regex] if isinstance(stop_regex, str) else stop_regex or []:
        re.compile(pattern)
    if isinstance(dtype, type):
        dtype = dtype.__name__
    if dtype is not None and dtype not in ("int", "float", "bool", "str"):
        raise ValueError(f"dtype must be int, float, bool or str, not {dtype!r}")
    if isinstance(json_schema, dict):
        json_schema = json.dumps(json_schema)
    params = dict(
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        n=n,
        stop=stop,
        stop_token_ids=stop_token_ids,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty,
        ignore_eos=ignore_eos,
        return_logprob=return_logprob,
        logprob_start_len=logprob_start_len,
        top_logprobs_num=top_logprobs_num,
        return_text_in_logprobs=return_text_in_logprobs,
        dtype=dtype,
        regex=regex,
        json_schema=json_schema,
        stop_regex=stop_regex,
    )
    return Gen(name, {k: v for k, v in params.items() if v is not None})


def gen_int(name: str | None = None, **kwargs: Any) -> Expr:
    """``gen`` constrained to an integer."""
    return gen(name, dtype="int", **kwargs)


def gen_string(name: str | None = None, **kwargs: Any) -> Expr:
    """``gen`` constrained to a string value (the runtime's ``str`` type)."""
    return gen(name, dtype="str", **kwargs)


def select(
    name: str | None = None,
    choices: list[str] | None = None,
    temperature: float = 0.0,
    choices_method: ChoicesSamplingMethod | None = None,
) -> Expr:
    """Append the most likely of ``choices`` (scored in one batched prefill) and store it in ``name``."""
    if not choices:
        raise ValueError("select needs a non-empty list of choices")
    return Select(name, [str(c) for c in choices], temperature, method_name(choices_method))


def separate_reasoning(expr: Expr | None = None, model_type: str | None = None) -> Expr:
    """Generate ``expr`` (a ``gen``), then split its variable's thinking from its answer: the variable
    holds the answer and ``<name>_reasoning_content`` the thinking (``model_type``: ``deepseek-r1`` or
    ``qwen3``, as ``--reasoning-parser``). The program's text keeps the whole output."""
    from radixlm.program.reasoning import ReasoningParser

    parser = ReasoningParser(model_type or "")  # an unknown type fails here, in the user's code
    named = [
        leaf.output_var
        for leaf in (expr.flatten() if expr is not None else [])
        if isinstance(leaf, Gen) and leaf.output_var
    ]
    if expr is None or not named:
        raise ValueError("separate_reasoning needs a gen(...) with a variable name")
    return ExprList([expr, SeparateReasoning(named[-1], parser.name)])


def image(path_or_bytes: str | bytes) -> Expr:
    """An image input: a file path, raw bytes, or a data/http(s) URL (a text-only model refuses it
    at run time with a clear error). Backends: Runtime and RuntimeEndpoint."""
    return Image(path_or_bytes)


def video(path: str | list[Any], num_frames: int) -> Expr:
    """``num_frames`` frames sampled evenly from ``path`` (a directory of frame images or a list of
    frames; no video decoder is bundled), fed to the model as images."""
    return ExprList([Image(frame) for frame in sample_frames(path, num_frames)])


def system(expr: ExprLike | None = None) -> Expr:
    return role("system", expr)


def user(expr: ExprLike | None = None) -> Expr:
    return role("user", expr)


def assistant(expr: ExprLike | None = None) -> Expr:
    return role("assistant", expr)


def system_begin() -> Expr:
    return RoleBegin("system")


def system_end() -> Expr:
    return RoleEnd("system")


def user_begin() -> Expr:
    return RoleBegin("user")


def user_end() -> Expr:
    return RoleEnd("user")


def assistant_begin() -> Expr:
    return RoleBegin("assistant")


def assistant_end() -> Expr:
    return RoleEnd("assistant")
