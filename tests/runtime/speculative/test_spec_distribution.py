"""Sampled speculation follows the model's distribution: a two-sample test on a small vocabulary.

With top-k 4 every step samples among four tokens. A proposer that always drafts the same token
(a point mass the model gives some but not all probability) forces both outcomes of the acceptance
rule at every verified position; seeds differ between the two runs, so nothing is shared but the
model. The per-position token counts must pass a chi-square homogeneity test.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy.stats import chi2_contingency

from tests.helpers.engines import tiny_scheduler
from tests.runtime.speculative.spec_helpers import PLAIN, request, run_all

SAMPLES = 400
POSITIONS = (1, 2, 3)  # output 0 comes from the prefill; the later ones from verify steps


class FixedProposer:
    """Drafts ``token`` repeated: a point-mass draft distribution."""

    def __init__(self, token: int) -> None:
        self.token = token

    def propose(self, tokens: list[int], k: int) -> list[int]:
        return [self.token] * k


def _outputs(model_dir: str, first_seed: int, draft_token: int | None) -> tuple[list[list[int]], dict]:
    prompt = np.array([5, 9, 14, 20, 27, 35], dtype=np.int32)
    reqs = [
        request(f"d{i}", prompt, temperature=1.0, top_k=4, seed=first_seed + i, max_new_tokens=4)
        for i in range(SAMPLES)
    ]
    args: dict = {"max_running_requests": SAMPLES, **PLAIN}
    if draft_token is not None:
        args |= {
            "speculative_algorithm": "NGRAM",
            "speculative_num_steps": 3,
            "speculative_max_batch": 1024,
            "speculative_speed_check": False,
        }
    with tiny_scheduler(model_dir, **args) as sched:
        if draft_token is not None:
            assert sched.speculator is not None
            sched.speculator.proposer = FixedProposer(draft_token)  # type: ignore[assignment]
        got = run_all(sched, reqs)
        return [got[r.rid]["ids"] for r in reqs], sched.stats()


def test_speculative_sampling_matches_plain_sampling(tiny_llama_dir):
    plain, _ = _outputs(tiny_llama_dir, 0, None)
    # the draft: the most common token at position 1, so it is often accepted and often not
    draft_token = Counter(ids[1] for ids in plain).most_common(1)[0][0]
    spec, stats = _outputs(tiny_llama_dir, 100_000, draft_token)
    assert stats["spec_accepted_tokens"] > 40, stats
    assert stats["spec_accepted_tokens"] < stats["spec_draft_tokens"] * 0.8, stats
    for pos in POSITIONS:
        a, b = Counter(ids[pos] for ids in plain), Counter(ids[pos] for ids in spec)
        support = sorted(set(a) | set(b))
        table = [[a[t] for t in support], [b[t] for t in support]]
        p_value = chi2_contingency(table).pvalue
        assert p_value > 1e-3, (pos, table, p_value)
        if pos == 1:  # four tokens (later positions mix many contexts: sparse counts, chi-square only)
            total_variation = sum(abs(a[t] - b[t]) for t in support) / (2 * SAMPLES)
            assert total_variation < 0.1, (pos, table)
