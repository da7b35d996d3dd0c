"""Program workloads: compiled graphs vs the interpreter vs no radix cache vs plain HF generate.

    python -m benchmarks.workloads.programs [--model smollm2-135m] [--instances 32] [--max-tokens 16]
        [--threads 1] [--json PATH]

Workloads (``--instances`` programs each, run with ``run_batch``, greedy): few-shot QA with a shared
5-shot prefix, multi-turn chat, tree of thought (fork/join), JSON-style extraction (regex).
Configurations: (a) compiled request graphs, (b) interpreter, (c) interpreter with the radix cache
disabled, (d) the same generations as sequential Hugging Face ``generate`` calls (naive baseline).
Prints programs/s, output tokens/s and the cache hit rate of each, and the ratios a/d and a/c.
Every configuration uses ``--threads`` torch threads. The baseline (d) runs the interpreter's gen
prompts (recorded with a placeholder answer " 1" for earlier gens) with ``max_new_tokens`` and no
stop strings or regex, and skips select's scoring requests.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import radixlm as sgl
from benchmarks.harness import add_json_argument, write_results
from radixlm.program.context import as_text, is_batch

SHOTS = [
    ("What is the capital of France?", "Paris"),
    ("What is 3 + 4?", "7"),
    ("What color is the sky?", "Blue"),
    ("What is the opposite of hot?", "Cold"),
    ("How many legs does a spider have?", "Eight"),
]


def make_programs(max_tokens: int) -> dict[str, tuple[Any, Callable[[int], dict[str, Any]]]]:
    @sgl.function
    def few_shot(s, question):
        for q, a in SHOTS:
            s += f"Q: {q}\nA: {a}\n\n"
        s += f"Q: {question}\nA:" + sgl.gen("answer", max_tokens=max_tokens, stop="\n")

    @sgl.function
    def chat(s, topic):
        s += sgl.system("You are a helpful assistant.")
        s += sgl.user(f"Tell me one fact about {topic}.")
        s += sgl.assistant(sgl.gen("fact", max_tokens=max_tokens))
        s += sgl.user("Tell me another one.")
        s += sgl.assistant(sgl.gen("fact2", max_tokens=max_tokens))

    @sgl.function
    def tree(s, problem):
        s += f"Problem: {problem}\n"
        forks = s.fork(3)
        forks += lambda i: f"Idea {i + 1}:" + sgl.gen("idea", max_tokens=max_tokens, stop="\n")
        forks.join()
        s += "Best idea number:" + sgl.select("best", choices=[" 1", " 2", " 3"])

    @sgl.function
    def extraction(s, person):
        s += f"Text: {person} is 30 years old and lives in Oslo.\nName:"
        s += sgl.gen("name", max_tokens=max_tokens, stop="\n") + "\nAge:" + sgl.gen("age", regex=r" \d{1,3}")

    return {
        "few_shot_qa": (few_shot, lambda i: {"question": f"What is {i} + {i}?"}),
        "multi_turn": (chat, lambda i: {"topic": f"topic number {i}"}),
        "tree_of_thought": (tree, lambda i: {"problem": f"Plan trip number {i}."}),
        "json_extraction": (extraction, lambda i: {"person": f"Person{i}"}),
    }


def output_tokens(states: list[Any]) -> int:
    total = 0
    for state in states:
        for meta in state.executor.meta_info.values():
            for m in meta if isinstance(meta, list) else [meta]:
                if isinstance(m, dict):
                    total += m.get("completion_tokens") or 0
    return total


def run_config(
    engine_kwargs: dict[str, Any], model: str, execution: str, workloads: dict, n: int
) -> dict[str, float]:
    from radixlm.runtime.engine import Engine

    engine = Engine(model=model, **engine_kwargs)
    backend = sgl.EngineBackend(engine)
    try:
        start, programs, tokens = time.perf_counter(), 0, 0
        for prog, args in workloads.values():
            states = prog.run_batch(
                [args(i) for i in range(n)], backend=backend, temperature=0, execution=execution
            )
            programs += len(states)
            tokens += output_tokens(states)
        elapsed = time.perf_counter() - start
        info = engine.get_server_info()
        hit = info.get("cache_hit_rate", float("nan"))
    finally:
        engine.shutdown()
    return {"programs_per_s": programs / elapsed, "tokens_per_s": tokens / elapsed, "cache_hit_rate": hit}


def run_hf_baseline(model: str, workloads: dict, n: int, max_tokens: int, threads: int) -> dict[str, float]:
    """Each program's generations as sequential ``generate`` calls on the interpreter's prompts."""
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.weights.model_registry import resolve_model
    from radixlm.runtime.weights.tokenizer_files import tokenizer_for

    torch.set_num_threads(threads)
    path = Path(resolve_model(model))
    tok = tokenizer_for(model)
    gguf = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
    folder = str(path.parent if gguf else path)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **gguf).eval()
    recorder = _PromptRecorder(tok.chat_template)
    for prog, args in workloads.values():
        prog.run_batch([args(i) for i in range(n)], backend=recorder, execution="interpreter", num_threads=1)
    start, tokens = time.perf_counter(), 0
    with torch.inference_mode():
        for prompt in recorder.prompts:
            ids = tok(prompt, return_tensors="pt").input_ids
            out = hf.generate(ids, max_new_tokens=max_tokens, do_sample=False)
            tokens += out.shape[1] - ids.shape[1]
    elapsed = time.perf_counter() - start
    programs = n * len(workloads)
    return {"programs_per_s": programs / elapsed, "tokens_per_s": tokens / elapsed, "cache_hit_rate": 0.0}


class _PromptRecorder(sgl.Backend):
    """Records every generation prompt of the interpreter, answering with a fixed text."""

    name = "recorder"

    def __init__(self, chat_template_source: str) -> None:
        super().__init__()
        self.source = chat_template_source
        self.prompts: list[str] = []

    def generate(self, req: dict[str, Any]) -> Any:
        batch = is_batch(req["input_segments"])
        contexts = req["input_segments"] if batch else [req["input_segments"]]
        if req.get("sampling_params", {}).get("max_new_tokens") != 0:
            self.prompts.extend(as_text(c, self.name) for c in contexts)
        outs = [
            {"text": " 1", "meta_info": {"prompt_tokens": 1, "input_token_logprobs": [[0.0, 1, " 1"]]}}
            for _ in contexts
        ]
        return outs if batch else outs[0]

    def model_info(self) -> dict[str, Any]:
        return {"model_path": "recorder", "chat_template": self.source}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--instances", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-hf", action="store_true")
    add_json_argument(parser)
    args = parser.parse_args()
    workloads = make_programs(args.max_tokens)
    engine = {"num_threads": args.threads}
    results = {
        "a: compiled graphs": run_config(engine, args.model, "auto", workloads, args.instances),
        "b: interpreter": run_config(engine, args.model, "interpreter", workloads, args.instances),
        "c: interpreter, no radix cache": run_config(
            {**engine, "disable_radix_cache": True}, args.model, "interpreter", workloads, args.instances
        ),
    }
    if not args.skip_hf:
        results["d: HF generate, sequential"] = run_hf_baseline(
            args.model, workloads, args.instances, args.max_tokens, args.threads
        )
    print("| configuration | programs/s | output tokens/s | cache hit rate |\n|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['programs_per_s']:.2f} | {r['tokens_per_s']:.1f} | {r['cache_hit_rate']:.2f} |")
    a = results["a: compiled graphs"]["programs_per_s"]
    print(f"\na/c = {a / results['c: interpreter, no radix cache']['programs_per_s']:.2f}")
    if "d: HF generate, sequential" in results:
        print(f"a/d = {a / results['d: HF generate, sequential']['programs_per_s']:.2f}")
    headline = [
        {"label": name, "metric": "programs/s", "value": r["programs_per_s"]} for name, r in results.items()
    ]
    write_results(args.json, __spec__.name, headline, results)


if __name__ == "__main__":
    main()
