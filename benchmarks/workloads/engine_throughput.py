"""Engine throughput on a shared-prefix workload: radixlm vs radixlm without the radix cache vs transformers.

64 prompts share a ~300-token few-shot prefix, each ends with a distinct ~20-token question; each asks
for 32 greedy tokens (EOS ignored, so every system produces exactly 64 x 32 tokens). Same converted
weights, same prompts, one script:

    (a) radixlm Engine (radix cache on, default options)
    (b) radixlm Engine with disable_radix_cache=True
    (c) transformers generate, fp32, left-padded batches of 16 with an attention mask

Each variant runs in its own child process, so peak RSS is per variant and nothing is shared.
Variant (a) also measures the decode step at batch 1 against the bandwidth floor (fp32 weight
bytes / memory copy bandwidth measured here).

    python -m benchmarks.workloads.engine_throughput               # all three, prints a markdown table
    python -m benchmarks.workloads.engine_throughput --rounds 3    # (a) and (c) alternated three times
    python -m benchmarks.workloads.engine_throughput --json benchmarks/results/engine_throughput.json

With ``--rounds N`` (b) runs once and (a), (c) run in turn N times: this machine's speed drifts by
15-30% within minutes, so a ratio is only meaningful between runs made side by side. The table
shows the median run of (a) and of (c); the a/c line gives each round's ratio and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import radixlm._env  # noqa: F401  (thread settings before torch)  # isort: skip
from benchmarks.harness import add_json_argument, child_env, module_command, write_results

NUM_PROMPTS = 64
NEW_TOKENS = 32
HF_BATCH = 16
VARIANTS = {"a": "(a) radixlm Engine", "b": "(b) radixlm, no radix cache", "c": "(c) transformers generate"}

_SHOTS = [
    ("Which planet is known as the red planet?", "Mars, because iron oxide on its surface looks red."),
    ("What gas do plants take in for photosynthesis?", "Carbon dioxide, which they turn into sugar."),
    ("Who wrote the play Romeo and Juliet?", "William Shakespeare, in the late sixteenth century."),
    ("What is the boiling point of water at sea level?", "100 degrees Celsius, or 212 Fahrenheit."),
    (
        "How many continents are there on Earth?",
        "Seven: Africa, Antarctica, Asia, Australia, Europe, North America and South America.",
    ),
    ("What is the largest ocean?", "The Pacific Ocean, which covers about a third of the planet."),
    ("Which metal is liquid at room temperature?", "Mercury, a dense silver metal."),
    ("What is the main language spoken in Brazil?", "Portuguese, a legacy of colonial history."),
    ("What instrument measures air pressure?", "A barometer, used to forecast the weather."),
    ("What is the hardest natural substance?", "Diamond, a crystal of pure carbon."),
    (
        "What causes the seasons?",
        "The tilt of the Earth's axis, which changes how directly sunlight reaches each hemisphere.",
    ),
]
_SUBJECTS = [
    "volcano",
    "river",
    "desert",
    "glacier",
    "forest",
    "island",
    "canyon",
    "coral reef",
    "rainbow",
    "comet",
    "tide",
    "earthquake",
    "cloud",
    "lightning",
    "fossil",
    "meteor",
]
_ASPECTS = ["how it forms", "why it matters to people", "where the biggest one is", "what lives near it"]


def build_prompts() -> list[str]:
    """A shared few-shot prefix and 64 distinct questions (16 subjects x 4 aspects)."""
    prefix = "You are a precise science tutor. Answer in one short sentence.\n\n"
    prefix += "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in _SHOTS)
    questions = [
        f"Question: Tell me about the {s}: explain {a}, simply.\nAnswer:" for s in _SUBJECTS for a in _ASPECTS
    ]
    return [prefix + q for q in questions[:NUM_PROMPTS]]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- children -----------------------------------------------------------------------------------
def time_forward_passes() -> dict[str, list[float]]:
    """Wrap ``ModelRunner.forward`` to add up its wall time by step kind: ``"DECODE bs=64"`` ->
    ``[steps, seconds, tokens]`` (filled while the engine runs; cleared by the caller)."""
    from radixlm.runtime.executor.model_runner import ModelRunner

    totals: dict[str, list[float]] = {}
    forward = ModelRunner.forward

    def timed(self: ModelRunner, fb: Any) -> Any:
        start = time.perf_counter()
        out = forward(self, fb)
        entry = totals.setdefault(f"{fb.mode.name} bs={fb.batch_size}", [0, 0.0, 0])
        entry[0] += 1
        entry[1] += time.perf_counter() - start
        entry[2] += fb.input_ids.numel()
        return out

    ModelRunner.forward = timed
    return totals


def run_engine(model_dir: str, disable_radix_cache: bool) -> dict[str, Any]:
    from radixlm.runtime.engine import Engine

    forward_times = time_forward_passes()
    prompts = build_prompts()
    params = {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}
    engine = Engine(model=model_dir, disable_radix_cache=disable_radix_cache)
    try:
        engine.generate("warm up the kernels", {"temperature": 0, "max_new_tokens": 4})
        engine.flush_cache()
        forward_times.clear()
        start = time.perf_counter()
        outs = engine.generate(prompts, params)
        elapsed = time.perf_counter() - start
        forward_split = {kind: list(v) for kind, v in forward_times.items()}
        info = engine.get_server_info()
        result = {
            "seconds": elapsed,
            "output_tokens": sum(o["meta_info"]["completion_tokens"] for o in outs),
            "prompt_tokens": sum(o["meta_info"]["prompt_tokens"] for o in outs),
            "cached_tokens": sum(o["meta_info"]["cached_tokens"] for o in outs),
            "hit_rate": info["cache_hit_rate"],
            "outputs": [o["output_ids"] for o in outs],
            "forward_split": forward_split,
        }
        if not disable_radix_cache:
            result.update(decode_floor(engine))
        return result
    finally:
        engine.shutdown()


def decode_floor(engine) -> dict[str, float]:
    """Decode step time at batch 1 (engine, end to end) vs fp32 weight bytes / copy bandwidth."""
    import torch

    prompt = build_prompts()[0]
    short, long = 1, 65
    times = {}
    for n in (short, long):
        best = float("inf")
        for _ in range(3):
            engine.flush_cache()
            start = time.perf_counter()
            engine.generate(prompt, {"temperature": 0, "max_new_tokens": n, "ignore_eos": True})
            best = min(best, time.perf_counter() - start)
        times[n] = best
    step = (times[long] - times[short]) / (long - short)
    model = engine.scheduler.runner.model
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    src = torch.ones(64 << 20)  # 256 MiB, well beyond the caches
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    copy_gbs = 2 * src.numel() * 4 / best / 1e9  # bytes read + written (STREAM convention)
    return {
        "decode_step_ms": step * 1e3,
        "weight_mb": weight_bytes / 1e6,
        "copy_gbs": copy_gbs,
        "floor_ms": weight_bytes / (copy_gbs * 1e9) * 1e3,
    }


def run_hf(model_dir: str) -> dict[str, Any]:
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.weights.tokenizer_files import tokenizer_for

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    prompts = build_prompts()
    tokenizer = tokenizer_for(model_dir)
    tokenizer.padding_side = "left"
    path = Path(model_dir)
    gguf = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
    folder = str(path.parent if gguf else path)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **gguf).eval()
    with torch.inference_mode():
        model.generate(**tokenizer(["warm up"], return_tensors="pt"), max_new_tokens=4, do_sample=False)
        outputs: list[list[int]] = []
        start = time.perf_counter()
        for i in range(0, len(prompts), HF_BATCH):
            enc = tokenizer(
                prompts[i : i + HF_BATCH], return_tensors="pt", padding=True, add_special_tokens=False
            )
            gen = model.generate(
                **enc,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
            outputs.extend(gen[:, enc["input_ids"].shape[1] :].tolist())
        elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "output_tokens": sum(len(o) for o in outputs), "outputs": outputs}


def child(variant: str, model_dir: str) -> None:
    if variant == "c":
        result = run_hf(model_dir)
    else:
        result = run_engine(model_dir, disable_radix_cache=variant == "b")
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


# ---- the parent ---------------------------------------------------------------------------------
def run_variant(variant: str, model_dir: str) -> dict[str, Any]:
    proc = subprocess.run(
        module_command(__spec__.name, "--child", variant, "--model-dir", model_dir),
        env=child_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def render(
    res: dict[str, dict[str, Any]], load: float, prefix_tokens: int, round_ratios: list[float] | None = None
) -> str:
    a, b, c = res["a"], res["b"], res["c"]
    tps = {k: v["output_tokens"] / v["seconds"] for k, v in res.items()}
    same_ab = sum(x == y for x, y in zip(a["outputs"], b["outputs"]))
    same_ac = sum(x == y for x, y in zip(a["outputs"], c["outputs"]))
    rows = [
        (
            "(a) radixlm Engine",
            a,
            f"{a['hit_rate']:.1%} ({a['cached_tokens']}/{a['prompt_tokens']} prompt tokens cached)",
        ),
        ("(b) radixlm, radix cache disabled", b, "0 (disabled)"),
        (f"(c) transformers generate, batches of {HF_BATCH}", c, "-"),
    ]
    lines = [
        f"Workload: {NUM_PROMPTS} prompts, a shared {prefix_tokens}-token few-shot prefix + a distinct "
        f"question each ({a['prompt_tokens'] // NUM_PROMPTS} prompt tokens on average), {NEW_TOKENS} greedy "
        f"tokens each (EOS ignored), smollm2-135m fp32, 2 threads.",
        "",
        "| system | output tok/s | wall s | cache hit rate | peak RSS MB | load avg after |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for (name, r, hit), key in zip(rows, "abc"):
        lines.append(
            f"| {name} | {tps[key]:.1f} | {r['seconds']:.1f} | {hit} | {r['peak_rss_mb']:.0f} "
            f"| {r['load_after']:.2f} |"
        )
    ratio = f"- **a/c = {tps['a'] / tps['c']:.2f}** (issue 10 goal: >= 6)"
    if round_ratios and len(round_ratios) > 1:
        listed = ", ".join(f"{r:.2f}" for r in round_ratios)
        ratio = (
            f"- **a/c = {statistics.median(round_ratios):.2f}**, the median of {len(round_ratios)} "
            f"rounds of (a) and (c) run in turn ({listed}; issue 10 goal: >= 6)"
        )
    lines += [
        "",
        f"{ratio}, **a/b = {tps['a'] / tps['b']:.2f}**.",
        f"- Identical greedy outputs: a = b for {same_ab}/{NUM_PROMPTS} prompts, "
        f"a = c for {same_ac}/{NUM_PROMPTS} "
        "(transformers' padded batches round differently; the first diverging token flips the rest).",
        f"- Decode step at batch 1 (engine end to end, 64-step difference): {a['decode_step_ms']:.1f} ms; "
        f"bandwidth floor {a['floor_ms']:.1f} ms = {a['weight_mb']:.0f} MB fp32 weights / "
        f"{a['copy_gbs']:.1f} GB/s measured copy bandwidth (read + write) -> "
        f"{a['decode_step_ms'] / a['floor_ms']:.1f}x the floor.",
        "- Where (a)'s wall time went (`ModelRunner.forward` timed by step kind): "
        + "; ".join(
            f"{kind}: {n} x {secs / n * 1e3:.1f} ms ({tokens} tokens)"
            for kind, (n, secs, tokens) in sorted(a["forward_split"].items(), key=lambda kv: -kv[1][1])
        )
        + f"; the rest {a['seconds'] - sum(v[1] for v in a['forward_split'].values()):.2f} s.",
        f"- 1-minute load average before the run {load:.2f}, after each variant in the table "
        "(2 cores, a machine "
        "shared with other engineers: the ratios move with the load).",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="registry name or HF directory")
    ap.add_argument("--rounds", type=int, default=1, help="run (a) and (c) in turn this many times")
    add_json_argument(ap)
    ap.add_argument("--child", choices=["a", "b", "c"], help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.model_dir)
        return
    from radixlm.runtime.weights.model_registry import resolve_model
    from radixlm.runtime.weights.tokenizer_files import tokenizer_for

    model_dir = str(resolve_model(args.model)) if not os.path.isdir(args.model) else args.model
    prefix = build_prompts()[0].split("Question: Tell me")[0]
    prefix_tokens = len(tokenizer_for(model_dir).encode(prefix, add_special_tokens=False))
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in "abc"}
    order = ["b"] + ["a", "c"] * max(1, args.rounds)
    for variant in order:
        result = run_variant(variant, model_dir)
        result["load_after"] = os.getloadavg()[0]
        runs[variant].append(result)
        print(f"variant {variant}: {result['output_tokens'] / result['seconds']:.1f} tok/s", file=sys.stderr)

    def tps(r: dict[str, Any]) -> float:
        return r["output_tokens"] / r["seconds"]

    round_ratios = [tps(a) / tps(c) for a, c in zip(runs["a"], runs["c"])]
    # the median run of each variant (the lower middle one for an even count)
    results = {v: sorted(rs, key=tps)[(len(rs) - 1) // 2] for v, rs in runs.items()}
    table = render(results, load_before, prefix_tokens, round_ratios)
    print(table)
    a_over_c = statistics.median(round_ratios)
    headline = [
        *(
            {"label": label, "metric": "output tok/s", "value": tps(results[v])}
            for v, label in VARIANTS.items()
        ),
        {"label": "a/c", "metric": "ratio", "value": a_over_c},
        {"label": "a/b", "metric": "ratio", "value": tps(results["a"]) / tps(results["b"])},
        {"label": "decode step, batch 1", "metric": "ms", "value": results["a"]["decode_step_ms"]},
    ]
    summaries = {v: {k: x for k, x in r.items() if k != "outputs"} for v, r in results.items()}
    write_results(args.json, __spec__.name, headline, {"runs": summaries, "round_ratios": round_ratios})


if __name__ == "__main__":
    main()
