"""The OpenAPI document (``GET /openapi.json``): valid OpenAPI 3, every served route in it, every body
schema in step with the parser it describes, and served only past the front door."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate

from radixlm.runtime.sampling.param_rules import NUMBER_RULES
from radixlm.runtime.sampling.params_schema import sampling_params_schema
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.http_server import build_app
from radixlm.runtime.server.native_schemas import SESSION_PARAMS_SCHEMA
from radixlm.runtime.server.openapi_doc import BODYLESS_POSTS, OPENAPI_PATH
from radixlm.runtime.server.sessions import SESSION_PARAMS
from radixlm.runtime.server_args import ServerArgs


def make_app(**overrides: Any) -> Any:
    tokenizer_manager = types.SimpleNamespace(metrics=None, finish_hooks=[])
    return build_app(tokenizer_manager, ServerArgs(model="m", **overrides))


def served_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(path, method) of every route the app answers, through included routers."""
    for route in routes:
        if isinstance(route, APIRoute):
            for method in route.methods:
                yield prefix + route.path_format, method.lower()  # /{model_id:path} -> /{model_id}
        elif hasattr(route, "original_router"):  # FastAPI >= 0.13x keeps included routers whole
            yield from served_routes(route.original_router.routes, prefix + route.include_context.prefix)
        elif getattr(route, "path", None) is not None:  # plain Starlette routes (the document itself)
            for method in getattr(route, "methods", None) or ():
                if method != "HEAD":
                    yield prefix + route.path, method.lower()


@pytest.fixture(scope="module")
def app():
    return make_app()


@pytest.fixture(scope="module")
def doc(app):
    return app.openapi()


def test_document_is_valid_openapi_3(doc):
    validate(doc)  # raises naming the first violation
    assert doc["openapi"].startswith("3.")


def test_every_served_route_is_documented(app, doc):
    served = set(served_routes(app.routes))
    assert ("/generate", "post") in served and (OPENAPI_PATH, "get") in served  # the walk sees the app
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert served - documented == set()
    assert documented - served == set()


def test_every_body_reading_operation_has_a_body_schema(doc):
    ops = [(path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()]
    for path, method, op in ops:
        if method == "post" and path not in BODYLESS_POSTS:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            assert schema, path
        for status in ("200", "400", "503"):
            assert status in op["responses"], (path, method, status)
    assert len({op["operationId"] for _, _, op in ops}) == len(ops)


def test_server_limits_are_written_in():
    doc = make_app(max_n=3, max_stop_strings=2, max_program_nodes=7).openapi()
    schemas = doc["components"]["schemas"]
    assert schemas["SamplingParams"]["properties"]["n"]["maximum"] == 3
    assert schemas["SamplingParams"]["properties"]["stop"]["anyOf"][1]["maxItems"] == 2
    assert schemas["ChatCompletionRequest"]["properties"]["n"]["maximum"] == 3
    body = doc["paths"]["/program"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["graph"]["properties"]["nodes"]["maxItems"] == 7


def test_session_params_schema_names_the_keys_sessions_accept():
    assert set(SESSION_PARAMS_SCHEMA["properties"]) == SESSION_PARAMS


def test_sampling_schema_describes_every_field_with_its_default():
    props = sampling_params_schema()["properties"]
    defaults = SamplingParams()
    assert set(props) == set(defaults.to_dict())
    for name in NUMBER_RULES:
        assert props[name]["default"] == getattr(defaults, name)


def _outside(rule) -> list[Any]:
    out: list[Any] = [True, "1", None, float("inf")]
    if rule.minimum is not None:
        out.append(rule.minimum if rule.exclusive_minimum else rule.minimum - (1 if rule.integer else 1e-9))
    if rule.maximum is not None:
        out.append(rule.maximum + (1 if rule.integer else 1e-9))
    if rule.integer:
        out.append(1.5)
    return out


@pytest.mark.parametrize("name", sorted(NUMBER_RULES))
def test_numbers_the_schema_rejects_are_rejected(name):
    import jsonschema

    schema = NUMBER_RULES[name].json_schema()
    for value in _outside(NUMBER_RULES[name]):
        if value == float("inf"):  # JSON has no infinity: the body parser refuses it first
            assert not NUMBER_RULES[name].accepts(value)
            continue
        assert not jsonschema.Draft202012Validator(schema).is_valid(value), (name, value)
        with pytest.raises(ValueError, match=name):
            SamplingParams.from_dict(
                {name: value, **({"max_new_tokens": 10**6} if name != "max_new_tokens" else {})}
            )


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=st.one_of(st.integers(-5, 5), st.floats(-3, 3, allow_nan=False), st.booleans()),
    name=st.sampled_from(sorted(NUMBER_RULES)),
)
def test_schema_and_validation_agree_on_numbers(name, value):
    """The schema accepts a number exactly when ``SamplingParams`` does (min <= max aside)."""
    import jsonschema

    if NUMBER_RULES[name].integer and isinstance(value, float):
        # JSON schema counts 2.0 as an integer; the server is stricter and refuses it
        with pytest.raises(ValueError, match=name):
            SamplingParams.from_dict({"max_new_tokens": 10, name: value})
        return
    in_schema = jsonschema.Draft202012Validator(NUMBER_RULES[name].json_schema()).is_valid(value)
    extra = {"max_new_tokens": 10} if name == "min_new_tokens" else {}
    try:
        SamplingParams.from_dict({name: value, **extra})
        accepted = True
    except ValueError:
        accepted = False
    assert in_schema == accepted, (name, value)
