"""Custom logit processors the tests send to a server (importable there, so dill pickles them by name)."""

from __future__ import annotations

from typing import Any

import torch

from radixlm.runtime.sampling.custom_logit_processor import CustomLogitProcessor


class ForceToken(CustomLogitProcessor):
    """Every row may only emit its ``custom_params["token_id"]``."""

    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]]) -> torch.Tensor:
        out = torch.full_like(logits, float("-inf"))
        for row, params in enumerate(custom_param_list):
            out[row, params["token_id"]] = 0.0
        return out


class BanToken(CustomLogitProcessor):
    """Every row may emit anything but its ``custom_params["token_id"]``."""

    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]]) -> torch.Tensor:
        for row, params in enumerate(custom_param_list):
            logits[row, params["token_id"]] = float("-inf")
        return logits


class Identity(CustomLogitProcessor):
    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]]) -> torch.Tensor:
        return logits


class RaisesWhenAsked(CustomLogitProcessor):
    """Raises for a row whose params say ``{"fail": true}``; identity otherwise."""

    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]]) -> torch.Tensor:
        if any(p.get("fail") for p in custom_param_list):
            raise RuntimeError("asked to fail")
        return logits
