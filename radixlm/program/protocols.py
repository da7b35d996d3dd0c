"""What ``gen`` and ``select`` send to a runtime and how they read the answers, free of IO.

The interpreter (synchronous, threads) and the request-graph executor (asyncio, next to the
runtime) both run these same protocols, so both paths produce identical variables. A protocol is a
generator that yields /generate-style request dicts and receives their responses; ``drive`` and
``adrive`` run one against a synchronous or asynchronous ``generate`` callable.

Request dicts follow the native ``/generate`` API: ``input_segments`` (a context, see
``radixlm.program.context``, or a list of contexts for a batch), ``sampling_params``,
``return_logprob``, ``logprob_start_len``, ``top_logprobs_num``, ``return_text_in_logprobs``.
Responses are ``{"text", "output_ids", "meta_info"}`` (a list for a batch or ``n > 1``); logprob
entries are ``[logprob, token_id, text-or-None]``. Protocols return an ``Outcome``: the value, its
meta info and the segments it adds to the context (a gen's token ids, a select's choice text).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, NamedTuple, TypeVar

from radixlm.program.choices import METHODS, ChoicesSamplingMethod, greedy_matrix
from radixlm.program.context import Context, continuation, with_text
from radixlm.program.sampling import LOGPROB_KEYS, SAMPLING_KEYS

Request = dict[str, Any]


class Outcome(NamedTuple):
    """What one gen or select produced."""

    value: Any
    meta_info: dict[str, Any]
    continuation: Context  # appended to the context that continues after it


Protocol = Generator[Request, Any, Outcome]
T = TypeVar("T")

# Tokens before the prefix's end that are re-scored in select: a choice can merge with the last
# few characters of the prefix into one token (for example "...answer:" + "yes" -> ":yes").
BOUNDARY_SLACK = 4


def gen_request(context: Context, options: dict[str, Any]) -> Request:
    """The /generate request of one ``gen`` continuing ``context``."""
    sampling = {k: v for k, v in options.items() if k in SAMPLING_KEYS and v is not None}
    if isinstance(sampling.get("dtype"), type):
        sampling["dtype"] = sampling["dtype"].__name__
    if sampling.get("stop") == []:
        del sampling["stop"]
    if sampling.get("stop_token_ids") == []:
        del sampling["stop_token_ids"]
    req: Request = {"input_segments": list(context), "sampling_params": sampling}
    for key in LOGPROB_KEYS:
        if options.get(key) is not None:
            req[key] = options[key]
    return req


def gen_protocol(context: Context, options: dict[str, Any]) -> Protocol:
    """Generate once; the value is the text (a list of texts when ``n > 1``)."""
    resp = yield gen_request(context, options)
    return gen_outcome(resp, options)


def gen_outcome(resp: Any, options: dict[str, Any]) -> Outcome:
    """The outcome of a /generate response. Several samples (``n > 1``) give a list of texts and
    add nothing to the context."""
    if isinstance(resp, list) and len(resp) == 1:
        resp = resp[0]
    if isinstance(resp, list):
        return Outcome([r["text"] for r in resp], {"samples": [r.get("meta_info", {}) for r in resp]}, [])
    return Outcome(resp["text"], resp.get("meta_info", {}), continuation(resp, options))


def select_protocol(context: Context, choices: list[str], method: str) -> Protocol:
    """Score every choice as a continuation of ``context`` in one batched prefill-only request.

    1. Prefill the context alone (max_new_tokens 0): its token count ``P``; this also puts it in
       the radix cache so every choice below shares its KV.
    2. One batch: the context, and the context with each choice appended to its text, input
       logprobs from ``P - BOUNDARY_SLACK``. A choice's tokens are those after the longest run of
       token ids it shares with the context's own tokenization, so the first token of a choice is
       scored exactly as the model tokenizes the joined text (a choice with or without a leading
       space, or one that merges with the last characters of a trailing text segment; after a
       gen's token ids the choice is tokenized on its own).
    3. For ``unconditional_likelihood_normalized``: the choices alone, to normalize by.

    The chosen choice joins the context as text (merged into a trailing text segment, exactly as
    it was scored).
    """
    if not choices:
        raise ValueError("select needs at least one choice")
    decide = METHODS[method]
    first = yield {"input_segments": list(context), "sampling_params": {"max_new_tokens": 0}}
    prompt_tokens = _single(first)["meta_info"]["prompt_tokens"]
    start = max(prompt_tokens - BOUNDARY_SLACK, 0)
    batch = yield {
        "input_segments": [list(context)] + [with_text(context, c) for c in choices],
        "sampling_params": {"max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": start,
        "return_text_in_logprobs": True,
    }
    entries = [r["meta_info"]["input_token_logprobs"] for r in batch]
    prefix_ids = [e[1] for e in entries[0]]
    choice_entries = [_after_common_prefix(prefix_ids, e) for e in entries[1:]]
    cond = [[_lp(e) for e in es] for es in choice_entries]
    uncond: list[list[float]] | None = None
    uncond_entries = None
    if decide.requires_unconditional_logprobs:
        alone = yield {
            "input_segments": [[{"text": c}] for c in choices],
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
            "return_text_in_logprobs": True,
        }
        uncond_entries = [r["meta_info"]["input_token_logprobs"] for r in alone]
        uncond = [_align([_lp(e) for e in es], len(c)) for es, c in zip(uncond_entries, cond)]
    index, scores = decide.decide(cond, uncond)
    return Outcome(
        choices[index],
        _select_meta(choices, decide, cond, scores, batch[1:], choice_entries, uncond_entries, prompt_tokens),
        [{"text": choices[index]}],
    )


def _select_meta(
    choices: list[str],
    method: ChoicesSamplingMethod,
    cond: list[list[float]],
    scores: list[float],
    responses: list[dict[str, Any]],
    choice_entries: list[list[list[Any]]],
    uncond_entries: list[Any] | None,
    prompt_tokens: int,
) -> dict[str, Any]:
    """SGLang's select ``meta_info``: ``normalized_prompt_logprobs`` (each choice's mean token
    logprob), ``input_token_logprobs``, ``output_token_logprobs`` (the next-token entry after each
    choice), plus ``greedy_logprob_matrix`` or the unconditional fields for those methods."""
    meta: dict[str, Any] = {
        "choices": list(choices),
        "normalized_prompt_logprobs": [sum(c) / len(c) if c else float("-inf") for c in cond],
        "input_token_logprobs": choice_entries,
        "output_token_logprobs": [r["meta_info"].get("output_token_logprobs", []) for r in responses],
        "prefix_tokens": prompt_tokens,
    }
    if method.name == "greedy_token_selection":
        meta["greedy_logprob_matrix"] = greedy_matrix(cond)
    if method.requires_unconditional_logprobs:
        meta["unconditional_token_logprobs"] = uncond_entries
        meta["normalized_unconditional_prompt_logprobs"] = scores
    return meta


def _single(resp: Any) -> dict[str, Any]:
    return resp[0] if isinstance(resp, list) else resp


def _lp(entry: list[Any]) -> float:
    # NOTE: position 0 of a sequence has no logprob (None): nothing precedes it.
    return 0.0 if entry[0] is None else float(entry[0])


def _after_common_prefix(prefix_ids: list[int], entries: list[list[Any]]) -> list[list[Any]]:
    k = 0
    while k < len(prefix_ids) and k < len(entries) and entries[k][1] == prefix_ids[k]:
        k += 1
    if k == len(entries):  # an empty choice: nothing to score
        return []
    return entries[k:]


def _align(uncond: list[float], n: int) -> list[float]:
    """Right-align the unconditional logprobs with the ``n`` conditional ones (0 where missing)."""
    if len(uncond) >= n:
        return uncond[len(uncond) - n :]
    return [0.0] * (n - len(uncond)) + uncond


def drive(protocol: Generator[Any, Any, T], generate: Callable[[Any], Any]) -> T:
    """Run a protocol against a synchronous ``generate``: each yielded request is answered with
    ``generate(request)``; the protocol's return value is returned."""
    try:
        req = next(protocol)
        while True:
            req = protocol.send(generate(req))
    except StopIteration as done:
        return done.value


async def adrive(protocol: Generator[Any, Any, T], generate: Callable[[Any], Awaitable[Any]]) -> T:
    """``drive`` against an asynchronous ``generate``."""
    try:
        req = next(protocol)
        while True:
            req = protocol.send(await generate(req))
    except StopIteration as done:
        return done.value
