"""JSON Schema Test Suite (draft 2020-12) and starvation runs for ``constrained.py``.

The suite ships in the ``jsonschema`` sdist on PyPI; it is downloaded once with
``pip download --no-deps --no-binary :all: jsonschema==4.26.0`` into ``$RADIXLM_CACHE/jsonschema-sdist``
(default ``~/.cache/radixlm``) and read from the archive.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from radixlm.runtime.constrained import GrammarBackend
from tests.runtime.constrained.driver import allowed_ids, closing_tokens

SDIST_VERSION = "4.26.0"
SUITE_DIR = re.compile(r"json/tests/draft2020-12/[^/]+\.json$")


def _cache_dir() -> Path:
    return Path(os.environ.get("RADIXLM_CACHE", Path.home() / ".cache" / "radixlm")) / "jsonschema-sdist"


def load_suite() -> list[dict[str, Any]]:
    """Every test group of the draft 2020-12 suite (not ``optional/``): {file, description, schema, tests}."""
    cache = _cache_dir()
    archives = sorted(cache.glob(f"jsonschema-{SDIST_VERSION}.tar.gz"))
    if not archives:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"jsonschema=={SDIST_VERSION}",
                "-d",
                str(cache),
            ],
            check=True,
        )
        archives = sorted(cache.glob(f"jsonschema-{SDIST_VERSION}.tar.gz"))
    groups = []
    with tarfile.open(archives[0]) as tar:
        for member in tar.getmembers():
            if SUITE_DIR.search(member.name):
                for group in json.load(tar.extractfile(member)):
                    groups.append({"file": Path(member.name).stem, **group})
    return groups


def _has_remote_ref(node: Any) -> bool:
    if isinstance(node, dict):
        ref = node.get("$ref") or node.get("$dynamicRef")
        if isinstance(ref, str) and not ref.startswith("#"):
            return True
        return any(_has_remote_ref(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_remote_ref(v) for v in node)
    return False


def satisfiable(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Groups with at least one valid test instance and no remote references (the issue's denominator)."""
    return [g for g in groups if any(t["valid"] for t in g["tests"]) and not _has_remote_ref(g["schema"])]


def _drive(matcher, backend: GrammarBackend, rng, closing, max_tokens: int, mask_times: list[float]):
    bitmask = backend.new_bitmask(1)
    eos = backend.eos_token_ids[0]
    out: list[int] = []
    for _ in range(max_tokens):
        if matcher.is_terminated():
            return out, True
        t0 = time.perf_counter()
        matcher.fill_bitmask(bitmask, 0)
        mask_times.append(time.perf_counter() - t0)
        ids = allowed_ids(bitmask, 0)
        if len(ids) == 0:
            return out, False
        token = None
        if rng.random() < 0.5:
            if eos in ids:
                token = eos
            else:
                pref = ids[ids < len(closing)]
                pref = pref[closing[pref]]
                token = int(rng.choice(pref)) if len(pref) else None
        token = int(rng.choice(ids)) if token is None else token
        if not matcher.accept_token(token):
            return out, False
        if token == eos:
            return out, True
        out.append(token)
    return out, matcher.is_terminated()


def run_suite(
    tokenizer,
    vocab_size: int,
    engine: str,
    groups: list[dict[str, Any]],
    seeds: int = 3,
    max_tokens: int = 120,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """Compile each schema on ``engine`` and drive random generations; coverage, compliance, timings."""
    backend = GrammarBackend(
        tokenizer,
        [tokenizer.eos_token_id],
        vocab_size,
        backend=engine,
        compile_timeout=timeout,
        max_concurrent=2,
        cache_size=4096,
    )
    closing = closing_tokens(backend.vocab.token_bytes)
    compile_ms, mask_times, rejected = [], [], []
    accepted = covered = finished = valid = 0
    futures = []
    for g in groups:  # all submitted at once: the pool's slow lane keeps slow schemas from blocking
        text = json.dumps(g["schema"])
        try:
            backend.validate("json", text)
            futures.append(backend.submit("json", text))
        except ValueError as e:
            futures.append(e)
    for g, future in zip(groups, futures):
        try:
            if isinstance(future, Exception):
                raise future
            grammar = future.result(timeout=timeout + 600)
        except Exception as e:  # noqa: BLE001 - any rejection counts against coverage
            rejected.append(f"{g['file']}: {g['description']}: {type(e).__name__}: {str(e)[:90]}")
            continue
        compile_ms.append(grammar.compile_seconds * 1e3)
        accepted += 1
        all_valid = True
        validator = jsonschema.Draft202012Validator(g["schema"])
        for seed in range(seeds):
            tokens, done = _drive(
                grammar.new_matcher(), backend, np.random.default_rng(seed), closing, max_tokens, mask_times
            )
            if not done:
                continue
            finished += 1
            try:
                ok = validator.is_valid(json.loads(backend.vocab.decode(tokens).decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError):
                ok = False
            valid += ok
            all_valid &= ok
        covered += all_valid
    backend.shutdown()
    mask_us = np.asarray(mask_times) * 1e6
    return {
        "engine": engine,
        "schemas": len(groups),
        "accepted": accepted,
        "covered": covered,
        "finished": finished,
        "valid": valid,
        "compile_p50": float(np.percentile(compile_ms, 50)) if compile_ms else float("nan"),
        "compile_p99": float(np.percentile(compile_ms, 99)) if compile_ms else float("nan"),
        "mask_mean": float(mask_us.mean()) if len(mask_us) else float("nan"),
        "mask_p50": float(np.percentile(mask_us, 50)) if len(mask_us) else float("nan"),
        "mask_p99": float(np.percentile(mask_us, 99)) if len(mask_us) else float("nan"),
        "rejected": rejected,
    }


SLOW_SCHEMAS = {  # compile slowly (llguidance ~1 s; outlines-core past any deadline)
    "llguidance": [
        {
            "properties": {f"p{i}": {}, "bar": {}},
            "patternProperties": {"^v": {}},
            "additionalProperties": False,
        }
        for i in range(4)
    ],
    "outlines": [{"properties": {f"p{i}": {}, "bar": {}}, "additionalProperties": False} for i in range(4)],
}


def easy_schemas(n: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "object",
            "properties": {f"field{i}": {"type": "integer"}},
            "required": [f"field{i}"],
            "additionalProperties": False,
        }
        for i in range(n)
    ]


def run_starvation(model: str, engine: str, easy: int = 40, timeout: float = 10.0) -> dict[str, float]:
    """Easy requests' latency (p50/p99, s) after 4 slow schemas were sent first, and without them.

    Each easy schema is distinct (each compiles); each run uses a fresh Engine (cold grammar cache).
    """
    from radixlm.runtime.engine import Engine

    out: dict[str, float] = {}
    for with_slow in (False, True):
        llm = Engine(
            model=model,
            kv_cache_gb=0.3,
            max_running_requests=64,
            grammar_backend=engine,
            grammar_compile_timeout=timeout,
        )
        try:
            llm.generate("warm-up", {"max_new_tokens": 2})
            slow = SLOW_SCHEMAS[engine] if with_slow else []
            lat = asyncio.run(_latencies(llm, slow, easy_schemas(easy)))
        finally:
            llm.shutdown()
        key = "with_slow" if with_slow else "alone"
        out[f"{key}_p50"], out[f"{key}_p99"] = float(np.percentile(lat, 50)), float(np.percentile(lat, 99))
    return out


async def _latencies(llm, slow: list[dict], easy: list[dict]) -> list[float]:
    params = {"temperature": 0, "max_new_tokens": 8}

    async def one(schema: dict) -> float:
        t0 = time.perf_counter()
        try:
            await llm.async_generate("A JSON object:", {**params, "json_schema": schema})
        except ValueError:  # a slow schema may end at the compile deadline
            pass
        return time.perf_counter() - t0

    slow_tasks = [asyncio.ensure_future(one(s)) for s in slow]
    await asyncio.sleep(0.05)  # the slow ones are submitted first
    easy_latencies = await asyncio.gather(*[one(s) for s in easy])
    await asyncio.gather(*slow_tasks)
    return list(easy_latencies)
