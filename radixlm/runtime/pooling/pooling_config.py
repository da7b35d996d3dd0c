"""How an embedding model turns token states into one vector, read from its checkpoint directory.

sentence-transformers' layout (``modules.json`` naming a Pooling module, its ``config.json``, and an
optional Normalize module) decides; a checkpoint without it gets its family's convention: a decoder
pools its last token (Qwen3-Embedding, e5-mistral), an encoder its first ([CLS]), both normalized.
``dimensions`` (Matryoshka truncation) is allowed where ``config.json`` says ``is_matryoshka`` or
lists ``matryoshka_dimensions``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

PoolingMethod = Literal["last", "mean", "cls"]
_ST_MODES: dict[str, PoolingMethod] = {"lasttoken": "last", "mean": "mean", "cls": "cls"}
_ST_FLAGS: dict[str, PoolingMethod] = {
    "pooling_mode_lasttoken": "last",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
}


@dataclass(frozen=True)
class PoolingConfig:
    method: PoolingMethod
    normalize: bool
    matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] = ()

    @classmethod
    def from_checkpoint(cls, model_dir: str, hf_config: dict[str, Any], is_encoder: bool) -> PoolingConfig:
        """The checkpoint's pooling; ValueError for a sentence-transformers module we do not run."""
        dims = tuple(int(d) for d in hf_config.get("matryoshka_dimensions") or ())
        matryoshka = bool(hf_config.get("is_matryoshka")) or bool(dims)
        modules_file = Path(model_dir) / "modules.json"
        if not modules_file.is_file():
            return cls("cls" if is_encoder else "last", True, matryoshka, dims)
        modules = json.loads(modules_file.read_text())
        method: PoolingMethod = "cls" if is_encoder else "last"
        normalize = False
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            if kind == "Pooling":
                method = _st_pooling(Path(model_dir) / module.get("path", ""))
            elif kind == "Normalize":
                normalize = True
            elif kind != "Transformer":
                raise ValueError(
                    f"{modules_file}: sentence-transformers module {module.get('type')!r} is not supported "
                    "(Transformer, Pooling and Normalize are)"
                )
        return cls(method, normalize, matryoshka, dims)


def _st_pooling(pooling_dir: Path) -> PoolingMethod:
    cfg = json.loads((pooling_dir / "config.json").read_text())
    if "pooling_mode" in cfg:  # sentence-transformers >= 6
        mode = str(cfg["pooling_mode"])
        if mode not in _ST_MODES:
            raise ValueError(
                f"{pooling_dir}: pooling_mode {mode!r} is not supported ({', '.join(_ST_MODES)})"
            )
        return _ST_MODES[mode]
    chosen = [method for flag, method in _ST_FLAGS.items() if cfg.get(flag)]
    others = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v and k not in _ST_FLAGS]
    if len(chosen) != 1 or others:
        raise ValueError(f"{pooling_dir}: exactly one of {', '.join(_ST_FLAGS)} must be set")
    return chosen[0]
