"""``/update_weights_from_disk`` and ``/start_profile`` / ``/stop_profile`` on a live tiny-model server.

Greedy tokens are checked against transformers on the same checkpoint: before an update the first
model's, after it the second's; a request in flight during the update finishes on the old weights.
The server runs with ``--debug-invariants`` (KV ownership checked whenever it goes idle).
"""

from __future__ import annotations

import glob
import gzip
import json
import threading

import httpx
import pytest
import torch

from radixlm.runtime.server.launch import launch_server
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config, tiny_qwen2_config
from tests.helpers.waiting import wait_until

PROMPT = [1, 72, 101, 108, 108, 111, 44, 32, 119]
LONG = 300  # tokens of the request in flight during an update


def reference_greedy(model_dir: str, n: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([PROMPT])
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=2)
    return out[0, len(PROMPT) :].tolist()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    made = {}
    for name, config, seed in [
        ("first", tiny_llama_config(), 0),
        ("second", tiny_llama_config(), 1),
        ("wider", tiny_llama_config(intermediate_size=96), 2),
        ("qwen2", tiny_qwen2_config(), 3),
    ]:
        made[name] = str(save_tiny_model(config, tmp_path_factory.mktemp(name), seed=seed))
    return made


@pytest.fixture(scope="module")
def server(dirs):
    handle = launch_server(
        model=dirs["first"],
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        debug_invariants=True,
    )
    yield handle
    handle.shutdown()


def generate(url: str, n: int) -> dict:
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True},
    }
    resp = httpx.post(url + "/generate", json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()


def stream_generate(url: str, n: int, started: threading.Event, result: dict) -> None:
    """Stream a greedy generation; set ``started`` at its first chunk, put the last one in ``result``."""
    params = {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": PROMPT, "sampling_params": params, "stream": True}
    with httpx.stream("POST", url + "/generate", json=body, timeout=300) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                result.update(json.loads(line[len("data: ") :]))
                started.set()


def stats(url: str) -> dict:
    return httpx.get(url + "/get_server_info", timeout=30).json()["stats"]


def update(url: str, path: str) -> httpx.Response:
    return httpx.post(url + "/update_weights_from_disk", json={"model_path": path}, timeout=300)


def test_update_weights_switches_model_after_running_requests_finish(server, dirs):
    first, second = reference_greedy(dirs["first"], LONG), reference_greedy(dirs["second"], 8)
    assert first[:8] != second
    assert generate(server.url, 8)["output_ids"] == first[:8]
    assert stats(server.url)["kv_cached"] > 0  # the prompt sits in the radix cache

    in_flight: dict = {}
    started = threading.Event()
    worker = threading.Thread(target=stream_generate, args=(server.url, LONG, started, in_flight))
    worker.start()
    assert started.wait(60)
    resp = update(server.url, dirs["second"])
    worker.join()
    assert resp.status_code == 200, resp.text
    assert resp.json()["success"] is True
    assert in_flight["output_ids"] == first  # finished on the old weights, before the swap

    after = stats(server.url)
    assert after["kv_cached"] == 0 and after["kv_used"] == 0  # radix cache flushed, no slot leaked
    out = generate(server.url, 8)
    assert out["output_ids"] == second
    assert out["meta_info"]["cached_tokens"] == 0  # no stale KV of the old weights reused
    info = httpx.get(server.url + "/get_model_info", timeout=10).json()
    assert info["local_model_path"] == dirs["second"]


@pytest.mark.parametrize(
    "name, body, needle",
    [
        ("wider", None, "mlp"),
        ("qwen2", None, "architecture"),
        ("second", {"load_format": "gguf"}, "gguf"),
        ("missing", None, "does not exist"),
    ],
)
def test_mismatched_checkpoint_is_refused_and_old_weights_serve(server, dirs, name, body, needle):
    before = generate(server.url, 8)["output_ids"]
    path = dirs.get(name, "/nonexistent/checkpoint")
    resp = httpx.post(
        server.url + "/update_weights_from_disk", json={"model_path": path, **(body or {})}, timeout=300
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["success"] is False
    assert needle in resp.json()["message"]
    assert generate(server.url, 8)["output_ids"] == before


def test_update_weights_rejects_unknown_fields(server):
    resp = httpx.post(server.url + "/update_weights_from_disk", json={"path": "x"}, timeout=30)
    assert resp.status_code == 400


def test_profile_writes_a_trace_of_forward_ops(server, tmp_path):
    url = server.url
    assert httpx.post(url + "/stop_profile", timeout=30).status_code == 400  # not started
    resp = httpx.post(url + "/start_profile", json={"output_dir": str(tmp_path)}, timeout=30)
    assert resp.status_code == 200, resp.text
    again = httpx.post(url + "/start_profile", json={"output_dir": str(tmp_path)}, timeout=30)
    assert again.status_code == 400 and "already" in again.text
    generate(url, 4)
    resp = httpx.post(url + "/stop_profile", timeout=60)
    assert resp.status_code == 200, resp.text
    (trace,) = glob.glob(str(tmp_path / "*.trace.json.gz"))
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e.get("name", "") for e in events}
    # our forward steps (prefill, then decodes) and the torch ops inside them
    assert {"radixlm.forward.extend", "radixlm.forward.decode", "aten::embedding"} <= names, sorted(names)
    assert httpx.post(url + "/stop_profile", timeout=30).status_code == 400


def test_profile_stops_by_itself_after_num_steps(server, tmp_path):
    url = server.url
    body = {"output_dir": str(tmp_path), "num_steps": 2, "activities": ["CPU"]}
    assert httpx.post(url + "/start_profile", json=body, timeout=30).status_code == 200
    generate(url, 4)
    wait_until(lambda: glob.glob(str(tmp_path / "*.trace.json.gz")), 60, "the trace file")
    assert httpx.post(url + "/stop_profile", timeout=30).status_code == 400  # already stopped
    bad = httpx.post(url + "/start_profile", json={"activities": ["TPU"]}, timeout=30)
    assert bad.status_code == 400 and "TPU" in bad.text
