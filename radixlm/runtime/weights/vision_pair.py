"""A vision-language model served from llama.cpp's pair of files: the language model GGUF and its
``mmproj`` file (``--mmproj``), as one ``WeightSource`` of the Hugging Face checkpoint the projector
type names (``Idefics3ForConditionalGeneration`` for SmolVLM, ``Gemma3ForConditionalGeneration``).

The config is the one such a checkpoint carries: the language model's (translated from its GGUF
metadata) as ``text_config``, the tower's as ``vision_config``, the projector's fields and the ids of
the image tokens in the language model's own tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

from radixlm.runtime.weights.gguf_source import GGUFSource
from radixlm.runtime.weights.mmproj import MmprojFile
from radixlm.runtime.weights.source import StoredTensor, WeightSource

# the tokens each processor writes into a prompt (transformers' processors add any the tokenizer
# lacks, which would then fall outside the language model's vocabulary); the first is the placeholder
IMAGE_TOKENS = {
    "idefics3": ("<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"),
    "gemma3": ("<start_of_image>", "<image_soft_token>", "<end_of_image>"),
}


def image_token_ids(tokenizer: Any, kind: str, where: str) -> dict[str, int]:
    """Token -> id of projector type ``kind``'s image tokens; ValueError naming the first one
    ``tokenizer`` lacks."""
    vocab = tokenizer.get_vocab()
    for token in IMAGE_TOKENS[kind]:
        if token not in vocab:
            raise ValueError(f"{where}: the tokenizer has no {token} token, which {kind} image prompts need")
    return {token: int(vocab[token]) for token in IMAGE_TOKENS[kind]}


def _idefics3_fields(mmproj: MmprojFile, ids: dict[str, int]) -> dict[str, Any]:
    return {"model_type": "idefics3", "scale_factor": mmproj.scale_factor, "image_token_id": ids["<image>"]}


def _gemma3_fields(mmproj: MmprojFile, ids: dict[str, int]) -> dict[str, Any]:
    return {
        "model_type": "gemma3",
        "mm_tokens_per_image": mmproj.image_settings.tokens_per_crop,
        "boi_token_index": ids["<start_of_image>"],
        "image_token_index": ids["<image_soft_token>"],
        "eoi_token_index": ids["<end_of_image>"],
    }


_FIELDS = {"idefics3": _idefics3_fields, "gemma3": _gemma3_fields}


class VisionPairSource:
    """The language model GGUF's tensors and the mmproj file's, under the checkpoint's names."""

    def __init__(self, lm: WeightSource, mmproj: MmprojFile, tokenizer: Any) -> None:
        if not isinstance(lm, GGUFSource):
            raise ValueError(
                f"--mmproj pairs a projector with a language model GGUF file, and {lm.path} is not one "
                "(a Hugging Face vision-language directory brings its own vision tower)"
            )
        text = lm.hf_config()
        projector = mmproj.projector
        if text["architectures"][0] != projector.language_model:
            raise ValueError(
                f"{lm.path}: the {projector.kind!r} projector of {mmproj.path} needs a "
                f"{projector.language_model} language model, not {text['architectures'][0]}"
            )
        if mmproj.output_size != text["hidden_size"] or mmproj.projection_dim not in (
            None,
            text["hidden_size"],
        ):
            raise ValueError(
                f"{mmproj.path} projects images to {mmproj.output_size} features, but the language model "
                f"{lm.path} has hidden size {text['hidden_size']}: the files are not a pair"
            )
        self.path = lm.path
        self.lm, self.mmproj = lm, mmproj
        ids = image_token_ids(tokenizer, projector.kind, lm.path)
        self._config = {
            "architectures": [projector.architecture],
            "text_config": text,
            "vision_config": mmproj.vision_config,
            **_FIELDS[projector.kind](mmproj, ids),
            **{k: text[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in text},
        }

    def hf_config(self) -> dict[str, Any]:
        return self._config

    def generation_config(self) -> dict[str, Any]:
        return self.lm.generation_config()

    def main_format(self) -> str | None:
        return self.lm.main_format()

    def tensors(self) -> Iterator[tuple[str, StoredTensor]]:
        return chain(self.lm.tensors(), self.mmproj.tensors())
