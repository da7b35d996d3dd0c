"""The disk tier (L3): pages of KV in files that outlive the process, found again after a restart.

A page is ``PAGE_TOKENS`` tokens at a page-aligned position. Its file is named by a chain hash of the
fingerprint and every token up to the page's end, so a prompt finds its pages by hashing itself; no
index has to survive a restart. A file holds a header (magic, the fingerprint, the page's tokens,
shape and dtype), the K and V payload and a CRC32 of both; it is written to a temporary name and
renamed, so a reader never sees half a file. A file that fails any check is skipped with a warning
(and deleted), and the request recomputes those tokens. The directory is bounded: past ``max_bytes``
the least recently used files go. Writes run on a background thread; a full disk warns and serves on.
Reads can start early: ``prefetch`` (called when a request is queued) reads and checks its pages on
a reader thread while the scheduler runs other batches; ``load`` takes them from memory, waiting for
(or running) a prefetch still in flight, so admission only copies them into the pool.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch

from radixlm.radix.tier_metrics import TierCounters
from radixlm.runtime.kv_tiers.copy_queue import CopyQueue, CopyTask
from radixlm.runtime.memory.kv_pool import KVPool

logger = logging.getLogger(__name__)

PAGE_TOKENS = 64
PREFETCH_BYTES = 256 * 1024 * 1024  # pages read ahead and not yet loaded, at most (oldest dropped)
_MAGIC = b"RLMKV01\n"
_SUFFIX = ".kv"


class DiskStore:
    """Pages of ``pool``-shaped KV under ``directory`` (stored as ``dtype``), at most ``max_bytes``."""

    def __init__(
        self, directory: str | Path, max_bytes: int, pool: KVPool, dtype: torch.dtype, fingerprint: str
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.pool = pool
        self.dtype = dtype
        self.fingerprint = fingerprint
        self.page_shape = (pool.num_layers, 2, PAGE_TOKENS, pool.num_kv_heads, pool.head_dim)
        self.bytes_per_token = KVPool.bytes_per_slot(pool.num_layers, pool.num_kv_heads, pool.head_dim, dtype)
        self.metrics = TierCounters()
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()  # name -> bytes, least recently used first
        self._pending: set[str] = set()
        for path in sorted(self.dir.glob("*" + _SUFFIX), key=lambda p: p.stat().st_mtime):
            self._files[path.stem] = path.stat().st_size
        self._make_room(0)  # restarted with a smaller --hicache-storage-size
        self._queue: queue.Queue[tuple[str, list[int], torch.Tensor] | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="kv-disk-writer", daemon=True)
        self._writer.start()
        self._reader = CopyQueue("kv-disk-reader")
        self._prefetched: OrderedDict[str, torch.Tensor] = OrderedDict()  # guarded by _lock
        self._inflight: dict[str, CopyTask] = {}  # guarded by _lock
        self._failed: set[str] = set()  # pages a prefetch found bad (guarded by _lock)

    # ---- keys ---------------------------------------------------------------------------------------

    def page_keys(self, token_ids: Sequence[int], num_pages: int) -> list[str]:
        """The chain-hash names of the first ``num_pages`` full pages of ``token_ids``."""
        keys = []
        h = hashlib.sha256(self.fingerprint.encode()).digest()
        for page in range(num_pages):
            chunk = token_ids[page * PAGE_TOKENS : (page + 1) * PAGE_TOKENS]
            h = hashlib.sha256(h + struct.pack(f"<{PAGE_TOKENS}q", *chunk)).digest()
            keys.append(h.hex()[:40])
        return keys

    def cached_len(self, token_ids: Sequence[int], start: int) -> int:
        """Where the run of stored pages covering ``token_ids[start:]`` ends (``start`` if none)."""
        keys = self.page_keys(token_ids, len(token_ids) // PAGE_TOKENS)
        end = (start // PAGE_TOKENS) * PAGE_TOKENS
        with self._lock:
            for key in keys[start // PAGE_TOKENS :]:
                if key not in self._files:
                    break
                end += PAGE_TOKENS
        return max(end, start)

    # ---- loading ------------------------------------------------------------------------------------

    def prefetch(self, token_ids: Sequence[int], start: int) -> CopyTask | None:
        """Read the stored pages continuing ``token_ids`` from ``start`` on the reader thread (None
        when there are none); ``load`` then finds them in memory."""
        end = self.cached_len(token_ids, start)
        if end - start < PAGE_TOKENS:
            return None
        keys = self.page_keys(token_ids, end // PAGE_TOKENS)
        pages = [
            (keys[p], list(token_ids[p * PAGE_TOKENS : (p + 1) * PAGE_TOKENS]))
            for p in range(start // PAGE_TOKENS, len(keys))
        ]

        def read() -> None:
            try:
                for key, tokens in pages:
                    with self._lock:
                        if key in self._prefetched:
                            continue
                    kv = self._read_page(key, tokens)
                    if kv is None:
                        with self._lock:
                            self._failed.add(key)  # warned once; ``load`` stops here, not re-reading
                        break
                    with self._lock:
                        self._failed.discard(key)
                        self._prefetched[key] = kv
                        while sum(t.nbytes for t in self._prefetched.values()) > PREFETCH_BYTES:
                            self._prefetched.popitem(last=False)
            finally:
                with self._lock:
                    for key, _ in pages:
                        self._inflight.pop(key, None)

        with self._lock:  # registered before the reader can finish (it needs the lock)
            task = self._reader.submit(read)
            for key, _ in pages:
                self._inflight.setdefault(key, task)
        return task

    def _take(self, key: str, tokens: Sequence[int]) -> torch.Tensor | None:
        """Page ``key``: from a prefetch (waited for if in flight), else read now."""
        with self._lock:
            task = self._inflight.get(key)
        if task is not None:
            task.wait()
        with self._lock:
            kv = self._prefetched.pop(key, None)
            if key in self._failed:
                self._failed.discard(key)
                return None
        return kv if kv is not None else self._read_page(key, tokens)

    def load(self, token_ids: Sequence[int], start: int, end: int, slots: torch.Tensor) -> int:
        """Copy the stored KV of positions ``[start, end)`` into pool ``slots`` (one per position);
        returns how many leading positions were loaded (fewer when a file fails its checks)."""
        t0 = time.perf_counter()
        first = start // PAGE_TOKENS
        keys = self.page_keys(token_ids, -(-end // PAGE_TOKENS))
        parts: list[torch.Tensor] = []
        pos = start
        for page in range(first, len(keys)):
            kv = self._take(keys[page], token_ids[page * PAGE_TOKENS : (page + 1) * PAGE_TOKENS])
            if kv is None:
                break
            lo, hi = pos - page * PAGE_TOKENS, min(end, (page + 1) * PAGE_TOKENS) - page * PAGE_TOKENS
            parts.append(kv[:, :, lo:hi])
            pos = page * PAGE_TOKENS + hi
        loaded = pos - start
        if loaded:
            kv = torch.cat(parts, dim=2)
            dst = slots[:loaded]
            for layer in range(self.pool.num_layers):
                k, v = self.pool.get_kv_buffer(layer)
                k.index_copy_(0, dst, kv[layer, 0].to(k.device, k.dtype))
                v.index_copy_(0, dst, kv[layer, 1].to(v.device, v.dtype))
            self.metrics.record_load(loaded, loaded * self.bytes_per_token, time.perf_counter() - t0)
        return loaded

    def _read_page(self, key: str, tokens: Sequence[int]) -> torch.Tensor | None:
        path = self.dir / (key + _SUFFIX)
        try:
            blob = path.read_bytes()
            kv = self._decode(blob, key, tokens)
        except (OSError, ValueError) as exc:
            logger.warning("KV disk tier: skipping %s (%s); those tokens are recomputed", path.name, exc)
            self.metrics.errors += 1
            self._forget(key, delete=not isinstance(exc, FileNotFoundError))
            return None
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
        return kv

    def _decode(self, blob: bytes, key: str, tokens: Sequence[int]) -> torch.Tensor:
        if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 8:
            raise ValueError("not a KV page file")
        (header_len,) = struct.unpack_from("<I", blob, len(_MAGIC))
        body_start = len(_MAGIC) + 4
        body, crc = blob[body_start:-4], blob[-4:]
        if len(blob) < body_start + header_len + 4 or struct.unpack("<I", crc)[0] != zlib.crc32(body):
            raise ValueError("checksum mismatch (corrupt or truncated)")
        header = json.loads(body[:header_len])
        if header.get("fingerprint") != self.fingerprint or header.get("key") != key:
            raise ValueError("written for another model or KV layout")
        if header.get("tokens") != list(tokens) or tuple(header.get("shape", ())) != self.page_shape:
            raise ValueError("tokens or shape differ from the request's")
        if header.get("dtype") != str(self.dtype):
            raise ValueError(f"dtype {header.get('dtype')} is not {self.dtype}")
        payload = bytearray(body[header_len:])
        return torch.frombuffer(payload, dtype=torch.uint8).view(self.dtype).reshape(self.page_shape)

    # ---- saving -------------------------------------------------------------------------------------

    def save(self, token_ids: Sequence[int], slots: torch.Tensor) -> int:
        """Queue the full pages of ``token_ids`` (KV in pool ``slots``) that are not stored yet; their
        KV is gathered now (one copy per layer), so the slots may be reused at once; encoding and
        writing happen on the writer thread. Returns the pages queued."""
        keys = self.page_keys(token_ids, len(token_ids) // PAGE_TOKENS)
        new: list[int] = []
        with self._lock:
            for page, key in enumerate(keys):
                if key in self._files:
                    self._files.move_to_end(key)
                elif key not in self._pending:
                    self._failed.discard(key)
                    self._pending.add(key)
                    new.append(page)
        if not new:
            return 0
        index = torch.cat([slots[p * PAGE_TOKENS : (p + 1) * PAGE_TOKENS] for p in new])
        kv = torch.stack(
            [
                torch.stack([k[index], v[index]])
                for k, v in map(self.pool.get_kv_buffer, range(self.pool.num_layers))
            ]
        ).to("cpu", self.dtype)
        for i, page in enumerate(new):
            tokens = list(token_ids[page * PAGE_TOKENS : (page + 1) * PAGE_TOKENS])
            self._queue.put((keys[page], tokens, kv[:, :, i * PAGE_TOKENS : (i + 1) * PAGE_TOKENS]))
        return len(new)

    def _encode(self, key: str, tokens: list[int], kv: torch.Tensor) -> bytes:
        header = json.dumps(
            {
                "fingerprint": self.fingerprint,
                "key": key,
                "tokens": tokens,
                "shape": list(self.page_shape),
                "dtype": str(self.dtype),
            }
        ).encode()
        body = header + kv.contiguous().view(torch.uint8).numpy().tobytes()
        return _MAGIC + struct.pack("<I", len(header)) + body + struct.pack("<I", zlib.crc32(body))

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            key, tokens, kv = item
            try:
                self._write_file(key, self._encode(key, tokens, kv))
            except Exception:  # the writer must outlive any one page, or flush() would wait forever
                logger.exception("KV disk tier: writing page %s failed", key)
                self.metrics.errors += 1
            finally:
                with self._lock:
                    self._pending.discard(key)
                self._queue.task_done()

    def _write_file(self, key: str, blob: bytes) -> None:
        path = self.dir / (key + _SUFFIX)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        if len(blob) > self.max_bytes:
            self.metrics.dropped_tokens += PAGE_TOKENS  # one page is over the whole bound
            return
        self._make_room(len(blob))
        try:
            with open(tmp, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except OSError as exc:
            logger.warning("KV disk tier: cannot write %s (%s); serving on without it", path.name, exc)
            self.metrics.errors += 1
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass  # the directory itself is gone or unusable
            return
        with self._lock:
            self._files[key] = len(blob)
        self.metrics.record_write(PAGE_TOKENS, len(blob))

    def _make_room(self, nbytes: int) -> None:
        while True:
            with self._lock:
                if not self._files or sum(self._files.values()) + nbytes <= self.max_bytes:
                    return
                key, _ = self._files.popitem(last=False)
            _remove(self.dir / (key + _SUFFIX))
            self.metrics.dropped_tokens += PAGE_TOKENS

    def _forget(self, key: str, delete: bool) -> None:
        with self._lock:
            self._files.pop(key, None)
        if delete:
            _remove(self.dir / (key + _SUFFIX))

    # ---- lifecycle ----------------------------------------------------------------------------------

    def flush(self) -> None:
        """Wait until every queued page is on disk (or given up)."""
        self._queue.join()

    def set_fingerprint(self, fingerprint: str) -> None:
        """Serve pages of another model from now on (new weights): the old model's files are never
        found again (a page's key hashes the fingerprint) and age out as least recently used."""
        self.flush()
        with self._lock:
            self.fingerprint = fingerprint
            self._prefetched.clear()
            self._failed.clear()

    def close(self) -> None:
        self._reader.close()
        self._queue.put(None)
        self._writer.join(timeout=30)

    def stored_bytes(self) -> int:
        with self._lock:
            return sum(self._files.values())

    def check_integrity(self) -> None:
        """The size bound holds: the files the store knows of fit in ``max_bytes``."""
        stored = self.stored_bytes()
        if stored > self.max_bytes:
            raise AssertionError(f"disk tier holds {stored} bytes, over its bound of {self.max_bytes}")

    def stats(self) -> dict[str, float]:
        return {**self.metrics.as_dict("disk"), "disk_stored_bytes": self.stored_bytes()}


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("KV disk tier: cannot delete %s (%s)", path.name, exc)
