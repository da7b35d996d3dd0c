"""A SmolVLM served from llama.cpp's pair of files: the language model GGUF and its ``mmproj`` file
(``--mmproj``), as one ``WeightSource`` of an ``Idefics3ForConditionalGeneration`` checkpoint.

The config is the one a Hugging Face Idefics3 checkpoint carries: the language model's (translated
from its GGUF metadata) as ``text_config``, the tower's as ``vision_config``, the connector's scale
factor and the id of the ``<image>`` token in the language model's own tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

from radixlm.runtime.weights.gguf_source import GGUFSource
from radixlm.runtime.weights.mmproj import MmprojFile
from radixlm.runtime.weights.source import StoredTensor, WeightSource

# the tokens transformers' Idefics3Processor writes into a prompt (it adds any the tokenizer lacks,
# which would then fall outside the language model's vocabulary)
IMAGE_TOKENS = ("<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>")


def image_token_id(tokenizer: Any, where: str) -> int:
    """The ``<image>`` id; ValueError naming the first Idefics3 image token ``tokenizer`` lacks."""
    vocab = tokenizer.get_vocab()
    for token in IMAGE_TOKENS:
        if token not in vocab:
            raise ValueError(f"{where}: the tokenizer has no {token} token, which Idefics3 prompts need")
    return int(vocab["<image>"])


class VisionPairSource:
    """The language model GGUF's tensors and the mmproj file's, under Idefics3's checkpoint names."""

    def __init__(self, lm: WeightSource, mmproj: MmprojFile, tokenizer: Any) -> None:
        if not isinstance(lm, GGUFSource):
            raise ValueError(
                f"--mmproj pairs a projector with a language model GGUF file, and {lm.path} is not one "
                "(a Hugging Face Idefics3 directory brings its own vision tower)"
            )
        text = lm.hf_config()
        if text["architectures"][0] != "LlamaForCausalLM":
            raise ValueError(
                f"{lm.path}: an Idefics3 projector needs a llama language model, not "
                f"{text['architectures'][0]}"
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
        self._config = {
            "architectures": ["Idefics3ForConditionalGeneration"],
            "model_type": "idefics3",
            "text_config": text,
            "vision_config": mmproj.vision_config,
            "scale_factor": mmproj.scale_factor,
            "image_token_id": image_token_id(tokenizer, lm.path),
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
