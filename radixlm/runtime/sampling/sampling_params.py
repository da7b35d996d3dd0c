"""Per-request sampling parameters and their validation."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.sampling.param_rules import (
    BOOLEAN_PARAMS,
    DTYPES,
    LOGIT_BIAS_KEY,
    LOGIT_BIAS_MAX,
    NUMBER_RULES,
    NumberRule,
)

# NOTE: dividing logits by a smaller temperature overflows float32 or leaves only the argmax anyway
# (1e-300 gave NaN probabilities and token 0): such a temperature means greedy decoding.
GREEDY_TEMPERATURE = 1e-5
_BIAS = NumberRule(False, "", minimum=-LOGIT_BIAS_MAX, maximum=LOGIT_BIAS_MAX)


@dataclass
class SamplingParams:
    """What and how to generate. ``temperature`` 0 (or below ``GREEDY_TEMPERATURE``) means greedy.

    Constrained generation: at most one of ``regex``, ``json_schema`` (a JSON string), ``choices``
    (a list of strings), ``dtype`` (``int``, ``float``, ``bool``, ``str``), ``ebnf`` (GBNF or Lark) or
    ``structural_tag`` (JSON text or object: free text, a schema inside each tagged region).
    """

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    seed: int | None = None
    regex: str | None = None
    json_schema: str | None = None
    choices: list[str] | None = None
    dtype: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    no_stop_trim: bool = False
    # Stop when one of these regular expressions matches the output text (cut like a stop string).
    stop_regex: list[str] = field(default_factory=list)
    # Token id (an int or its decimal string, as JSON keys are) -> bias added to its logit.
    logit_bias: dict[Any, float] | None = None
    # SGLang's custom logit processor (``CustomLogitProcessor.to_str()``) and the parameters its
    # call gets for this request; served only with --enable-custom-logit-processor.
    custom_logit_processor: str | None = None
    custom_params: dict[str, Any] | None = None
    # False: this request never decodes speculatively (the server's --speculative-algorithm is on);
    # output is the same either way, this only trades its speed.
    speculative: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SamplingParams:
        """Build from a JSON-like dict; unknown keys raise ``ValueError`` naming them."""
        d = dict(d or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names)
        if unknown:
            raise ValueError(f"unknown sampling parameter(s): {', '.join(unknown)}")
        if isinstance(d.get("stop"), str):
            d["stop"] = [d["stop"]]
        if d.get("stop") is None:
            d.pop("stop", None)
        if isinstance(d.get("stop_regex"), str):
            d["stop_regex"] = [d["stop_regex"]]
        if d.get("stop_regex") is None:
            d.pop("stop_regex", None)
        if isinstance(d.get("stop_token_ids"), int):
            d["stop_token_ids"] = [d["stop_token_ids"]]
        if d.get("stop_token_ids") is None:
            d.pop("stop_token_ids", None)
        for name in ("json_schema", "structural_tag"):
            if isinstance(d.get(name), (dict, list, bool)):
                import json

                d[name] = json.dumps(d[name])
        params = cls(**d)
        params.validate()
        return params

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad parameter."""

        def bad(name: str, why: str) -> None:
            raise ValueError(f"invalid sampling parameter {name}={getattr(self, name)!r}: {why}")

        def is_int(x: Any) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        for name, rule in NUMBER_RULES.items():
            if not rule.accepts(getattr(self, name)):
                bad(name, rule.message)
        if self.min_new_tokens > self.max_new_tokens:
            bad("min_new_tokens", "must not exceed max_new_tokens")
        for name in BOOLEAN_PARAMS:
            if not isinstance(getattr(self, name), bool):
                bad(name, "must be true or false")
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            bad("stop", "must be a non-empty string or a list of non-empty strings")
        token_ids = self.stop_token_ids
        if not isinstance(token_ids, list) or not all(is_int(t) and t >= 0 for t in token_ids):
            bad("stop_token_ids", "must be a list of token ids")
        self._validate_stop_regex(bad)
        self._validate_logit_bias(bad)
        if self.seed is not None and not (is_int(self.seed) and -(2**63) <= self.seed < 2**64):
            bad("seed", "must be an integer in [-2**63, 2**64)")
        kinds = ("regex", "json_schema", "choices", "dtype", "ebnf", "structural_tag")
        constraints = [k for k in kinds if getattr(self, k) is not None]
        if len(constraints) > 1:
            raise ValueError(f"only one constraint may be given, got {', '.join(constraints)}")
        if self.regex is not None and not isinstance(self.regex, str):
            bad("regex", "must be a string")
        if self.json_schema is not None and not isinstance(self.json_schema, str):
            bad("json_schema", "must be a JSON string or object")
        choices = self.choices
        if choices is not None and (
            not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices)
        ):
            bad("choices", "must be a non-empty list of strings")
        for name in ("ebnf", "structural_tag"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                bad(name, "must be a string" if name == "ebnf" else "must be a JSON string or object")
        if self.custom_logit_processor is not None and not isinstance(self.custom_logit_processor, str):
            bad("custom_logit_processor", "must be the string CustomLogitProcessor.to_str() gives")
        if self.custom_params is not None and not isinstance(self.custom_params, dict):
            bad("custom_params", "must be an object")
        if self.dtype is not None and self.dtype not in DTYPES:
            bad("dtype", f"must be one of {', '.join(DTYPES)}")

    def _validate_stop_regex(self, bad: Any) -> None:
        from radixlm.runtime.sampling.stop_regex import MAX_STOP_REGEXES, compile_stop_regex

        patterns = self.stop_regex
        if not isinstance(patterns, list) or not all(isinstance(r, str) and r for r in patterns):
            bad("stop_regex", "must be a non-empty string or a list of non-empty strings")
        if len(patterns) > MAX_STOP_REGEXES:
            raise ValueError(f"{len(patterns)} stop_regex patterns, at most {MAX_STOP_REGEXES} allowed")
        for pattern in patterns:
            if compile_stop_regex(pattern).fullmatch(""):
                bad("stop_regex", f"{pattern!r} matches the empty string (it would stop at once)")

    def _validate_logit_bias(self, bad: Any) -> None:
        if self.logit_bias is None:
            return
        if not isinstance(self.logit_bias, dict):
            bad("logit_bias", "must be an object mapping token ids to biases")
        for key, value in self.logit_bias.items():
            token = key if isinstance(key, int) and not isinstance(key, bool) else None
            if isinstance(key, str) and LOGIT_BIAS_KEY.fullmatch(key):
                token = int(key)
            if token is None or token < 0:
                bad("logit_bias", f"key {key!r} is not a token id")
            if not _BIAS.accepts(value):
                bad("logit_bias", f"the bias of token {key} must be a number in [-100, 100]")

    def logit_bias_items(self) -> list[tuple[int, float]]:
        """``logit_bias`` as ``(token_id, bias)`` pairs (validated)."""
        return [(int(k), float(v)) for k, v in (self.logit_bias or {}).items()]

    @functools.cached_property
    def logit_bias_tensors(self) -> tuple[Any, Any] | None:
        """``(token ids, biases)`` as tensors, built once per request rather than once per decode step
        (the scheduler's sampler reads them); None without a bias."""
        items = self.logit_bias_items()
        if not items:
            return None
        import torch  # NOTE: only the scheduler gets here; the HTTP process never loads torch for this

        return (
            torch.tensor([t for t, _ in items], dtype=torch.long),
            torch.tensor([b for _, b in items], dtype=torch.float32),
        )

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def constraint(self) -> tuple[str, str] | None:
        """``(kind, text)`` of the grammar, or None when unconstrained."""
        if self.regex is not None:
            return ("regex", self.regex)
        if self.json_schema is not None:
            return ("json", self.json_schema)
        if self.choices is not None:
            import json

            return ("choices", json.dumps(self.choices))
        if self.dtype is not None:
            return ("dtype", self.dtype)
        if self.ebnf is not None:
            return ("ebnf", self.ebnf)
        if self.structural_tag is not None:
            return ("structural_tag", self.structural_tag)
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SamplingParamsLike = SamplingParams | dict | None


def as_sampling_params(p: SamplingParamsLike) -> SamplingParams:
    if isinstance(p, SamplingParams):
        p.validate()
        return p
    return SamplingParams.from_dict(p)
