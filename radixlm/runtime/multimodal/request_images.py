"""A prompt and its images -> the prompt ids and ``MultimodalInputs``, under the server's policy."""

from __future__ import annotations

from typing import Any

from radixlm.runtime.multimodal.image_source import ImagePolicy, image_bytes
from radixlm.runtime.multimodal.items import MultimodalInputs
from radixlm.runtime.multimodal.processor import ImagePromptProcessor
from radixlm.runtime.requests.request_validation import InvalidRequest

NO_INPUT_LOGPROBS = "input logprobs (logprob_start_len >= 0) are not served for prompts with images"


def load_prompt_processor(model_info: dict[str, Any]) -> ImagePromptProcessor | None:
    """The image processor of a vision-language model, None for a text-only one: the checkpoint's own,
    or for a GGUF pair (``mmproj_path``) the one its metadata and tokenizer describe."""
    if not model_info.get("is_multimodal"):
        return None
    if model_info.get("mmproj_path"):
        from radixlm.runtime.multimodal.mmproj_processor import mmproj_processor  # torch: vision models only

        processor = mmproj_processor(model_info["mmproj_path"], model_info["local_tokenizer_path"])
        return ImagePromptProcessor(processor)
    return ImagePromptProcessor.from_model_dir(str(model_info["local_model_path"]))


def per_prompt_images(image_data: Any, num_prompts: int, single: bool) -> list[list[Any]]:
    """SGLang's ``image_data`` shapes: one image or a list of them for a single prompt; for a batch, one
    entry per prompt (an image, a list of images, or None)."""
    if image_data is None:
        return [[] for _ in range(num_prompts)]
    if single:
        return [list(image_data) if isinstance(image_data, list) else [image_data]]
    if not isinstance(image_data, list) or len(image_data) != num_prompts:
        raise ValueError(f"image_data must have one entry per prompt ({num_prompts})")
    return [[] if d is None else list(d) if isinstance(d, list) else [d] for d in image_data]


def tokenize_with_images(
    processor: ImagePromptProcessor | None,
    policy: ImagePolicy,
    text: str,
    refs: list[Any],
    add_special_tokens: bool = True,
) -> tuple[list[int], MultimodalInputs]:
    """``text`` (one ``processor.image_token`` per image) with ``refs``; ValueError for a text-only
    model, too many or too large images, or a reference the policy does not allow."""
    if processor is None:
        raise ValueError("this model is text-only: it takes no images")
    policy.check_count(len(refs))
    return processor(text, [image_bytes(r, policy) for r in refs], add_special_tokens)


def tokenize_segments_with_images(
    processor: ImagePromptProcessor | None,
    policy: ImagePolicy,
    segments: list[dict[str, Any]],
    refs: list[Any],
) -> tuple[list[int], MultimodalInputs]:
    """``input_segments`` (text pieces, each tokenized on its own, and token ids) whose text pieces hold
    the image placeholders, in order, for ``refs``."""
    if processor is None:
        raise ValueError("this model is text-only: it takes no images")
    policy.check_count(len(refs))
    ids: list[int] = []
    mm = MultimodalInputs()
    used = 0
    for seg in segments:
        if "ids" in seg:
            ids.extend(seg["ids"])
            continue
        text = seg["text"]
        count = text.count(processor.image_token)
        mine = [image_bytes(r, policy) for r in refs[used : used + count]]
        used += count
        seg_ids, seg_mm = processor(text, mine, add_special_tokens=False)
        mm.items.extend(seg_mm.items)
        mm.positions.extend(len(ids) + p for p in seg_mm.positions)
        ids.extend(seg_ids)
    if used != len(refs):
        raise ValueError(f"the prompt has {used} image placeholders for {len(refs)} images")
    return ids, mm


class ImageInputs:
    """A server front end's images: the model's processor (None: text-only) and the server's policy."""

    def __init__(self, model_info: dict[str, Any], server_args: Any) -> None:
        self.processor = load_prompt_processor(model_info)
        self.policy = ImagePolicy.from_server_args(server_args)

    def prompt(self, item: Any, check_text: Any) -> tuple[list[int], MultimodalInputs]:
        """``item``'s (a ``GenerateItem`` with ``image_data``) ids and images; ``InvalidRequest`` on
        ``image_data`` for bad images. ``check_text(text, field)`` bounds each text before tokenizing."""
        if item.return_logprob and item.logprob_start_len >= 0:
            raise InvalidRequest(NO_INPUT_LOGPROBS, "logprob_start_len")
        try:
            if item.input_segments is not None:
                for seg in item.input_segments:
                    check_text(seg.get("text", ""), "input_segments")
                return tokenize_segments_with_images(
                    self.processor, self.policy, item.input_segments, item.image_data
                )
            if item.text is None:
                raise ValueError("image_data needs a text prompt (with one image placeholder per image)")
            check_text(item.text, "text")
            return tokenize_with_images(
                self.processor, self.policy, item.text, item.image_data, item.add_special_tokens
            )
        except InvalidRequest:
            raise
        except ValueError as e:  # unreadable, too many, too large, not allowed, or a text-only model
            raise InvalidRequest(str(e), "image_data") from e
