"""The checks every architecture passes against transformers on a tiny random checkpoint.

``Reference`` holds our ``ModelRunner`` and the transformers model on the same directory; the
``check_*`` functions compare logits through our real KV pools (prefill, extend on a cached prefix,
decode steps, a mixed batch); ``check_engine_greedy`` runs greedy generation through a whole
``Engine`` with chunked prefill, radix reuse and a small pool (requests wait and may be retracted), and
compares the tokens with transformers' ``generate``. An architecture's test file parametrizes a
``Reference`` over its configs and calls them all (see ``tests/runtime/models/test_llama_family.py``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers.model_helpers import PagedSession, assert_logits_close, make_runner


class Reference:
    """Our runner and the transformers model on the same tiny checkpoint."""

    def __init__(
        self, model_dir: str | Path, rtol: float = 1e-4, served: str | Path | None = None, **runner_overrides
    ) -> None:
        """``served``: what our runner loads instead of ``model_dir`` (e.g. the same weights as GGUF)."""
        from transformers import AutoModelForCausalLM

        self.model_dir = Path(model_dir)
        self.rtol = rtol
        self.runner = make_runner(served or model_dir, **runner_overrides)
        self.hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        self.session = PagedSession(self.runner)

    @torch.no_grad()
    def logits(self, tokens: list[int]) -> torch.Tensor:
        return self.hf(torch.tensor([tokens])).logits[0]

    def close_enough(self, ours: torch.Tensor, ref: torch.Tensor) -> None:
        assert_logits_close(ours, ref, rtol=self.rtol)


def tokens(n: int, seed: int, low: int = 3, high: int = 300) -> list[int]:
    return torch.randint(low, high, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def check_prefill(ref: Reference) -> None:
    seq = tokens(23, 0)
    row = ref.session.open()
    ref.close_enough(ref.session.extend([row], [seq], all_logits=True)[0], ref.logits(seq))
    ref.session.close(row)


def check_extend_on_cached_prefix(ref: Reference) -> None:
    seq = tokens(30, 1)
    full = ref.logits(seq)
    s = ref.session
    row = s.open()
    s.extend([row], [seq[:10]])
    ref.close_enough(s.extend([row], [seq[10:17]], all_logits=True)[0], full[10:17])
    other = s.share_prefix(row, 6)  # a second request on the first one's cached KV
    ref.close_enough(s.extend([other], [seq[6:30]], all_logits=True)[0], full[6:30])
    s.close(other)
    s.close(row)


def check_decode(ref: Reference, length: int = 12) -> None:
    seq = tokens(length, 2)
    full = ref.logits(seq)
    s = ref.session
    row = s.open()
    ref.close_enough(s.extend([row], [seq[:5]])[0], full[4])
    for i in range(5, length):
        ref.close_enough(s.decode([row], [seq[i]])[0], full[i])
    s.close(row)


def check_mixed_batch(ref: Reference) -> None:
    """Four requests of different lengths, two on cached prefixes, extend together then decode."""
    seqs = [tokens(n, 10 + n) for n in (1, 7, 13, 40)]
    fulls = [ref.logits(seq) for seq in seqs]
    s = ref.session
    rows = [s.open() for _ in seqs]
    s.extend([rows[2], rows[3]], [seqs[2][:4], seqs[3][:20]])
    prefix = [0, 0, 4, 20]
    ends = [len(seq) - 1 for seq in seqs]
    outs = s.extend(
        rows, [seq[p:e] if e > p else seq[:1] for seq, p, e in zip(seqs, prefix, ends)], all_logits=True
    )
    for full, p, e, out in zip(fulls, prefix, ends, outs):
        if e > p:
            ref.close_enough(out, full[p:e])
    dec_rows, dec_tokens, dec_refs = rows[1:], [seq[-1] for seq in seqs[1:]], [f[-1] for f in fulls[1:]]
    ref.close_enough(s.decode(dec_rows, dec_tokens), torch.stack(dec_refs))
    for row in rows:
        s.close(row)


def check_all_logits(ref: Reference) -> None:
    check_prefill(ref)
    check_extend_on_cached_prefix(ref)
    check_decode(ref)
    check_mixed_batch(ref)
    assert ref.runner.kv_pool.allocator.available_size() == ref.runner.kv_pool.allocator.num_slots, (
        "every KV slot returns to the pool"
    )


def check_engine_greedy(
    model_dir: str | Path, max_new_tokens: int = 16, served: str | Path | None = None, **engine_overrides
) -> None:
    """Greedy tokens through an Engine (chunks of 8, radix reuse, a 160-slot pool)
    equal transformers' greedy ``generate`` on the same prompts. ``served``: what the engine loads
    instead of ``model_dir`` (e.g. the same weights as GGUF)."""
    from transformers import AutoModelForCausalLM

    from tests.helpers.engines import make_engine

    shared = tokens(20, 40)
    prompts = [shared + tokens(4 + 3 * i, 50 + i) for i in range(6)]
    hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    expected = []
    with torch.no_grad():
        for p in prompts:
            out = hf.generate(
                torch.tensor([p]),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                min_new_tokens=max_new_tokens,
            )
            expected.append(out[0, len(p) :].tolist())
    args = dict(
        device="cpu",
        dtype="float32",
        quantization="none",
        num_threads=1,
        chunked_prefill_size=8,
        max_total_tokens=160,
        attention_backend="torch",
    )
    args.update(engine_overrides)
    engine = make_engine(str(served or model_dir), **args)
    try:
        params = {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
        first = engine.generate(input_ids=prompts[0], sampling_params=params)["output_ids"]
        assert first == expected[0]
        outs = [o["output_ids"] for o in engine.generate(input_ids=prompts, sampling_params=params)]
        assert outs == expected
        engine.check_kv_integrity()
    finally:
        engine.shutdown()
