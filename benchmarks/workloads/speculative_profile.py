"""Where a batch-1 speculative doc-quote request spends its time, in one process (issue 29).

One scheduler with NGRAM speculation greedy-decodes the ``doc-quote`` workload of
``benchmarks/workloads/speculative.py``; each stage of a step is timed by wrapping it: proposing
(``Speculator.drafts``), building the verify batch, the model forward, and processing the logits
(acceptance and sampling). Verify-step forwards are also grouped by their number of rows, and the
step's remaining time (the scheduler's bookkeeping) is what the stages do not cover.
``--profile`` adds a cProfile of the decode loop (top functions by own time).

Each round runs plain decoding, then the speculating scheduler twice, alternating the order: "new"
(this build) and "old" (the draft-length rule and per-round sampling of greedy verify rows from
before 2026-12-03, restored by ``configure``), the tree flushed and the speed check reset (off
unless ``--speed-check``) before each run, all from the same prompt, so outputs must be identical.
``--row-costs N`` first times verify forwards of 1 to 9 rows, interleaved, N rounds.

    python -m benchmarks.workloads.speculative_profile --tokens 96 --rounds 2
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import time
from collections import defaultdict
from typing import Any

from benchmarks.workloads.speculative import WORKLOADS, _prompt_ids
from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler import scheduler as sched_mod
from radixlm.runtime.scheduler import token_processor
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.speculative.spec_state import SpecState
from radixlm.runtime.weights.model_registry import resolve_model

TIMES: dict[str, list[float]] = defaultdict(list)


def _timed(name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name].append(time.perf_counter() - t)

    return wrapper


def _instrument(sched: Scheduler) -> None:
    assert sched.speculator is not None
    sched.speculator.drafts = _timed("propose", sched.speculator.drafts)  # type: ignore[method-assign]
    sched_mod.build_verify_batch = _timed("build_verify", sched_mod.build_verify_batch)  # type: ignore[attr-defined]
    forward = sched.encoder.forward

    def timed_forward(batch: Any) -> Any:
        t = time.perf_counter()
        out = forward(batch)
        took = time.perf_counter() - t
        kind = batch.kind.name.lower()
        TIMES[f"forward_{kind}"].append(took)
        if kind == "verify":
            TIMES[f"forward_verify_rows{batch.forward_batch.input_ids.numel()}"].append(took)
        return out

    sched.encoder.forward = timed_forward  # type: ignore[method-assign]
    process = sched.tokens.process

    def timed_process(batch: Any, logits: Any, running: Any) -> Any:
        t = time.perf_counter()
        out = process(batch, logits, running)
        TIMES[f"process_{batch.kind.name.lower()}"].append(time.perf_counter() - t)
        return out

    sched.tokens.process = timed_process  # type: ignore[method-assign]


def run(
    sched: Scheduler, ids: list[int], tokens: int, tag: str, prof: cProfile.Profile | None
) -> dict[str, Any]:
    sched.handle(
        TokenizedGenerateReq(f"warm-{tag}", list(ids), SamplingParams(temperature=0, max_new_tokens=4))
    )
    while sched.has_work():
        sched.step()
    params = SamplingParams(temperature=0, max_new_tokens=tokens)
    sched.handle(TokenizedGenerateReq(tag, list(ids), params, stream=True))
    sched.step()  # the prefill (the prompt is cached) and first token
    TIMES.clear()
    out: list[int] = []
    start = time.perf_counter()
    if prof is not None:
        prof.enable()
    while sched.has_work():
        t = time.perf_counter()
        for o in sched.step():
            out.extend(o.new_token_ids.tolist())
        TIMES["step"].append(time.perf_counter() - t)
    if prof is not None:
        prof.disable()
    wall = time.perf_counter() - start
    return {"wall": wall, "tokens": len(out), "times": {k: list(v) for k, v in TIMES.items()}, "out": out}


def row_costs(sched: Scheduler, ids: list[int], rounds: int) -> None:
    """Forward time of a verify step by its rows (1 = the last token alone, r = r - 1 drafts), the
    row counts interleaved, on a running request with a ~1,900-token context; best and median."""
    sched.handle(TokenizedGenerateReq("rows", list(ids), SamplingParams(temperature=0, max_new_tokens=64)))
    while len(sched.running) == 0 or len(sched.running[0].output_ids) < 8:
        sched.step()
    req = sched.running[0]
    table = sched.cache.req_to_token_pool.req_to_token
    took: dict[int, list[float]] = defaultdict(list)
    for _ in range(rounds):
        for r in (1, 2, 3, 4, 5, 7, 9):
            base = req.kv_len
            batch = sched_mod.build_verify_batch(
                [req], [[req.output_ids[-1]] * (r - 1)], sched.cache, sched.runner
            )
            t = time.perf_counter()
            sched.runner.forward(batch.forward_batch)
            took[r].append(time.perf_counter() - t)
            sched.cache.allocator.free(table[req.row, base : base + r].clone())
    one = min(took[1])
    print("verify forward by rows (ms): rows best median best/one-row")
    for r, v in took.items():
        v = sorted(v)
        print(f"  {r} {v[0] * 1e3:7.2f} {v[len(v) // 2] * 1e3:7.2f} {v[0] / one:5.2f}")
    while sched.has_work():
        sched.step()


_NEW_ON_VERIFIED = SpecState.on_verified
_NEW_GREEDY_ROWS = token_processor.greedy_rows


def _old_on_verified(self: SpecState, proposed: int, accepted: int) -> None:
    """The draft-length rule before 2026-12-03: after a partial accept, one past the accepted count."""
    _NEW_ON_VERIFIED(self, proposed, accepted)
    if accepted != proposed:
        self.draft_len = max(1, accepted + 1)


def configure(old: bool) -> None:
    """``old``: the draft-length rule and the per-round sampling of greedy verify rows as before."""
    SpecState.on_verified = _old_on_verified if old else _NEW_ON_VERIFIED  # type: ignore[method-assign]
    token_processor.greedy_rows = (lambda batch, logits: {}) if old else _NEW_GREEDY_ROWS  # type: ignore[assignment]


def report(name: str, r: dict[str, Any]) -> None:
    t = r["times"]
    steps = len(t["step"])
    rate = r["tokens"] / r["wall"]
    print(f"== {name}: {r['tokens']} tokens in {r['wall'] * 1e3:.0f} ms ({rate:.1f} tok/s), {steps} steps")
    for k in sorted(t):
        v = sorted(t[k])
        print(f"  {k:28s} n={len(v):3d} total={sum(v) * 1e3:8.1f} ms  median={v[len(v) // 2] * 1e3:6.2f} ms")
    covered = sum(sum(t[k]) for k in t if k in ("propose", "build_verify") or k.startswith("process_"))
    covered += sum(sum(t[k]) for k in ("forward_decode", "forward_verify") if k in t)
    print(f"  outside stages (scheduler bookkeeping) total={(sum(t['step']) - covered) * 1e3:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="cProfile the last round's new run")
    ap.add_argument("--num-steps", type=int, default=None)
    ap.add_argument("--row-costs", type=int, default=0, help="time verify forwards of 1..9 rows, N rounds")
    ap.add_argument(
        "--speed-check", action="store_true", help="keep the speed check (off: every draft verified)"
    )
    ap.add_argument("--only-new", action="store_true", help="skip the old configuration")
    args = ap.parse_args()
    print("load average", os.getloadavg())
    model = resolve_model("smollm2-135m")
    common = {"model": model, "device": "cpu", "num_threads": 2, "max_total_tokens": 96_000}
    off = Scheduler(ServerArgs(**common, speculative_algorithm="NONE"))
    on = Scheduler(
        ServerArgs(
            **common,
            speculative_algorithm="NGRAM",
            speculative_num_steps=args.num_steps,
            speculative_speed_check=args.speed_check,
        )
    )
    _instrument(on)
    if args.row_costs:
        row_costs(on, _prompt_ids(on.tokenizer, WORKLOADS["doc-quote"]), args.row_costs)
        on.cache.flush()
    summary = []
    ids = _prompt_ids(on.tokenizer, WORKLOADS["doc-quote"])
    for i in range(args.rounds):
        # every run from the same prompt, the speculating scheduler's tree emptied first: it must not
        # hold an earlier run's answer as a draft
        results = {"off": run(off, ids, args.tokens, f"off-{i}", None)}
        configs = ["new"] if args.only_new else (["old", "new"] if i % 2 == 0 else ["new", "old"])
        for name in configs:
            configure(old=name == "old")
            on.cache.flush()
            if on.speculator is not None and on.speculator.speed is not None:
                on.speculator.speed = type(on.speculator.speed)()  # a fresh server's speed check
            prof = cProfile.Profile() if args.profile and name == "new" and i == args.rounds - 1 else None
            results[name] = run(on, ids, args.tokens, f"{name}-{i}", prof)
            if prof is not None:
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        load = os.getloadavg()[0]
        for name, r in results.items():
            report(f"round {i} {name}", r)
            t = r["times"]
            row = {
                "round": i,
                "config": name,
                "load": round(load, 1),
                "tok_s": round(r["tokens"] / r["wall"], 1),
                "verify_steps": len(t.get("forward_verify", [])),
                "decode_steps": len(t.get("forward_decode", [])) if name != "off" else len(t["step"]),
                "verify_rows": sum(
                    int(k[len("forward_verify_rows") :]) * len(v)
                    for k, v in t.items()
                    if k.startswith("forward_verify_rows")
                ),
                "process_verify_ms": round(sum(t.get("process_verify", [])) * 1e3, 1),
                "propose_ms": round(sum(t.get("propose", [])) * 1e3, 1),
                "identical": r["out"] == results["off"]["out"],
            }
            summary.append(row)
        base = results["off"]["tokens"] / results["off"]["wall"]
        print(
            "  vs off: "
            + ", ".join(
                f"{n} {results[n]['tokens'] / results[n]['wall'] / base:.2f}x" for n in results if n != "off"
            )
            + f", load {load:.1f}"
        )
    configure(old=False)
    print("summary")
    for row in summary:
        print(json.dumps(row))
    off.shutdown()
    on.shutdown()


if __name__ == "__main__":
    main()
