"""The disk tier: a restarted engine finds its prefixes; damaged files are recomputed, never served."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.engines import make_engine
from tests.helpers.waiting import wait_until

GREEDY = {"temperature": 0, "max_new_tokens": 10}
PROMPT = "shared context: " + " ".join(f"fact {j} is {j * 7 % 13}" for j in range(24))  # ~330 tokens


def _engine(model: str, storage: Path, **kwargs):
    return make_engine(model, hicache_storage_dir=str(storage), num_threads=1, **kwargs)


def _serve_once(model: str, storage: Path, prompt: str = PROMPT, **kwargs) -> tuple[dict, dict]:
    engine = _engine(model, storage, **kwargs)
    try:
        out = engine.generate(prompt, GREEDY)
        engine.check_kv_integrity()
        return out, engine.get_server_info()
    finally:
        engine.shutdown()


def test_restart_finds_the_prefix_on_disk(tiny_llama_dir, tmp_path):
    cold, info = _serve_once(tiny_llama_dir, tmp_path)
    assert cold["meta_info"]["cached_tokens"] == 0 and info["disk_hit_tokens"] == 0
    files = list(tmp_path.glob("*.kv"))
    assert len(files) == len(PROMPT) // 64  # every full page of prompt + output, each in its own file
    warm, info = _serve_once(tiny_llama_dir, tmp_path, enable_hierarchical_cache=True)
    assert warm["output_ids"] == cold["output_ids"]
    assert warm["meta_info"]["cached_tokens"] >= len(PROMPT) - 64
    assert info["disk_hit_tokens"] == warm["meta_info"]["cached_tokens"] and info["disk_errors"] == 0


def test_damaged_foreign_or_missing_files_are_recomputed(tiny_llama_dir, tmp_path):
    cold, _ = _serve_once(tiny_llama_dir, tmp_path)
    files = sorted(tmp_path.glob("*.kv"))
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[0].write_bytes(bytes(data))  # corrupt
    files[1].write_bytes(files[1].read_bytes()[:100])  # truncated
    shutil.copy(files[3], files[2])  # another page's file under this name
    # a request stops at its first bad page, deletes it, recomputes and saves it again: three rounds
    for errors in (1, 1, 1, 0):
        out, info = _serve_once(tiny_llama_dir, tmp_path)
        assert out["output_ids"] == cold["output_ids"]
        assert info["disk_errors"] == errors
    assert out["meta_info"]["cached_tokens"] >= len(PROMPT) - 64

    engine = _engine(tiny_llama_dir, tmp_path)
    try:
        for f in tmp_path.glob("*.kv"):
            f.unlink()  # deleted under the server's feet: listed at start, gone when read
        out = engine.generate(PROMPT, GREEDY)
        assert out["output_ids"] == cold["output_ids"]
        assert engine.get_server_info()["disk_errors"] == 1  # the first missing page: warned, recomputed
    finally:
        engine.shutdown()


def test_disk_tier_stays_within_its_size(tiny_llama_dir, tmp_path):
    page_bytes = 64 * 2 * 2 * 2 * 16 * 4
    limit = 2.5 * page_bytes / 1e9
    for i in range(3):
        _serve_once(tiny_llama_dir, tmp_path, prompt=f"{i} " + PROMPT, hicache_storage_size=limit)
    total = sum(p.stat().st_size for p in tmp_path.glob("*.kv"))
    assert 0 < total <= limit * 1e9


def test_unwritable_storage_warns_and_serves_on(tiny_llama_dir, tmp_path):
    storage = tmp_path / "kv"
    engine = _engine(tiny_llama_dir, storage)
    try:
        storage.rmdir()
        storage.write_text("not a directory")  # every write fails, as on a full or broken disk
        out = engine.generate(PROMPT, GREEDY)
        assert out["meta_info"]["completion_tokens"] == GREEDY["max_new_tokens"]
        engine.flush_cache()  # idle: the writer thread has had the release's pages
        out = engine.generate(PROMPT, GREEDY)
        info = engine.get_server_info()
        assert info["disk_errors"] >= 1 and info["disk_written_bytes"] == 0
    finally:
        engine.shutdown()


def _stored(directory: Path) -> list[Path]:
    return list(directory.glob("*.kv"))


def _stored_bytes(directory: Path) -> int:
    """Bytes of the page files, leaving out any removed between listing and reading its size."""
    total = 0
    for path in _stored(directory):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_size_bound_holds_after_a_restart_with_less_room_under_a_batch(tiny_llama_dir, tmp_path):
    _serve_once(tiny_llama_dir, tmp_path)  # the default bound: every full page of the prompt
    assert len(_stored(tmp_path)) >= 4
    page = _stored(tmp_path)[0].stat().st_size
    limit = 2.5 * page
    engine = _engine(tiny_llama_dir, tmp_path, hicache_storage_size=limit / 1e9)
    try:
        # trimmed at start (by the writer thread: files may vanish while they are listed)
        wait_until(lambda: _stored_bytes(tmp_path) <= limit, 30, "the store trimmed to its bound")
        engine.generate([f"{i} " + PROMPT for i in range(4)], GREEDY)  # four releases' pages at once
        engine.flush_cache()
        engine.check_kv_integrity()
        assert 0 < _stored_bytes(tmp_path) <= limit
    finally:
        engine.shutdown()
    small = tmp_path / "small"
    _, info = _serve_once(tiny_llama_dir, small, hicache_storage_size=page / 2 / 1e9)
    assert not _stored(small)  # a bound below one page holds none


def test_prefetch_reads_pages_ahead_and_load_takes_them_from_memory(tmp_path):
    import torch

    from radixlm.runtime.kv_tiers.disk_store import PAGE_TOKENS, DiskStore
    from radixlm.runtime.memory.kv_pool import KVPool

    pool = KVPool(4 * PAGE_TOKENS, num_layers=2, num_kv_heads=2, head_dim=4, dtype=torch.float32)
    store = DiskStore(tmp_path, 10**9, pool, torch.float32, "fp")
    ids = list(range(3 * PAGE_TOKENS + 5))
    slots = torch.arange(1, len(ids) + 1)
    kv = torch.randn(len(ids), 2, 4)
    for layer in range(2):
        pool.store(layer, slots, kv + layer, -kv)
    assert store.save(ids, slots) == 3
    store.flush()
    task = store.prefetch(ids, PAGE_TOKENS)  # the first page is in the tree already
    assert task is not None
    task.wait()
    for f in tmp_path.glob("*.kv"):
        f.unlink()  # the reads happened at prefetch: load needs no file now
    for layer in range(2):
        pool.store(layer, slots, torch.zeros_like(kv), torch.zeros_like(kv))
    assert store.load(ids, PAGE_TOKENS, 3 * PAGE_TOKENS, slots[PAGE_TOKENS : 3 * PAGE_TOKENS]) == 128
    got = pool.k_buffers[1][slots[PAGE_TOKENS : 3 * PAGE_TOKENS]]
    assert torch.equal(got, kv[PAGE_TOKENS : 3 * PAGE_TOKENS] + 1)
    assert store.metrics.errors == 0
    assert store.prefetch(ids, 3 * PAGE_TOKENS) is None  # nothing stored past the last full page
    store.close()


def test_new_weights_never_load_the_old_weights_pages(tiny_llama_dir, tmp_path):
    """After ``update_weights_from_disk`` the disk tier keys pages by the new model: a prompt whose
    pages the old weights wrote is recomputed, and its output is the new model's."""
    from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config

    second = str(save_tiny_model(tiny_llama_config(), tmp_path / "second", seed=7))
    fresh, _ = _serve_once(second, tmp_path / "fresh-store")
    engine = _engine(tiny_llama_dir, tmp_path / "store", enable_hierarchical_cache=True)
    try:
        engine.generate(PROMPT, GREEDY)  # its pages go to disk under the first model
        ok, message = engine.update_weights_from_disk(second)
        assert ok, message
        out = engine.generate(PROMPT, GREEDY)
        assert out["output_ids"] == fresh["output_ids"]
        assert out["meta_info"]["cached_tokens"] == 0
        assert engine.get_server_info()["disk_hit_tokens"] == 0
        engine.check_kv_integrity()
    finally:
        engine.shutdown()
