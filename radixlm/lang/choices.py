"""The choices methods where SGLang programs import ``sglang.lang.choices``."""

from radixlm.program.choices import (
    ChoicesDecision,
    ChoicesSamplingMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)

__all__ = [
    "ChoicesDecision",
    "ChoicesSamplingMethod",
    "greedy_token_selection",
    "token_length_normalized",
    "unconditional_likelihood_normalized",
]
