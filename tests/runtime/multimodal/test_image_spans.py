"""The rules that keep an image that attends both ways (Gemma 3) inside one extend: spans from a
request's images, chunk ends moved off a span, a cached prefix cut back to a span's start."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.multimodal.image_spans import chunk_end, image_spans, prefix_end, spans_in
from radixlm.runtime.multimodal.items import ImageItem, MultimodalInputs
from tests.runtime.scheduler.scheduler_fakes import compute_extend, make_cache, make_req

SPANS = [(3, 7), (10, 14)]


def item(key: str, tokens: int) -> ImageItem:
    return ImageItem(key, torch.zeros(1, 3, 2, 2), None, tokens)


def test_spans_are_runs_of_each_images_tokens():
    # image a: one run; image b: two crops (pan-and-scan), whose runs stay apart
    mm = MultimodalInputs([item("a", 3), item("b", 4)], [2, 3, 4, 5, 6, 9, 10])
    assert image_spans(mm) == [(2, 5), (5, 7), (9, 11)]


def test_chunk_end_moves_back_to_the_span_start_or_on_to_its_end():
    assert chunk_end(SPANS, 0, 5) == 3  # back: the chunk has tokens before the image
    assert chunk_end(SPANS, 3, 5) == 7  # on: the chunk starts at the image
    assert chunk_end(SPANS, 7, 12) == 10
    assert chunk_end(SPANS, 0, 7) == 7 and chunk_end(SPANS, 0, 3) == 3  # on an edge: unchanged
    assert chunk_end([], 0, 5) == 5


def test_prefix_end_cuts_back_to_the_span_start():
    assert [prefix_end(SPANS, n) for n in (2, 3, 4, 6, 7, 12, 14)] == [2, 3, 3, 3, 7, 10, 14]
    assert spans_in(SPANS, 5, 11) == SPANS and spans_in(SPANS, 7, 10) == []


@pytest.mark.parametrize(
    "budget, ends",
    [
        (4, [3, 7, 10, 14, 18, 20]),  # chunks ending inside an image end at its start instead
        (3, [3, 7, 10, 14, 17, 20]),  # an image over the budget is one chunk of its own
    ],
)
def test_chunked_admission_keeps_each_image_whole(budget, ends):
    cache = make_cache()
    req = make_req("r", range(100, 120))
    req.image_spans = SPANS
    seen = []
    while req.kv_len < req.seq_len:
        assert cache.admit(req, budget)
        seen.append(req.kv_len + req.extend_len)
        compute_extend(cache, req)
    assert seen == ends
    cache.release(req)
    cache.check_integrity([])


def test_a_cached_prefix_ending_inside_an_image_restarts_at_the_image():
    cache = make_cache()
    ids = list(range(100, 120))
    first = make_req("a", ids[:5])  # its KV ends inside the first span (e.g. a model without the rule)
    assert cache.admit(first, 100)
    compute_extend(cache, first)
    cache.release(first)
    req = make_req("b", ids)
    req.image_spans = SPANS
    assert cache.cached_prefix_len(req) == 3
    assert cache.admit(req, 100)
    assert (req.kv_len, req.extend_len) == (3, 17)
    compute_extend(cache, req)
    cache.check_integrity([req])
    cache.release(req)
    cache.check_integrity([])
    again = make_req("c", ids)
    again.image_spans = SPANS
    assert cache.cached_prefix_len(again) == 19  # the whole prompt but the token computed for logits
