"""Draft-length policies replayed offline on a greedy doc-quote answer (issue 29).

Greedy output does not depend on the drafts, so one plain run gives the answer, and at every
position the n-gram proposer's draft and how many of its tokens the answer agrees with are fixed.
A policy (how long a draft to ask for at each verify step) is then replayed exactly, step by step,
against a step-cost model ``cost(rows) = 1 + beta * (rows - 1)`` in units of a plain decode step
(``beta``: an extra verify row's cost, measured by ``speculative_profile --row-costs``). Printed per
policy: steps, rows, tokens per step and the modelled speedup over plain decoding.

    python -m benchmarks.workloads.speculative_policy --tokens 160 --beta 0.2,0.3 [--workload code-edit]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from benchmarks.workloads.speculative import WORKLOADS, _prompt_ids
from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.speculative.ngram import NgramProposer
from radixlm.runtime.speculative.spec_state import SpecState
from radixlm.runtime.weights.model_registry import resolve_model

MAX_K = 16


def greedy_answer(workload: str, tokens: int) -> tuple[list[int], list[int]]:
    """The doc-quote prompt's ids and its greedy answer (kept in /tmp between runs)."""
    cache = Path(f"/tmp/radixlm-{workload}-answer-{tokens}.json")
    if cache.exists():
        ids, out = json.loads(cache.read_text())
        return ids, out
    sched = Scheduler(
        ServerArgs(
            model=resolve_model("smollm2-135m"), device="cpu", num_threads=2, speculative_algorithm="NONE"
        )
    )
    ids = _prompt_ids(sched.tokenizer, WORKLOADS[workload])
    sched.handle(TokenizedGenerateReq("a", list(ids), SamplingParams(temperature=0, max_new_tokens=tokens)))
    out: list[int] = []
    while sched.has_work():
        for o in sched.step():
            out.extend(o.new_token_ids.tolist())
    sched.shutdown()
    cache.write_text(json.dumps([ids, out]))
    return ids, out


def agreement(ids: list[int], out: list[int]) -> list[tuple[int, int]]:
    """Per position t (the model's token t already emitted... i.e. ``out[:t+1]`` known): the draft's
    length (up to MAX_K) and how many of its leading tokens equal ``out[t+1:]``."""
    proposer = NgramProposer()
    rows = []
    for t in range(len(out)):
        draft = proposer.propose(ids + out[: t + 1], MAX_K)
        truth = out[t + 1 : t + 1 + len(draft)]
        m = 0
        while m < len(truth) and draft[m] == truth[m]:
            m += 1
        rows.append((len(draft), m))
    return rows


Policy = Callable[[], tuple[Callable[[], int], Callable[[int, int], None]]]


def spec_state_policy(max_len: int) -> Policy:
    def make() -> tuple[Callable[[], int], Callable[[int, int], None]]:
        s = SpecState(max_len, max_len)
        return (lambda: s.draft_len if s.wants_draft() else 0), s.on_verified

    return make


def oracle() -> Policy:
    """An upper bound: knows each draft's agreeing run (-1: draft exactly that much)."""

    def make() -> tuple[Callable[[], int], Callable[[int, int], None]]:
        return (lambda: -1), (lambda p, a: None)

    return make


def variant(max_len: int, grow: str, partial: str, backoff: bool = True) -> Policy:
    """A SpecState-like rule: ``grow`` after a fully accepted draft ('double' or 'max'), ``partial``
    after a partly accepted one ('a+1': one past the accepted; 'half': max(a + 1, k // 2); 'keep')."""

    def make() -> tuple[Callable[[], int], Callable[[int, int], None]]:
        st = {"k": max_len, "misses": 0, "backoff": 0}

        def want() -> int:
            if st["backoff"] > 0:
                st["backoff"] -= 1
                return 0
            return st["k"]

        def feedback(k: int, a: int) -> None:
            if a == k:
                st["k"] = max_len if grow == "max" else min(max_len, 2 * st["k"])
            elif partial == "a+1":
                st["k"] = max(1, a + 1)
            elif partial == "half":
                st["k"] = max(1, a + 1, st["k"] // 2)
            if a == 0:
                st["misses"] += 1
                if backoff and st["misses"] >= 2:
                    st["backoff"] = min(32, 1 << (st["misses"] - 1))
            else:
                st["misses"] = 0

        return want, feedback

    return make


def fixed(k: int) -> Policy:
    def make() -> tuple[Callable[[], int], Callable[[int, int], None]]:
        return (lambda: k), (lambda p, a: None)

    return make


def replay(agree: list[tuple[int, int]], policy: Policy, beta: float) -> tuple[int, int, float]:
    """(steps, rows, cost in decode steps) to emit every token after the first."""
    want, feedback = policy()
    t, steps, rows, cost = 0, 0, 0, 0.0
    n = len(agree)
    while t < n - 1:
        length, m = agree[t]
        k = want()
        k = m if k < 0 else k
        k = min(k, length, n - 2 - t)
        a = min(m, k)
        steps += 1
        rows += 1 + k
        cost += 1 + beta * k
        if k:
            feedback(k, a)
        t += a + 1
    return steps, rows, cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--beta", default="0.2,0.3")
    ap.add_argument("--workload", default="doc-quote", choices=sorted(WORKLOADS))
    ap.add_argument(
        "--short", action="store_true", help="the current rule, fixed lengths and the halving rule only"
    )
    args = ap.parse_args()
    ids, out = greedy_answer(args.workload, args.tokens)
    agree = agreement(ids, out)
    print(
        f"{len(out)} tokens; positions with a draft {sum(1 for d, _ in agree if d)}; "
        f"mean agreeing run {sum(m for _, m in agree) / len(agree):.2f}"
    )
    print("runs:", [m for _, m in agree])
    policies: dict[str, Policy] = {"oracle": oracle()}
    policies |= {
        f"adaptive max {m} (current{' default' if m == 8 else ''})": spec_state_policy(m)
        for m in (3, 4, 6, 8, 12, 16)
    }
    policies.update({f"fixed {k}": fixed(k) for k in (1, 2, 3, 4, 5, 6, 8, 12)})
    policies["max 8 double half (new default)"] = variant(8, "double", "half")
    for m in () if args.short else (6, 8, 12, 16):
        for grow in ("double", "max"):
            for partial in ("a+1", "half", "keep"):
                for bo in (True, False):
                    policies[f"max {m} {grow} {partial}{'' if bo else ' no-backoff'}"] = variant(
                        m, grow, partial, bo
                    )
    for beta in (float(b) for b in args.beta.split(",")):
        print(f"beta {beta}: policy | steps | rows | tokens/step | modelled speedup")
        for name, pol in policies.items():
            steps, rows, cost = replay(agree, pol, beta)
            emitted = len(out) - 1
            print(f"  {name:32s} {steps:4d} {rows:5d} {emitted / steps:5.2f} {emitted / cost:5.2f}x")


if __name__ == "__main__":
    main()
