"""Where a batch-1 embedding's time goes: per sentence, the tokenizer (the wrapper's call and the
backend's), the encoder forward alone (on one thread, also without the column panels of its weights,
i.e. the product paths from before ``panel_linear``; and on the thread count ``ThreadChoice`` picks),
a scheduler driven in this thread (intake, one step, the answer), and ``Engine.encode`` (adds the
caller-to-loop-thread hop). The stages alternate sentence by sentence, so a busy machine slows all
alike; medians of wall time.

    python -m benchmarks.workloads.embedding_stages [--model all-minilm-l6-v2] [--threads 2] [--fp16-weights]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fp16-weights", action="store_true", help="encoder_fp16_weights=True")
    args = ap.parse_args()
    import torch

    from benchmarks.workloads.embeddings import sentences
    from radixlm.runtime.engine.engine import Engine
    from radixlm.runtime.messages import EncodeReq
    from radixlm.runtime.pooling.encoder_batches import _forward
    from radixlm.runtime.pooling.fast_tokenize import encode_text
    from radixlm.runtime.scheduler.scheduler import Scheduler
    from radixlm.runtime.server_args import ServerArgs
    from radixlm.runtime.weights.model_registry import resolve_model

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    texts = sentences(args.sentences)
    common = dict(model=path, device="cpu", dtype="float32", num_threads=args.threads, is_embedding=True)
    common["encoder_fp16_weights"] = args.fp16_weights
    engine = Engine(**common)
    sched = Scheduler(ServerArgs(**common))
    tok = sched.tokenizer
    ids = [encode_text(tok, t) for t in texts]
    method = sched.encoder.pooling.method

    def forward(i: int) -> None:
        _forward(sched.runner, [ids[i]], [None], "embed", method)

    def one_thread(i: int) -> None:
        torch.set_num_threads(1)
        forward(i)
        torch.set_num_threads(args.threads)

    layers = [m for m in sched.runner.model.modules() if getattr(m, "panels", None) is not None]
    panels = [m.panels for m in layers]

    def without_panels(i: int) -> None:
        for m in layers:
            m.panels = None
        try:
            one_thread(i)
        finally:
            for m, p in zip(layers, panels, strict=True):
                m.panels = p

    def chosen(i: int) -> None:
        threads = sched.encoder.threads
        threads.run(len(ids[i]), lambda: forward(i)) if threads is not None else forward(i)

    def scheduler(i: int) -> None:
        sched.handle(EncodeReq(f"r{i}", "embed", [ids[i]]))
        while sched.has_work():
            sched.step()
            sched.take_replies()

    stages = {
        "tokenizer_call": lambda i: tok(texts[i])["input_ids"],
        "backend_encode": lambda i: tok._tokenizer.encode(texts[i]).ids,
        "forward_1_thread": one_thread,
        "forward_1_thread_without_panels": without_panels,
        "forward_thread_choice": chosen,
        "scheduler_in_thread": scheduler,
        "engine_encode": lambda i: engine.encode(texts[i]),
    }
    ms: dict[str, list[float]] = {k: [] for k in stages}
    try:
        with torch.inference_mode():
            for _ in range(args.repeats):
                for i in range(len(texts)):
                    for name, fn in stages.items():
                        start = time.perf_counter()
                        fn(i)
                        ms[name].append((time.perf_counter() - start) * 1e3)
    finally:
        engine.shutdown()
        sched.shutdown()
    medians = {k: round(statistics.median(v), 3) for k, v in ms.items()}
    report = {"model": args.model, "threads": args.threads, "fp16_weights": args.fp16_weights}
    print(json.dumps({**report, "median_ms": medians}, indent=1))


if __name__ == "__main__":
    main()
