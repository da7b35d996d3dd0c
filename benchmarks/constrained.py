"""Constrained decoding costs on the real tokenizer: compile time per grammar and mask cost per row.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/constrained.py [--tokenizer DIR]`` (default: resolve_model).
Mask cost = ``GrammarMatcher.fill_bitmask`` for one row, over the states random generation visits.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transformers import AutoTokenizer

from radixlm.runtime.constrained import GrammarBackend
from tests.runtime.constrained_cases import REGEX_CASES, SCHEMA_CASES
from tests.runtime.constrained_driver import allowed_ids, closing_tokens


def _load_tokenizer(path: str | None):
    if path is None:
        from radixlm.runtime.weights.model_registry import resolve_model

        path = resolve_model("smollm2-135m")
    return AutoTokenizer.from_pretrained(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args()
    tok = _load_tokenizer(args.tokenizer)
    start = time.perf_counter()
    backend = GrammarBackend(tok, [tok.eos_token_id], vocab_size=49152)
    print(f"vocabulary: {time.perf_counter() - start:.3f} s")
    cases = [("regex", rx) for _, rx in REGEX_CASES] + [("json", json.dumps(s)) for _, s in SCHEMA_CASES]
    cases += [("json_object", ""), ("dtype", "str"), ("choices", '["yes", "no", "maybe"]')]
    grammars = [backend.submit(kind, text).result() for kind, text in cases]
    compile_ms = sorted(g.compile_seconds * 1e3 for g in grammars)
    print(f"compile ms over {len(grammars)} grammars: median {statistics.median(compile_ms):.1f}, "
          f"max {compile_ms[-1]:.1f}; json_object {grammars[-3].compile_seconds * 1e3:.1f}")
    closing = closing_tokens(backend.vocab.token_bytes)
    rng = np.random.default_rng(0)
    bitmask = backend.new_bitmask(8)
    costs: list[float] = []
    for grammar in grammars:
        matcher = grammar.new_matcher()
        for step in range(args.tokens):
            if matcher.is_terminated():
                break
            t0 = time.perf_counter()
            matcher.fill_bitmask(bitmask, step % 8)
            costs.append(time.perf_counter() - t0)
            ids = allowed_ids(bitmask, step % 8)
            pref = ids[closing[ids[ids < len(closing)]]] if rng.random() < 0.3 else ids
            matcher.accept_token(int(rng.choice(pref if len(pref) else ids)))
    us = np.array(costs) * 1e6
    print(f"fill_bitmask per row over {len(us)} steps: mean {us.mean():.1f} us, median {np.median(us):.1f} us, "
          f"p99 {np.percentile(us, 99):.1f} us, max {us.max():.1f} us")
    backend.shutdown()


if __name__ == "__main__":
    main()
