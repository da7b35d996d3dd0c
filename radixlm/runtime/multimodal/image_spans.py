"""Image spans that attend both ways (Gemma 3): the rules that keep each span inside one extend.

Gemma 3's language model lets the tokens of one image see each other in both directions during
prefill (transformers unmasks within each run of ``token_type_ids == 1``); every other query stays
causal. A span is such a run, ``[start, end)`` in prompt positions. Its tokens' KV depends on the
whole span, so:

- a prefill chunk never ends strictly inside a span (``chunk_end``): the boundary moves back to the
  span's start, or, when the chunk begins there (the span alone is over the budget), on to its end;
- a cached prefix never ends strictly inside a span (``prefix_end``): the match is cut back to the
  span's start, and the span is computed again in one piece.

With both, the attention only has to unmask among one step's new tokens
(``radixlm.kernels.windowed_attention.visible``).
"""

from __future__ import annotations

from radixlm.runtime.multimodal.items import MultimodalInputs

Span = tuple[int, int]


def image_spans(mm: MultimodalInputs) -> list[Span]:
    """The runs of consecutive image-token positions of each image, in prompt order (a pan-and-scan
    image has one per crop; two images never share a run)."""
    spans: list[Span] = []
    k = 0
    for item in mm.items:
        positions = mm.positions[k : k + item.num_tokens]
        k += item.num_tokens
        start = prev = positions[0]
        for pos in positions[1:]:
            if pos != prev + 1:
                spans.append((start, prev + 1))
                start = pos
            prev = pos
        spans.append((start, prev + 1))
    return spans


def _inside(spans: list[Span], pos: int) -> Span | None:
    """The span ``pos`` cuts (``start < pos < end``), if any."""
    for span in spans:
        if span[0] < pos < span[1]:
            return span
    return None


def prefix_end(spans: list[Span], length: int) -> int:
    """A cached prefix of ``length`` tokens, cut back to the start of a span it would end inside."""
    span = _inside(spans, length)
    return length if span is None else span[0]


def chunk_end(spans: list[Span], start: int, end: int) -> int:
    """The end of a chunk ``[start, end)`` moved out of a span it would cut: back to the span's start,
    or forward to its end when the chunk starts at or inside it (``start`` is never inside one)."""
    span = _inside(spans, end)
    if span is None:
        return end
    return span[0] if span[0] > start else span[1]


def spans_in(spans: list[Span], start: int, end: int) -> list[Span]:
    """The spans with tokens among positions ``[start, end)``."""
    return [s for s in spans if s[0] < end and s[1] > start]
