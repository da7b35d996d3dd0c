"""The three ways ``select`` turns per-token logprobs of each choice into a decision.

Each method receives, per choice, the logprobs of the choice's own tokens given the prefix
(``token_logprobs[i]``: list of floats) and, for the unconditional method, the same tokens' logprobs
without the prefix (the first of which is unknown and counts as 0).
"""

from __future__ import annotations

from dataclasses import dataclass


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


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("-inf")


def greedy_matrix(token_logprobs: list[list[float]]) -> list[list[float]]:
    """One row per choice, as wide as the longest: its logprobs, then its own mean (SGLang's
    ``greedy_logprob_matrix``)."""
    width = max(len(lps) for lps in token_logprobs)
    return [lps + [_mean(lps)] * (width - len(lps)) for lps in token_logprobs]


def _greedy(token_logprobs: list[list[float]]) -> int:
    """Keep the choices with the best logprob at each position in turn until one remains.

    A choice shorter than the position being compared continues with its own mean logprob, so a
    choice that is a prefix of a longer one is compared fairly.
    """
    padded = greedy_matrix(token_logprobs)
    width = len(padded[0])
    remaining = list(range(len(padded)))
    for j in range(width):
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
