"""What speculation reports: SGLang's meta_info fields per request (Engine, n > 1) and the
acceptance gauges of ``/metrics``."""

from __future__ import annotations

from radixlm.runtime.server.metrics import ServerMetrics
from tests.helpers.engines import make_engine
from tests.runtime.speculative.spec_helpers import repetitive_prompt


def test_engine_meta_info_and_n_samples(tiny_llama_dir):
    ids = repetitive_prompt(48, 4).tolist()
    params = {"temperature": 0, "max_new_tokens": 32, "ignore_eos": True}
    plain = make_engine(
        tiny_llama_dir, device="cpu", dtype="float32", num_threads=1, speculative_algorithm="NONE"
    )
    try:
        expected = plain.generate(input_ids=ids, sampling_params=params)
        assert "spec_verify_ct" not in expected["meta_info"]
    finally:
        plain.shutdown()
    engine = make_engine(
        tiny_llama_dir,
        device="cpu",
        dtype="float32",
        num_threads=1,
        speculative_algorithm="NGRAM",
        speculative_max_batch=64,
        speculative_speed_check=False,
    )
    try:
        out = engine.generate(input_ids=ids, sampling_params=params)
        samples = engine.generate(input_ids=ids, sampling_params={**params, "n": 3})
        off = engine.generate(input_ids=ids, sampling_params={**params, "speculative": False})
    finally:
        engine.shutdown()
    assert out["output_ids"] == expected["output_ids"] == off["output_ids"]
    meta = out["meta_info"]
    assert meta["spec_verify_ct"] > 0 and 0 < meta["spec_accept_token_num"] <= meta["spec_draft_token_num"]
    assert meta["spec_accept_rate"] == meta["spec_accept_token_num"] / meta["spec_draft_token_num"]
    assert meta["spec_accept_length"] > 1
    assert [s["output_ids"] for s in samples] == [expected["output_ids"]] * 3
    assert off["meta_info"].get("spec_verify_ct", 0) == 0


def test_metrics_render_acceptance():
    metrics = ServerMetrics("m")
    text = metrics.render(
        {"kv_total": 10, "spec_draft_tokens": 40, "spec_accepted_tokens": 30, "spec_verify_steps": 10}
    ).decode()
    assert 'spec_accept_rate{model_name="m"} 0.75' in text
    assert 'spec_accept_length{model_name="m"} 4.0' in text
