"""Speculation is on by default where it is measured and checked (the CPU), and off when asked."""

from __future__ import annotations

import pytest

from radixlm.runtime.server.launch import server_flags
from radixlm.runtime.server.serve_cli import main as serve_main
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.speculative.spec_args import resolve_algorithm
from tests.helpers.engines import tiny_scheduler
from tests.runtime.speculative.spec_helpers import repetitive_prompt, request, run_all, serve


@pytest.mark.parametrize(
    ("algorithm", "draft", "device", "expected"),
    [
        ("AUTO", None, "cpu", "NGRAM"),
        ("AUTO", None, "cuda", None),  # not yet run on a GPU: opt-in there
        ("AUTO", "/models/draft", "cuda", "STANDALONE"),
        ("AUTO", "/models/draft", "cpu", "STANDALONE"),
        ("NGRAM", None, "cuda", "NGRAM"),
        ("NONE", None, "cpu", None),
        (None, None, "cpu", None),
    ],
)
def test_resolve_algorithm(algorithm, draft, device, expected):
    assert resolve_algorithm(algorithm, draft, device) == expected


def test_server_args_default_and_off_switch():
    assert ServerArgs().speculative_algorithm == "AUTO"
    off = ServerArgs(speculative_algorithm=None)
    assert off.speculative_algorithm == "NONE"
    # a launch line built from the arguments keeps speculation off (None would have been left out,
    # and the server would have started with the default)
    assert server_flags(off)[-2:] == ["--speculative-algorithm", "NONE"]
    assert ServerArgs(speculative_algorithm="none").speculative_algorithm == "NONE"
    with pytest.raises(ValueError, match="speculative_algorithm must be one of"):
        ServerArgs(speculative_algorithm="MEDUSA")


def test_cli_turns_it_off(monkeypatch):
    seen = {}
    monkeypatch.setattr(
        "radixlm.runtime.server.serve_cli.run_serve", lambda args: seen.setdefault("args", args)
    )
    serve_main(["--model", "m", "--speculative-algorithm", "NONE"])
    assert seen["args"].speculative_algorithm == "NONE"


def test_naming_a_draft_model_is_enough(tiny_llama_dir):
    """SGLang needs STANDALONE spelled out beside the draft model; AUTO takes the path as the ask."""
    with tiny_scheduler(tiny_llama_dir, speculative_draft_model_path=tiny_llama_dir) as sched:
        assert sched.speculator is not None and sched.speculator.draft_model is not None


def test_default_scheduler_speculates_and_keeps_greedy_output(tiny_llama_dir):
    """With no speculative option the CPU scheduler runs NGRAM behind the speed check, whose first
    steps of a batch size verify drafts to measure their cost: the repeating prompt's drafts are
    verified, and the tokens are those of speculation off."""
    prompt = repetitive_prompt(40, 5)
    off, _ = serve(tiny_llama_dir, [request("r", prompt, max_new_tokens=48)], False)
    with tiny_scheduler(tiny_llama_dir) as sched:
        assert sched.speculator is not None and sched.speculator.speed is not None
        on = run_all(sched, [request("r", prompt, max_new_tokens=48)])  # also checks every KV slot
        stats = sched.stats()
    assert on["r"]["ids"] == off["r"]["ids"]
    assert stats["spec_verify_steps"] > 0 and stats["spec_accepted_tokens"] > 0, stats
