"""OpenAI ``response_format`` json_schema against the real SmolLM2-135M server (jump-forward on)."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from radixlm.runtime.server.launch import launch_server

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "country": {"type": "string", "maxLength": 20},
        "founded": {"type": "integer", "minimum": 0, "maximum": 2025},
    },
    "required": ["city", "country", "founded"],
}


def test_response_format_json_schema(real_model_dir):
    with launch_server(
        model="smollm2-135m", kv_cache_gb=0.1, enable_jump_forward=True, debug_invariants=True
    ) as handle:
        client = openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)
        r = client.chat.completions.create(
            model="smollm2-135m",
            temperature=0,
            max_tokens=80,
            messages=[
                {
                    "role": "user",
                    "content": "Describe Paris as JSON with city, country and the year it was founded.",
                }
            ],
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}},
        )
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
