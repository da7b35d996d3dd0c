"""NGRAM proposals from the radix tree: a request whose whole sequence another request already took
gets that request's continuation as its drafts, exactly verified."""

from __future__ import annotations

import numpy as np

from tests.helpers.engines import tiny_scheduler
from tests.runtime.speculative.spec_helpers import PLAIN, SPEC, request, run_all

NEW = 24


def _prompt() -> np.ndarray:
    """Distinct tokens: prompt lookup alone finds nothing to copy in it."""
    return np.random.default_rng(3).permutation(np.arange(3, 250))[:40]


def test_a_repeated_request_drafts_the_first_ones_output_from_the_tree(tiny_llama_dir):
    with tiny_scheduler(tiny_llama_dir, **SPEC, speculative_max_batch=64) as sched:
        first = run_all(sched, [request("first", _prompt(), max_new_tokens=NEW)])["first"]
        again = run_all(sched, [request("again", _prompt(), max_new_tokens=NEW)])["again"]
    with tiny_scheduler(tiny_llama_dir, **PLAIN) as plain:
        reference = run_all(plain, [request("plain", _prompt(), max_new_tokens=NEW)])["plain"]
    assert first["ids"] == again["ids"] == reference["ids"]
    # the tree holds the first output but its last token (no KV yet); the second request's first
    # token comes from its prefill and each verify step adds the model's own token after the drafts
    spec = again["spec"]
    assert spec["spec_accept_rate"] == 1.0 and spec["spec_accept_token_num"] >= NEW - 6, spec
    assert spec["spec_accept_token_num"] > 2 * first["spec"]["spec_accept_token_num"], (first, spec)
