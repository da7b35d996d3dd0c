"""The speed check's probes, one draft token a request against whole drafts (issue 29).

A probe is a step the speed check lets verify although it does not expect the drafts to pay, so
that a change of cost is noticed. Three schedulers in one process on one workload of
``benchmarks/workloads/speculative.py``, batch 1, greedy: plain decoding, NGRAM whose probes verify
whole drafts (the rule before 2026-12-04), and NGRAM whose probes verify one token a request (this
build). Each first runs a 64-token cell (past the speed check's warm-up); then ``--rounds`` rounds
alternate their order, every cell from a flushed cache holding only the prompt. Printed: each
mode's median decode tok/s, its verify steps, and the median ratios of the rounds.

    python -m benchmarks.workloads.speculative_probes --workload chat --tokens 256
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.workloads.speculative import WORKLOADS, _prompt_ids, prepare, run_cell
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.weights.model_registry import resolve_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="chat", choices=list(WORKLOADS))
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    model = resolve_model("smollm2-135m")
    common = {"model": model, "device": "cpu", "num_threads": 2, "max_total_tokens": 96_000}
    scheds = {
        "off": Scheduler(ServerArgs(**common, speculative_algorithm="NONE")),
        "whole": Scheduler(ServerArgs(**common, speculative_algorithm="NGRAM")),
        "one": Scheduler(ServerArgs(**common, speculative_algorithm="NGRAM")),
    }
    whole = scheds["whole"].speculator
    assert whole is not None
    whole._probing = lambda: False  # type: ignore[method-assign]
    ids = _prompt_ids(scheds["off"].tokenizer, WORKLOADS[args.workload])
    for name, sched in scheds.items():
        prepare(sched, ids, f"warm-{name}")
        run_cell(sched, ids, 1, 64, f"warm-{name}")
    cells: dict[str, list[dict]] = {name: [] for name in scheds}
    for r in range(args.rounds):
        for name in list(scheds) if r % 2 == 0 else list(reversed(scheds)):
            prepare(scheds[name], ids, f"{name}-{r}")
            cells[name].append(run_cell(scheds[name], ids, 1, args.tokens, f"{name}-{r}"))
    for name, runs in cells.items():
        speeds = [round(c["tok_s"], 1) for c in runs]
        verifies = [c["verify_steps"] for c in runs]
        print(f"{name}: {statistics.median(speeds):.1f} tok/s {speeds}, verify steps {verifies}")
    for a, b in (("whole", "off"), ("one", "off"), ("one", "whole")):
        ratio = statistics.median(x["tok_s"] / y["tok_s"] for x, y in zip(cells[a], cells[b]))
        print(f"{a}/{b}: {ratio:.3f}")
    for sched in scheds.values():
        sched.shutdown()


if __name__ == "__main__":
    main()
