"""The numeric ranges of the sampling parameters: one table that ``SamplingParams.validate`` checks
and that the HTTP API's OpenAPI document publishes (``params_schema.py``), so the two cannot differ.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# A ``logit_bias`` key: a token id as a JSON object key (a decimal string) or an int (Python callers).
LOGIT_BIAS_KEY = re.compile(r"[0-9]+")
LOGIT_BIAS_MAX = 100
MAX_INT64 = 2**63 - 1
MAX_EXACT_INT = 2**53  # larger ints are refused where a float is meant


@dataclass(frozen=True)
class NumberRule:
    """A number's type and range; ``also`` lists values allowed outside the range (``top_k`` -1)."""

    integer: bool
    message: str  # what the 400 says the value must be
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    also: tuple[int, ...] = ()

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if value in self.also:
            return True
        # NOTE: an int is exact at any size, but one past the float range overflows whatever turns it
        # into a float later (OverflowError, a 500): the float parameters, and int64 for the others.
        if isinstance(value, int) and abs(value) > (MAX_INT64 if self.integer else MAX_EXACT_INT):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.minimum is not None and (
            value <= self.minimum if self.exclusive_minimum else value < self.minimum
        ):
            return False
        return self.maximum is None or value <= self.maximum

    def json_schema(self) -> dict[str, Any]:
        """The same rule as JSON schema (OpenAPI 3.1 / draft 2020-12)."""
        ranged: dict[str, Any] = {"type": "integer" if self.integer else "number"}
        if self.minimum is not None:
            ranged["exclusiveMinimum" if self.exclusive_minimum else "minimum"] = self.minimum
        if self.maximum is not None:
            ranged["maximum"] = self.maximum
        if not self.also:
            return ranged
        return {"anyOf": [{"const": v} for v in self.also] + [ranged]}


NUMBER_RULES: dict[str, NumberRule] = {
    "max_new_tokens": NumberRule(True, "must be an integer >= 0", minimum=0),
    "min_new_tokens": NumberRule(True, "must be an integer >= 0", minimum=0),
    "n": NumberRule(True, "must be an integer >= 1", minimum=1),
    "temperature": NumberRule(False, "must be a finite number >= 0", minimum=0),
    "top_p": NumberRule(False, "must be in (0, 1]", minimum=0, exclusive_minimum=True, maximum=1),
    "top_k": NumberRule(True, "must be -1 (disabled) or an integer >= 1", minimum=1, also=(-1,)),
    "min_p": NumberRule(False, "must be in [0, 1]", minimum=0, maximum=1),
    "frequency_penalty": NumberRule(False, "must be in [-2, 2]", minimum=-2, maximum=2),
    "presence_penalty": NumberRule(False, "must be in [-2, 2]", minimum=-2, maximum=2),
    "repetition_penalty": NumberRule(
        False, "must be in (0, 2]", minimum=0, exclusive_minimum=True, maximum=2
    ),
}
BOOLEAN_PARAMS = (
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "speculative",
)
DTYPES = ("int", "float", "bool", "str")
