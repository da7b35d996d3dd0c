"""The encoder cache's bound and order, and where image bytes may come from."""

from __future__ import annotations

import base64
import os

import pytest
import torch

from radixlm.runtime.multimodal.encoder_cache import EncoderCache
from radixlm.runtime.multimodal.image_source import ImagePolicy, image_bytes
from radixlm.runtime.multimodal.request_images import per_prompt_images


def rows(n: int) -> torch.Tensor:
    return torch.zeros(n, 4)  # 16 bytes a row


def test_encoder_cache_evicts_least_recently_used_within_its_bound():
    cache = EncoderCache(max_bytes=64)
    cache.put("a", rows(2))
    cache.put("b", rows(2))
    assert cache.get("a") is not None  # now b is the least recently used
    cache.put("c", rows(2))
    assert "b" not in cache and "a" in cache and "c" in cache and cache.num_bytes == 64
    cache.put("huge", rows(5))  # larger than the whole bound: not kept, nothing evicted
    assert "huge" not in cache and len(cache) == 2
    assert (cache.hits, cache.misses) == (1, 0)
    assert cache.get("b") is None and cache.misses == 1
    with pytest.raises(ValueError, match=">= 0"):
        EncoderCache(-1)


def test_image_sources_follow_the_policy(tmp_path):
    inside = tmp_path / "media"
    inside.mkdir()
    (inside / "a.png").write_bytes(b"png bytes")
    (tmp_path / "secret.png").write_bytes(b"secret")
    os.symlink(tmp_path / "secret.png", inside / "link.png")
    policy = ImagePolicy(max_images=2, max_bytes=100, local_dir=str(inside))
    assert image_bytes(str(inside / "a.png"), policy) == b"png bytes"
    assert image_bytes(f"file://{inside / 'a.png'}", policy) == b"png bytes"
    assert image_bytes("data:image/png;base64," + base64.b64encode(b"xyz").decode(), policy) == b"xyz"
    assert image_bytes(base64.b64encode(b"raw").decode(), policy) == b"raw"
    for ref, fragment in [
        (str(inside / "link.png"), "outside the allowed directory"),  # a symlink out is resolved first
        (str(inside / ".." / "secret.png"), "outside the allowed directory"),
        (str(inside / "missing.png"), "no image file"),
        ("https://example.com/a.png", "--allow-image-downloads"),
        ("data:image/png,plain", "data:<type>;base64"),
        (b"x" * 101, "larger than"),
        (12, "not int"),
    ]:
        with pytest.raises(ValueError, match=fragment):
            image_bytes(ref, policy)
    with pytest.raises(ValueError, match="reads no image files"):
        image_bytes(str(inside / "a.png"), ImagePolicy())
    with pytest.raises(ValueError, match="at most 2"):
        policy.check_count(3)


def test_sglang_image_data_shapes():
    assert per_prompt_images("a", 1, single=True) == [["a"]]
    assert per_prompt_images(["a", "b"], 1, single=True) == [["a", "b"]]
    assert per_prompt_images(["a", None, ["b", "c"]], 3, single=False) == [["a"], [], ["b", "c"]]
    assert per_prompt_images(None, 2, single=False) == [[], []]
    with pytest.raises(ValueError, match="one entry per prompt"):
        per_prompt_images(["a"], 2, single=False)
