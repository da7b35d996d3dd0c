"""``custom_logit_processor`` (SGLang's serialized processors): off by default with a 400 that says
what the flag trusts; on, it rewrites its own request's logits before the grammar mask and sampling,
and one that raises fails its request alone."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import httpx
import pytest
import torch

from radixlm import CustomLogitProcessor
from radixlm.runtime.sampling.custom_logit_processor import apply_custom_processors, load_processor
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.launch import launch_server
from tests.helpers.engines import make_engine
from tests.helpers.logit_processors import ForceToken, Identity, RaisesWhenAsked


def _seq(processor: type | None, **custom_params) -> SimpleNamespace:
    params = SamplingParams(
        custom_logit_processor=processor.to_str() if processor else None, custom_params=custom_params or None
    )
    return SimpleNamespace(sampling_params=params)


def test_to_str_is_sglangs_format_and_loads_an_instance():
    text = ForceToken.to_str()
    assert set(json.loads(text)) == {"callable"}
    assert isinstance(load_processor(text), ForceToken) and issubclass(ForceToken, CustomLogitProcessor)
    with pytest.raises(ValueError, match="CustomLogitProcessor.to_str"):
        load_processor('{"code": "print(1)"}')


def test_rows_get_their_own_processor_and_a_raise_fails_only_its_row():
    logits = torch.randn(4, 16)
    before = logits.clone()
    reqs = [_seq(ForceToken, token_id=3), _seq(None), _seq(RaisesWhenAsked, fail=True), _seq(RaisesWhenAsked)]
    errors = apply_custom_processors(logits, reqs)
    assert list(errors) == [2] and "RuntimeError: asked to fail" in errors[2]
    assert int(logits[0].argmax()) == 3 and torch.isinf(logits[0]).sum() == 15
    assert torch.equal(logits[1:], before[1:])  # untouched rows, and the failed row left as it was


@pytest.fixture(scope="module")
def servers(tiny_llama_dir):
    common = dict(model=tiny_llama_dir, device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512)
    with launch_server(**common, enable_custom_logit_processor=True) as on, launch_server(**common) as off:
        yield on.url, off.url


def _generate(url: str, **body) -> httpx.Response:
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}, **body}
    return httpx.post(url + "/generate", json=body, timeout=60)


def test_off_by_default_says_what_the_flag_trusts(servers):
    r = _generate(servers[1], custom_logit_processor=Identity.to_str())
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "disabled" in message and "--enable-custom-logit-processor" in message and "Python" in message


def test_processor_drives_generate_and_completions(servers):
    url = servers[0]
    r = _generate(
        url,
        custom_logit_processor=ForceToken.to_str(),
        sampling_params={"max_new_tokens": 4, "temperature": 0.7, "custom_params": {"token_id": 72}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["output_ids"] == [72] * 4
    plain = _generate(url).json()["output_ids"]
    assert _generate(url, custom_logit_processor=Identity.to_str()).json()["output_ids"] == plain
    body = {
        "prompt": "hello",
        "max_tokens": 3,
        "custom_logit_processor": ForceToken.to_str(),
        "custom_params": {"token_id": 72},
    }
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3


def test_a_processor_that_raises_fails_its_request_only(servers):
    url = servers[0]

    processor = RaisesWhenAsked.to_str()

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            bad = {"max_new_tokens": 8, "custom_params": {"fail": True}}
            good = {"max_new_tokens": 8, "custom_params": {}}
            return await asyncio.gather(
                *(
                    client.post(
                        url + "/generate",
                        json={"text": "hi", "sampling_params": p, "custom_logit_processor": processor},
                    )
                    for p in (bad, good)
                )
            )

    bad, good = asyncio.run(both())
    assert bad.status_code == 500 and "asked to fail" in bad.json()["error"]["message"]
    assert good.status_code == 200 and len(good.json()["output_ids"]) == 8
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    r = _generate(url, custom_logit_processor='{"callable": "00"}')
    assert r.status_code == 400 and "could not be loaded" in r.json()["error"]["message"]


def test_engine_needs_the_flag_too(tiny_llama_dir):
    params = {"max_new_tokens": 3, "custom_params": {"token_id": 72}}
    params["custom_logit_processor"] = ForceToken.to_str()
    common = {"device": "cpu", "num_threads": 1}
    with make_engine(tiny_llama_dir, **common) as engine:
        with pytest.raises(ValueError, match="enable_custom_logit_processor"):
            engine.generate("hello", params)
    with make_engine(tiny_llama_dir, **common, enable_custom_logit_processor=True) as engine:
        assert engine.generate("hello", params)["output_ids"] == [72] * 3
