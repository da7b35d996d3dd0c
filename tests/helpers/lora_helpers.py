"""PEFT adapters on the tiny random models, and PEFT's own logits as the reference for LoRA tests."""

from __future__ import annotations

from pathlib import Path

import torch

ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_peft_adapter(
    base: str | Path,
    out: str | Path,
    rank: int = 8,
    alpha: float = 16.0,
    targets: list[str] | None = None,
    seed: int = 1,
    use_rslora: bool = False,
) -> Path:
    """A PEFT LoRA adapter for the model at ``base`` with random nonzero ``A`` and ``B`` (PEFT starts
    ``B`` at zero, which would make the adapter a no-op), saved as PEFT saves it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    cfg = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=targets or ALL_TARGETS,
        use_rslora=use_rslora,
        lora_dropout=0.0,
    )
    peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
    peft_model.save_pretrained(str(out))
    return Path(out)


class PeftReference:
    """The base model with one adapter applied by PEFT (None: the base alone), fp32 eager attention."""

    def __init__(self, base: str | Path, adapter: str | Path | None) -> None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            str(base), dtype=torch.float32, attn_implementation="eager"
        )
        if adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter))
        self.model = model.eval()

    @torch.no_grad()
    def logits(self, tokens: list[int]) -> torch.Tensor:
        """``[len(tokens), vocab]`` for one sequence."""
        return self.model(torch.tensor([tokens])).logits[0].float()

    @torch.no_grad()
    def greedy(self, prompt: list[int], n: int) -> list[int]:
        seq = list(prompt)
        for _ in range(n):
            seq.append(int(self.logits(seq)[-1].argmax()))
        return seq[len(prompt) :]


def greedy_under_adapter(
    runner, prompt: list[int], name: str | None, steps: int
) -> tuple[torch.Tensor, list[int]]:
    """A runner's prefill logits of ``prompt`` under its loaded adapter ``name`` (None: the base) and
    ``steps`` greedy tokens, driven through a ``PagedSession``."""
    from radixlm.runtime.executor.forward_batch import ForwardMode
    from tests.helpers.model_helpers import PagedSession

    lora = runner.lora
    slots = lora.assign([None if name is None else lora.get(name)])
    s = PagedSession(runner)
    row = s.open()
    fb = s._build(ForwardMode.EXTEND, [row], [prompt], True)
    fb.lora_slots = slots
    logits = runner.forward(fb)
    tokens = [int(logits[-1].argmax())]
    for _ in range(steps - 1):
        fb = s._build(ForwardMode.DECODE, [row], [[tokens[-1]]], False)
        fb.lora_slots = slots
        tokens.append(int(runner.forward(fb)[0].argmax()))
    s.close(row)
    return logits, tokens
