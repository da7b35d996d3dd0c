"""Speculative decoding (``--speculative-algorithm NGRAM`` or ``STANDALONE``) on against off, in one run
(issue 29).

The real SmolLM2-135M (``resolve_model("smollm2-135m")``) greedy-decodes five workloads at batch
sizes 1, 8 and 32: four copy-heavy ones (rename a variable in a 60-line code file, answer by quoting
a ~1,500-token document, extract JSON fields present in the prompt, an agent's turn restating its
tool's output) and free-form chat. A scheduler
is driven directly (no HTTP): decode tok/s counts the tokens after each request's first one over the
time from the last first token to the end. Reported per cell: off and on tok/s, their ratio, the
acceptance rate (accepted / proposed draft tokens) and accepted tokens per verify step; and whether
the greedy outputs were identical. ``--repeats R``: each cell R times per mode, the modes taking
turns going first; speeds are the medians, ``ratio_runs`` each repeat's on/off. ``--algorithm
STANDALONE`` drafts with a draft model (``--draft-model``, default SmolLM2-135M itself: a sanity
check of the machinery's acceptance, not a speed claim, since the draft then costs as much per token
as the target).

    python -m benchmarks.workloads.speculative                       # ~15 min on 2 shared cores
    python -m benchmarks.workloads.speculative --batches 1 --tokens 64  # smoke
    python -m benchmarks.workloads.speculative --batches 8,32 --tokens 64 --repeats 4  # the no-loss check
    python -m benchmarks.workloads.speculative --spec-max-batch 64 --batches 1,2,4,8  # threshold
    python -m benchmarks.workloads.speculative --algorithm STANDALONE --batches 1 --num-steps 4
    python -m benchmarks.workloads.speculative --algorithm STANDALONE --draft-model random --batches 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from radixlm.runtime.messages import FlushCacheReq, TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.server_args import ServerArgs
from radixlm.runtime.weights.model_registry import resolve_model


def _code_file() -> str:
    lines = ["def summarize(records):", '    """Sum the amounts of valid records."""', "    total = 0"]
    for i in range(27):
        lines.append(f"    if records[{i}].amount > {i * 3}:")
        lines.append(f"        total += records[{i}].amount * {i % 5 + 1}")
    lines += ["    return total", ""]
    return "\n".join(lines)


def _document() -> str:
    topics = ["harbor", "railway", "orchard", "library", "bridge", "market", "observatory", "mill"]
    paragraphs = []
    for i, topic in enumerate(topics * 3):
        paragraphs.append(
            f"Section {i + 1}. The town's {topic} was rebuilt in {1850 + 7 * i} after the flood. "
            f"Its keeper, number {i + 11}, kept a ledger of every visitor, every repair and every "
            f"storm, and the council read the ledger aloud each spring so that the {topic} would "
            f"never again be neglected. The cost of the work came to {300 + 41 * i} crowns."
        )
    return "\n\n".join(paragraphs)


def _record() -> str:
    return (
        "Customer record: name Alice Marchetti; email alice.marchetti@example.org; phone +39 055 "
        "123 4567; city Florence; account 88213-B; plan premium; joined 2019-04-12; last order "
        "#55102 of 3 items totalling 184.50 EUR; newsletter yes; preferred contact email."
    )


def _agent_turns() -> list[dict[str, str]]:
    """An agent's turns: a request, the assistant's tool call, then the tool's output and the loop's
    ask to pass it on, which the answer restates."""
    shelves = ["A1", "A4", "B2", "B7", "C3", "C9", "D5", "E1"]
    items = [
        "bolts M6",
        "washers 8 mm",
        "hinges",
        "brackets",
        "cable ties",
        "wall plugs",
        "screws 4x40",
        "nails",
    ]
    lines = [
        f"- {item} #{i}: {17 * i + 5} units on shelf {shelves[(3 * i) % 8]}"
        for i, item in enumerate(items * 2)
    ]
    return [
        {"role": "user", "content": "What is in warehouse B?"},
        {"role": "assistant", "content": 'inventory_lookup(warehouse="B")'},
        {
            "role": "user",
            "content": "Tool result:\n"
            + "\n".join(lines)
            + "\n\nCopy the tool result above for me, word for word.",
        },
    ]


WORKLOADS: dict[str, str | list[dict[str, str]]] = {
    "code-edit": f"Here is a Python file:\n\n{_code_file()}\nRewrite the whole file with the variable "
    "`total` renamed to `running_sum`. Output only the code.",
    "doc-quote": f"{_document()}\n\nQuote sections 1 to 6 of the document above word for word.",
    "json-extract": f"{_record()}\n\nExtract name, email, phone, city, account, plan, joined and the "
    "last order as a JSON object with those keys, values copied exactly from the record.",
    "agent-loop": _agent_turns(),
    "chat": "Tell me a story about a fox who learns to play the violin.",
}


def random_draft(tokenizer: Any, vocab_size: int) -> str:
    """A 1-layer random Llama with the target's tokenizer in a temporary directory: a draft that is
    (almost) always rejected, for the verify path's overhead."""
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    out = tempfile.mkdtemp(prefix="random-draft-")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _prompt_ids(tokenizer: Any, prompt: str | list[dict[str, str]]) -> list[int]:
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def prepare(sched: Scheduler, ids: list[int], tag: str) -> None:
    """Empty the radix cache, then cache the prompt alone: each cell starts from the same state in
    both modes, and no earlier cell's answer is there for the n-gram proposer's tree lookup to copy
    (an earlier repeat's identical greedy answer would draft the whole run)."""
    sched.handle(FlushCacheReq())
    run_cell(sched, ids, 1, 1, tag)  # one new token: sampled from the prompt's logits, never cached


def run_cell(sched: Scheduler, ids: list[int], batch: int, tokens: int, tag: str) -> dict[str, Any]:
    before = dict(sched.stats())
    for i in range(batch):
        params = SamplingParams(temperature=0, max_new_tokens=tokens)
        sched.handle(TokenizedGenerateReq(f"{tag}-{i}", list(ids), params, stream=True))
    outputs: dict[str, list[int]] = {}
    first_at: dict[str, float] = {}
    step_ms: dict[str, list[float]] = {"verify": [], "decode": []}  # steps after every first token
    while sched.has_work():
        verifies_before = _verify_count(sched)
        started = time.perf_counter()
        outs = sched.step()
        took = time.perf_counter() - started
        if len(first_at) == batch:
            step_ms["verify" if _verify_count(sched) > verifies_before else "decode"].append(took * 1e3)
        for out in outs:
            outputs.setdefault(out.rid, []).extend(out.new_token_ids.tolist())
            first_at.setdefault(out.rid, time.perf_counter())
    end = time.perf_counter()
    decode_tokens = sum(len(v) - 1 for v in outputs.values())
    after = sched.stats()
    drafts = after.get("spec_draft_tokens", 0) - before.get("spec_draft_tokens", 0)
    accepted = after.get("spec_accepted_tokens", 0) - before.get("spec_accepted_tokens", 0)
    verifies = after.get("spec_verify_steps", 0) - before.get("spec_verify_steps", 0)
    kept_plain = after.get("spec_slower_steps", 0) - before.get("spec_slower_steps", 0)
    return {
        "tok_s": decode_tokens / max(end - max(first_at.values()), 1e-9) if batch == 1 else None,
        "tok_s_total": decode_tokens / max(end - min(first_at.values()), 1e-9),
        "outputs": [outputs[k] for k in sorted(outputs)],
        "accept_rate": accepted / drafts if drafts else 0.0,
        "accepted_per_verify": accepted / verifies if verifies else 0.0,
        "tokens_per_verify": (accepted + verifies) / verifies if verifies else 0.0,
        "verify_steps": verifies,
        "kept_plain_steps": kept_plain,
        "verify_step_ms": _median(step_ms["verify"]),
        "decode_step_ms": _median(step_ms["decode"]),
    }


def _verify_count(sched: Scheduler) -> int:
    return sched.speculator.counts["spec_verify_steps"] if sched.speculator is not None else 0


def _median(xs: list[float]) -> float | None:
    return round(sorted(xs)[len(xs) // 2], 1) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--spec-max-batch", type=int, default=None, help="speculative_max_batch (None: default)")
    ap.add_argument("--num-steps", type=int, default=None)
    ap.add_argument(
        "--no-speed-check", action="store_true", help="verify every draft (the machinery, not the default)"
    )
    ap.add_argument("--algorithm", default="NGRAM", choices=["NGRAM", "STANDALONE"])
    ap.add_argument(
        "--draft-model", default="smollm2-135m", help="STANDALONE's draft model; random: a random 1-layer one"
    )
    ap.add_argument("--deterministic", action="store_true", help="enable_deterministic_inference")
    ap.add_argument(
        "--repeats", type=int, default=1, help="runs of each cell per mode, taking turns (medians reported)"
    )
    args = ap.parse_args()
    model = resolve_model("smollm2-135m")
    common = {"model": model, "device": "cpu", "num_threads": 2, "max_total_tokens": 96_000}
    if args.deterministic:
        common["enable_deterministic_inference"] = True
    off = Scheduler(ServerArgs(**common, speculative_algorithm="NONE"))
    draft = None
    if args.algorithm == "STANDALONE":
        draft = resolve_model(args.draft_model) if args.draft_model != "random" else None
        draft = draft or random_draft(off.tokenizer, off.runner.vocab_size)
    scheds = {
        "off": off,
        "on": Scheduler(
            ServerArgs(
                **common,
                speculative_algorithm=args.algorithm,
                speculative_draft_model_path=draft,
                speculative_num_steps=args.num_steps,
                speculative_max_batch=args.spec_max_batch,
                speculative_speed_check=not args.no_speed_check,
            )
        ),
    }
    tokenizer = scheds["off"].tokenizer
    rows = []
    for name in args.workloads.split(","):
        ids = _prompt_ids(tokenizer, WORKLOADS[name])
        for batch in (int(b) for b in args.batches.split(",")):
            key = "tok_s" if batch == 1 else "tok_s_total"
            runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
            for r in range(args.repeats):  # the modes take turns going first
                for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    sched = scheds[mode]
                    prepare(sched, ids, f"warm-{mode}-{r}")
                    runs[mode].append(run_cell(sched, ids, batch, args.tokens, f"{name}-{batch}-{mode}-{r}"))
            cells = {mode: cell[0] for mode, cell in runs.items()}
            speed = {mode: statistics.median(c[key] for c in cell) for mode, cell in runs.items()}
            row = {
                "workload": name,
                "prompt_tokens": len(ids),
                "batch": batch,
                "off_tok_s": round(speed["off"], 1),
                "on_tok_s": round(speed["on"], 1),
                "ratio": round(speed["on"] / speed["off"], 2),
                "ratio_runs": [round(on[key] / off[key], 2) for off, on in zip(runs["off"], runs["on"])],
                "accept_rate": round(cells["on"]["accept_rate"], 2),
                "accepted_per_verify": round(cells["on"]["accepted_per_verify"], 2),
                "tokens_per_verify": round(cells["on"]["tokens_per_verify"], 2),
                "verify_steps": cells["on"]["verify_steps"],
                # steps with drafts that the speed check ran plain (expected slower)
                "kept_plain_steps": cells["on"]["kept_plain_steps"],
                "off_step_ms": cells["off"]["decode_step_ms"],
                "on_verify_step_ms": cells["on"]["verify_step_ms"],
                "on_decode_step_ms": cells["on"]["decode_step_ms"],
                # verify steps whose attention read each request's rows as one group, all cells so far
                "grouped_steps": getattr(scheds["on"].runner.attn_backend, "grouped_decode_steps", None),
                "identical": all(c["outputs"] == cells["off"]["outputs"] for c in runs["off"] + runs["on"]),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    for sched in scheds.values():
        sched.shutdown()


if __name__ == "__main__":
    main()
