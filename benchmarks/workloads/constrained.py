"""Constrained decoding benchmark: mask cost, compile time, and a JSON-extraction workload.

Usage: ``OMP_NUM_THREADS=2 python -m benchmarks.workloads.constrained [--backends llguidance outlines]
[--skip-e2e] [--requests 32] [--suite] [--starvation] [--json PATH]``

Steps 1-2 run per grammar backend (``--backends``); step 3 on the first one.

1. Mask cost per constrained row and token at the SmolLM2 vocabulary (49,152): ``fill_bitmask``
   (the grammar's part) and the whole per-step masking (``GrammarQueue.apply_masks`` on a batch of
   32 rows: fill, copy, unpack and ``-inf`` fill) divided by the rows, over states random generation
   visits in the 33 JSON-schema cases.
2. Compile time per schema (fresh thread-pool compile: regex, outlines-core index, jump-forward DFA)
   and the cached lookup.
3. (``--suite``) the JSON Schema Test Suite, draft 2020-12 (``constrained_suite.py``), per backend:
   coverage (satisfiable schemas accepted with every random output valid), compliance (valid finished
   outputs among accepted schemas), compile time p50/p99, mask time per token.
4. (``--starvation``) 4 slowly compiling schemas sent first, then 40 easy ones, through the Engine:
   the easy ones' latency p50/p99 against a run without the slow ones.
5. 32 extraction requests (one schema, 6 fields) through the Engine on the default model, greedy:
   unconstrained, constrained, constrained + jump-forward, with the bounded default whitespace and
   with ``json_whitespace_pattern=""``, at 32 and at 4 concurrent requests. Output tokens are counted
   the same way for every mode: the tokens of the final text re-encoded. The machine is shared, so
   each row is the fastest of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch

import radixlm._env  # noqa: F401  (thread settings before torch work)  # isort: skip
from benchmarks.harness import add_json_argument, write_results
from benchmarks.workloads.constrained_suite import load_suite, run_starvation, run_suite, satisfiable
from radixlm.runtime.constrained import GrammarBackend
from radixlm.runtime.scheduler.grammar_queue import GrammarQueue
from radixlm.runtime.server_args import ServerArgs
from tests.runtime.constrained.cases import SCHEMA_CASES
from tests.runtime.constrained.driver import allowed_ids, closing_tokens

VOCAB = 49152
BATCH = 32
EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 20},
        "occupation": {"type": "string", "maxLength": 24},
        "email": {"type": "string", "pattern": "[a-z]{1,10}@[a-z]{1,10}\\.com"},
        "married": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "occupation", "email", "married"],
}
PEOPLE = [
    ("Alice Martin", 34, "Lyon", "nurse"),
    ("Bob Chen", 51, "Toronto", "architect"),
    ("Carla Diaz", 27, "Madrid", "teacher"),
    ("David Okafor", 45, "Lagos", "engineer"),
    ("Emma Berg", 62, "Oslo", "pharmacist"),
    ("Farid Haddad", 39, "Beirut", "chef"),
    ("Grace Kim", 23, "Seoul", "designer"),
    ("Hugo Silva", 58, "Lisbon", "pilot"),
]


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def mask_costs(backend: GrammarBackend, tokenizer, steps: int = 60) -> dict[str, float]:
    """Per-row fill cost and whole-step masking cost per row, in microseconds."""
    grammars = [backend.submit("json", json.dumps(s)).result() for _, s in SCHEMA_CASES]
    closing = closing_tokens(backend.vocab.token_bytes)
    rng = np.random.default_rng(0)
    bitmask = backend.new_bitmask(BATCH)
    fills: list[float] = []
    matchers = []
    for grammar in grammars:
        matcher = grammar.new_matcher()
        for step in range(steps):
            if matcher.is_terminated():
                break
            row = step % BATCH
            t0 = time.perf_counter()
            matcher.fill_bitmask(bitmask, row)
            fills.append(time.perf_counter() - t0)
            ids = allowed_ids(bitmask, row)
            pref = ids[closing[ids[ids < len(closing)]]] if rng.random() < 0.3 else ids
            matcher.accept_token(int(rng.choice(pref if len(pref) else ids)))
            if step == steps // 3:
                matchers.append(matcher.copy())
    queue = GrammarQueue(ServerArgs(), tokenizer, [tokenizer.eos_token_id], VOCAB)
    reqs = [SimpleNamespace(grammar=matchers[i % len(matchers)]) for i in range(BATCH)]
    logits = torch.randn(BATCH, VOCAB)
    per_row: list[float] = []
    for _ in range(50):
        t0 = time.perf_counter()
        queue.apply_masks(reqs, logits)
        per_row.append((time.perf_counter() - t0) / BATCH)
    fill_us = np.asarray(fills) * 1e6
    step_us = np.asarray(per_row) * 1e6
    return {
        "fill_mean": fill_us.mean(),
        "fill_p50": _pct(fill_us, 50),
        "fill_p99": _pct(fill_us, 99),
        "step_mean": step_us.mean(),
        "step_p99": _pct(step_us, 99),
        "rows": len(fill_us),
    }


def compile_times(tokenizer, engine: str) -> dict[str, float]:
    """Fresh compile per schema (one backend, distinct keys) and the cached lookup, in ms."""
    backend = GrammarBackend(tokenizer, [tokenizer.eos_token_id], VOCAB, backend=engine)
    fresh = [backend.submit("json", json.dumps(s)).result().compile_seconds * 1e3 for _, s in SCHEMA_CASES]
    cached = []
    for _, s in SCHEMA_CASES:
        t0 = time.perf_counter()
        backend.submit("json", json.dumps(s)).result()
        cached.append((time.perf_counter() - t0) * 1e3)
    backend.shutdown()
    return {
        "mean": float(np.mean(fresh)),
        "p99": _pct(fresh, 99),
        "max": max(fresh),
        "cached_mean": float(np.mean(cached)),
        "cached_p99": _pct(cached, 99),
    }


def extraction_prompts(tokenizer, n: int) -> list[str]:
    prompts = []
    for i in range(n):
        name, age, city, job = PEOPLE[i % len(PEOPLE)]
        age += i // len(PEOPLE)
        married = "is married" if i % 3 else "is single"
        text = (
            f"{name} is {age} years old and lives in {city}, where they work as a {job}. "
            f"They {married} and can be reached at {name.split()[0].lower()}@mail.com."
        )
        user = (
            "Extract the person's name, age, city, occupation, email and marital status as a JSON object "
            f"with keys name, age, city, occupation, email, married.\nText: {text}"
        )
        prompts.append(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
            )
        )
    return prompts


def run_workload(engine, n: int, max_new_tokens: int, constrained: bool) -> dict[str, float]:
    """One warm-up, then ``n`` requests at once on a flushed cache; tok/s over re-encoded output text."""
    prompts = extraction_prompts(engine.tokenizer, n)
    params = {"temperature": 0, "max_new_tokens": max_new_tokens}
    if constrained:
        params["json_schema"] = EXTRACTION_SCHEMA
    engine.generate(prompts[0], params)  # warm-up; compiles (and caches) the grammar
    engine.flush_cache()
    jf = engine.scheduler.jump_forward
    before = dict(jf.stats) if jf else {}
    t0 = time.perf_counter()
    outs = engine.generate(prompts, [params] * n)
    wall = time.perf_counter() - t0
    tokens = sum(len(engine.tokenizer.encode(o["text"], add_special_tokens=False)) for o in outs)
    lat = [o["meta_info"]["e2e_latency"] for o in outs]
    valid = 0
    for o in outs:
        try:
            valid += isinstance(json.loads(o["text"]), dict)
        except json.JSONDecodeError:
            pass
    stats = {k: v - before[k] for k, v in jf.stats.items()} if jf else {}
    return {
        "tok_s": tokens / wall,
        "tokens": tokens,
        "wall": wall,
        "lat_mean": float(np.mean(lat)),
        "lat_p99": _pct(lat, 99),
        "json_ok": valid,
        "forced": stats.get("forced_tokens", 0),
        "accepted": stats.get("draft_accepted", 0),
        "drafted": stats.get("draft_tokens", 0),
    }


def print_suite(tokenizer, engines: list[str]) -> None:
    groups = load_suite()
    usable = satisfiable(groups)
    print(
        f"JSON Schema Test Suite draft 2020-12: {len(groups)} schemas, {len(usable)} satisfiable without "
        "remote refs"
    )
    print(
        "| backend | accepted | coverage | compliance (valid/finished) | compile p50 ms | compile p99 ms "
        "| mask mean us | mask p50 us | mask p99 us |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for engine in engines:
        r = run_suite(tokenizer, VOCAB, engine, usable)
        n = r["schemas"]
        print(
            f"| {engine} | {r['accepted']}/{n} | {r['covered']}/{n} ({100 * r['covered'] / n:.0f}%) | "
            f"{r['valid']}/{r['finished']} | {r['compile_p50']:.2f} | {r['compile_p99']:.2f} | "
            f"{r['mask_mean']:.1f} | {r['mask_p50']:.1f} | {r['mask_p99']:.1f} |",
            flush=True,
        )
        for line in r["rejected"]:
            print(f"  [{engine}] rejected {line}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, nargs="+", default=[32, 4])
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2, help="runs per row; the fastest is reported")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--backends", nargs="+", default=["llguidance", "outlines"])
    parser.add_argument("--suite", action="store_true", help="the JSON Schema Test Suite per backend")
    parser.add_argument("--starvation", action="store_true", help="slow schemas before easy ones")
    add_json_argument(parser)
    args = parser.parse_args()
    headline: list[dict] = []
    measured: dict = {"mask": {}, "compile": {}, "workload": []}
    from radixlm.runtime.weights.tokenizer_files import tokenizer_for

    tokenizer = tokenizer_for(args.model)
    for engine in args.backends:
        backend = GrammarBackend(tokenizer, [tokenizer.eos_token_id], VOCAB, backend=engine)
        m = mask_costs(backend, tokenizer)
        backend.shutdown()
        measured["mask"][engine] = m
        headline.append({"label": f"{engine}, mask step per row", "metric": "us", "value": m["step_mean"]})
        print(
            f"[{engine}] mask cost over {m['rows']} rows: fill_bitmask mean {m['fill_mean']:.1f} us, "
            f"p50 {m['fill_p50']:.1f} us, p99 {m['fill_p99']:.1f} us; whole step per row (batch {BATCH}) "
            f"mean {m['step_mean']:.1f} us, "
            f"p99 {m['step_p99']:.1f} us",
            flush=True,
        )
        c = compile_times(tokenizer, engine)
        measured["compile"][engine] = c
        headline.append({"label": f"{engine}, compile per schema", "metric": "ms", "value": c["mean"]})
        print(
            f"[{engine}] compile per schema ({len(SCHEMA_CASES)}): mean {c['mean']:.1f} ms, "
            f"p99 {c['p99']:.1f} ms, max {c['max']:.1f} ms; cached mean {c['cached_mean'] * 1e3:.1f} us, "
            f"p99 {c['cached_p99'] * 1e3:.1f} us",
            flush=True,
        )
    if args.suite:
        print_suite(tokenizer, args.backends)
    if args.starvation:
        print(
            "| backend | easy p50 alone s | easy p99 alone s | p50 with 4 slow s | p99 with 4 slow s "
            "| ratio p99 |"
        )
        print("|---|---|---|---|---|---|")
        for engine in args.backends:
            r = run_starvation(args.model, engine)
            print(
                f"| {engine} | {r['alone_p50']:.2f} | {r['alone_p99']:.2f} | {r['with_slow_p50']:.2f} | "
                f"{r['with_slow_p99']:.2f} | {r['with_slow_p99'] / r['alone_p99']:.2f} |",
                flush=True,
            )
    if args.skip_e2e:
        write_results(args.json, __spec__.name, headline, measured)
        return
    modes = [
        ("unconstrained", False, {}),
        ("constrained", True, {}),
        ("constrained + jump-forward", True, {"enable_jump_forward": True}),
        ('constrained, ws=""', True, {"json_whitespace_pattern": ""}),
        (
            'constrained + jump-forward, ws=""',
            True,
            {"enable_jump_forward": True, "json_whitespace_pattern": ""},
        ),
    ]
    from radixlm.runtime.engine import Engine

    print(
        "| mode | requests | output tok/s | tokens | wall s | latency mean s | latency p99 s | valid JSON "
        "| forced tokens (greedy drafts accepted/drafted) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, constrained, extra in modes:
        engine = Engine(
            model=args.model,
            kv_cache_gb=0.3,
            max_running_requests=64,
            grammar_backend=args.backends[0],
            **extra,
        )
        try:
            for n in args.requests:
                runs = [
                    run_workload(engine, n, args.max_new_tokens, constrained) for _ in range(args.repeats)
                ]
                r = min(runs, key=lambda x: x["wall"])
                measured["workload"].append({"mode": name, "requests": n, **r})
                headline.append(
                    {"label": f"{name}, {n} requests", "metric": "output tok/s", "value": r["tok_s"]}
                )
                print(
                    f"| {name} | {n} | {r['tok_s']:.1f} | {r['tokens']} | {r['wall']:.1f} | "
                    f"{r['lat_mean']:.2f} | {r['lat_p99']:.2f} | {r['json_ok']}/{n} | "
                    f"{r['forced']} ({r['accepted']}/{r['drafted']}) |",
                    flush=True,
                )
        finally:
            engine.shutdown()
    write_results(args.json, __spec__.name, headline, measured)


if __name__ == "__main__":
    main()
