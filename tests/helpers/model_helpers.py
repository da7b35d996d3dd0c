"""Tiny random Hugging Face models and a harness that runs a ModelRunner like the scheduler would.

- ``tiny_llama_config`` / ``tiny_qwen2_config`` / ``tiny_qwen3_config`` + ``save_tiny_model``: a
  random transformers model (and a byte-level ChatML tokenizer) saved as a HF directory, seconds-fast.
- ``make_runner``: a CPU fp32 ``ModelRunner`` with the torch attention backend and small pools.
- ``PagedSession``: allocates KV slots and ``req_to_token`` rows, builds ``ForwardBatch``es for
  extend and decode, and can start a request on another request's cached prefix.
"""

from __future__ import annotations

from pathlib import Path

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.runtime.executor.model_runner import ModelRunner
from radixlm.runtime.server_args import ServerArgs
from tests.helpers.gguf_writer import llamacpp_permute, save_tiny_gguf  # noqa: F401 - re-exported

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1 (bos), 2 (eos)
TINY_VOCAB = 320  # > 3 specials + 256 bytes of the tiny tokenizer


def tiny_kwargs(**overrides) -> dict:
    """The tiny shape every test family shares (2 layers, hidden 64, 4 heads, 2 KV heads, the tiny
    vocabulary), with ``overrides``: keyword arguments for any transformers config class."""
    kwargs = dict(
        vocab_size=TINY_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        initializer_range=0.1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=False,
    )
    kwargs.update(overrides)
    return kwargs


def tiny_llama_config(**overrides):
    """A 2-layer Llama with GQA (4 query heads, 2 KV heads, head_dim 16)."""
    from transformers import LlamaConfig

    return LlamaConfig(**tiny_kwargs(**overrides))


def tiny_qwen2_config(**overrides):
    """A 2-layer Qwen2 (q/k/v biases), GQA."""
    from transformers import Qwen2Config

    return Qwen2Config(**tiny_kwargs(**overrides))


def tiny_qwen3_config(**overrides):
    """A 2-layer Qwen3 (per-head q/k RMSNorm), GQA, head_dim 32 (not hidden/heads)."""
    from transformers import Qwen3Config

    return Qwen3Config(**tiny_kwargs(head_dim=32, **overrides))


def save_tiny_tokenizer(path: str | Path) -> None:
    """A byte-level tokenizer (3 ChatML specials + 256 byte tokens, no merges) with a ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    # NOTE: alphabet() comes from a set: sort it, or token ids change from process to process.
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(str(path))


def save_tiny_model(config, path: str | Path, seed: int = 0, with_tokenizer: bool = True) -> Path:
    """Random-initialise a transformers causal LM from ``config`` (fp32) and save it to ``path``."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # transformers starts norms at 1 and biases at 0; make them matter
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.normal_(1.0 if "norm" in name else 0.0, 0.2)
    model.save_pretrained(str(path))
    if with_tokenizer:
        save_tiny_tokenizer(path)
    return path


def make_runner(model: str | Path, **overrides) -> ModelRunner:
    """A CPU fp32 ModelRunner (unquantized unless ``quantization`` is given) with the torch backend,
    one thread and small pools."""
    args = dict(
        model=str(model),
        device="cpu",
        dtype="float32",
        attention_backend="torch",
        quantization="none",
        num_threads=1,
        max_total_tokens=4096,
        max_running_requests=16,
        context_length=512,
    )
    args.update(overrides)
    return ModelRunner(ServerArgs(**args))


class PagedSession:
    """Requests on a runner's real pools: ``open``, ``extend``, ``decode``, ``share_prefix``, ``close``.

    Each request is a ``req_to_token`` row; the session tracks its length and the KV slots it owns
    (a request started with ``share_prefix`` reads but does not own the shared slots).
    """

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.seq_lens: dict[int, int] = {}
        self.owned: dict[int, list[torch.Tensor]] = {}

    def open(self) -> int:
        row = self.runner.req_to_token_pool.alloc()
        assert row is not None, "no free req_to_token rows"
        self.seq_lens[row], self.owned[row] = 0, []
        return row

    def share_prefix(self, src_row: int, length: int) -> int:
        """A new request whose first ``length`` tokens reuse ``src_row``'s cached KV slots."""
        assert length <= self.seq_lens[src_row]
        row = self.open()
        table = self.runner.req_to_token_pool
        table.write(row, 0, table.req_to_token[src_row, :length].clone())
        self.seq_lens[row] = length
        return row

    def close(self, row: int) -> None:
        for slots in self.owned.pop(row):
            self.runner.kv_pool.allocator.free(slots)
        del self.seq_lens[row]
        self.runner.req_to_token_pool.free(row)

    def extend(
        self, rows: list[int], new_tokens: list[list[int]], all_logits: bool = False
    ) -> list[torch.Tensor]:
        """Append ``new_tokens[i]`` to request ``rows[i]`` in one extend step.

        Returns per request the logits of its last new token ``[vocab]``, or of all its new tokens
        ``[len, vocab]`` with ``all_logits``.
        """
        ext = [len(t) for t in new_tokens]
        fb = self._build(ForwardMode.EXTEND, rows, new_tokens, all_logits)
        logits = self.runner.forward(fb)
        if not all_logits:
            return list(logits.unbind(0))
        return list(logits.split(ext, dim=0))

    def decode(self, rows: list[int], tokens: list[int]) -> torch.Tensor:
        """One decode step: append ``tokens[i]`` to ``rows[i]``; logits ``[bs, vocab]``."""
        return self.runner.forward(self._build(ForwardMode.DECODE, rows, [[t] for t in tokens], False))

    def _build(
        self, mode: ForwardMode, rows: list[int], new_tokens: list[list[int]], all_logits: bool
    ) -> ForwardBatch:
        runner, dev = self.runner, self.runner.device
        prefix = [self.seq_lens[r] for r in rows]
        ext = [len(t) for t in new_tokens]
        out_loc = runner.kv_pool.allocator.alloc(sum(ext))
        assert out_loc is not None, "KV pool exhausted"
        start = 0
        for row, p, n in zip(rows, prefix, ext):
            slots = out_loc[start : start + n]
            runner.req_to_token_pool.write(row, p, slots)
            self.owned[row].append(slots)
            self.seq_lens[row] = p + n
            start += n
        seq = [p + n for p, n in zip(prefix, ext)]
        ends = torch.tensor(ext).cumsum(0)
        logits_indices = torch.arange(int(ends[-1])) if all_logits else ends - 1

        def t(values) -> torch.Tensor:
            return torch.as_tensor(values, dtype=torch.int64, device=dev)

        return ForwardBatch(
            mode=mode,
            input_ids=t([tok for toks in new_tokens for tok in toks]),
            positions=t([i for p, n in zip(prefix, ext) for i in range(p, p + n)]),
            req_pool_indices=t(rows),
            seq_lens=t(seq),
            extend_prefix_lens=t(prefix),
            extend_seq_lens=t(ext),
            out_cache_loc=out_loc.to(dev),
            logits_indices=logits_indices.to(dev),
            req_to_token_pool=runner.req_to_token_pool,
            kv_pool=runner.kv_pool,
            attn_backend=runner.attn_backend,
            seq_lens_cpu=seq,
            extend_prefix_lens_cpu=prefix,
            extend_seq_lens_cpu=ext,
        )


# A byte-level token sequence for the tiny models' logit checks.
TINY_SEQ = [1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 2, 40, 50, 60, 70]


def prefill_then_decode_logits(runner: ModelRunner, seq: list[int], decodes: int = 3) -> list[torch.Tensor]:
    """The prefill logits of ``seq[:-decodes]``, then the logits of each of ``decodes`` decode steps
    feeding the rest of ``seq``, on a fresh row that is freed afterwards."""
    s = PagedSession(runner)
    row = s.open()
    outs = [s.extend([row], [seq[:-decodes]], all_logits=True)[0]]
    outs += [s.decode([row], [t])[0] for t in seq[-decodes:]]
    s.close(row)
    return outs


def greedy_generate(runner: ModelRunner, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Batched greedy decoding (no EOS stop): one extend of all prompts, then batched decode steps."""
    session = PagedSession(runner)
    rows = [session.open() for _ in prompts]
    last = torch.stack(session.extend(rows, prompts)).argmax(-1).tolist()
    outputs = [[tok] for tok in last]
    for _ in range(max_new_tokens - 1):
        last = session.decode(rows, last).argmax(-1).tolist()
        for out, tok in zip(outputs, last):
            out.append(tok)
    for row in rows:
        session.close(row)
    return outputs


def assert_logits_close(ours: torch.Tensor, ref: torch.Tensor, rtol: float = 1e-4) -> None:
    """``max|ours - ref| <= rtol * max|ref|`` (relative to the logits' scale)."""
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    err = (ours.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    assert err <= rtol * scale, f"max abs diff {err:.3e} > {rtol:g} * max|ref| {scale:.3e}"
