"""The three ways ``select`` turns per-token logprobs of each choice into a decision.

Each method receives, per choice, the logprobs of the choice's own tokens given the prefix
(``token_logprobs[i]``: list of floats) and, for the unconditional method, the same tokens' logprobs
without the prefix (the first of which is unknown and counts as 0).

The method objects are also callable the way SGLang calls its own (``method(choices=...,
normalized_prompt_logprobs=..., input_token_logprobs=..., output_token_logprobs=...)``, entries as
the runtime returns them: ``[logprob, token id, text]``), returning a ``ChoicesDecision``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ChoicesDecision:
    """What calling a choices method returns: the chosen text and the scores behind it."""

    decision: str
    meta_info: dict[str, Any] | None = None


@dataclass(frozen=True)
class ChoicesSamplingMethod:
    """A named choice-selection method; ``sgl.token_length_normalized`` etc. are instances."""

    name: str

    @property
    def requires_unconditional_logprobs(self) -> bool:
        return self.name == "unconditional_likelihood_normalized"

    def decide(
        self, token_logprobs: list[list[float]], unconditional: list[list[float]] | None = None
    ) -> tuple[int, list[float]]:
        """Return ``(index of the chosen choice, one score per choice)``; higher is better."""
        if self.name == "token_length_normalized":
            scores = [_mean(lps) for lps in token_logprobs]
        elif self.name == "greedy_token_selection":
            return _greedy(token_logprobs), [_mean(lps) for lps in token_logprobs]
        elif self.name == "unconditional_likelihood_normalized":
            if unconditional is None:
                raise ValueError("unconditional_likelihood_normalized needs unconditional logprobs")
            scores = [
                _mean([c - (u if j else 0.0) for j, (c, u) in enumerate(zip(cond, unc))])
                for cond, unc in zip(token_logprobs, unconditional)
            ]
        else:
            raise ValueError(f"unknown choices method {self.name!r}")
        return max(range(len(scores)), key=lambda i: scores[i]), scores

    def __call__(
        self,
        *,
        choices: list[str],
        normalized_prompt_logprobs: list[float],
        input_token_logprobs: list[list[Any]],
        output_token_logprobs: list[list[Any]],
        unconditional_token_logprobs: list[list[Any]] | None = None,
    ) -> ChoicesDecision:
        """Decide among ``choices`` from the runtime's logprob entries (SGLang's convention):
        token_length_normalized takes the best of ``normalized_prompt_logprobs``; the greedy method
        adds its padded logprob matrix to the meta info; the unconditional one its scores."""
        cond = [[_entry_lp(e) for e in es] for es in input_token_logprobs]
        meta: dict[str, Any] = {
            "normalized_prompt_logprobs": normalized_prompt_logprobs,
            "input_token_logprobs": input_token_logprobs,
            "output_token_logprobs": output_token_logprobs,
        }
        if self.name == "token_length_normalized":
            scores = normalized_prompt_logprobs
        elif self.name == "greedy_token_selection":
            matrix = _padded(cond)
            meta["greedy_logprob_matrix"] = matrix
            return ChoicesDecision(choices[_greedy_rows(matrix)], meta)
        else:
            if unconditional_token_logprobs is None:
                raise ValueError("unconditional_likelihood_normalized needs unconditional_token_logprobs")
            uncond = [[_entry_lp(e) for e in es] for es in unconditional_token_logprobs]
            scores = [_mean([c - u for c, u in zip(cs, us)]) for cs, us in zip(cond, uncond)]
            meta["unconditional_token_logprobs"] = unconditional_token_logprobs
            meta["normalized_unconditional_prompt_logprobs"] = scores
        return ChoicesDecision(choices[max(range(len(scores)), key=lambda i: scores[i])], meta)


def _entry_lp(entry: list[Any]) -> float:
    """A logprob entry's value; an unknown one (``None``: the first token) counts as 0."""
    return 0.0 if entry[0] is None else float(entry[0])


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("-inf")


def _greedy(token_logprobs: list[list[float]]) -> int:
    """Keep the choices with the best logprob at each position in turn until one remains.

    A choice shorter than the position being compared continues with its own mean logprob, so a
    choice that is a prefix of a longer one is compared fairly.
    """
    return _greedy_rows(_padded(token_logprobs))


def _padded(token_logprobs: list[list[float]]) -> list[list[float]]:
    """Each choice's logprobs, continued with their mean to the longest choice's length."""
    width = max(len(lps) for lps in token_logprobs)
    return [lps + [_mean(lps)] * (width - len(lps)) for lps in token_logprobs]


def _greedy_rows(padded: list[list[float]]) -> int:
    remaining = list(range(len(padded)))
    for j in range(len(padded[0]) if padded else 0):
        best = max(padded[i][j] for i in remaining)
        remaining = [i for i in remaining if padded[i][j] == best]
        if len(remaining) == 1:
            break
    return remaining[0]


token_length_normalized = ChoicesSamplingMethod("token_length_normalized")
greedy_token_selection = ChoicesSamplingMethod("greedy_token_selection")
unconditional_likelihood_normalized = ChoicesSamplingMethod("unconditional_likelihood_normalized")

METHODS = {
    m.name: m for m in (token_length_normalized, greedy_token_selection, unconditional_likelihood_normalized)
}


def method_name(method: ChoicesSamplingMethod | str | None) -> str:
    """Normalize a method object or name to its name (default: token_length_normalized)."""
    if method is None:
        return token_length_normalized.name
    name = method if isinstance(method, str) else getattr(method, "name", None)
    if name not in METHODS:
        raise ValueError(f"unknown choices_method {method!r}; use one of {', '.join(METHODS)}")
    return name
