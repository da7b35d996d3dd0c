"""``ServerArgs``: frozen, enumerated options checked at construction, CLI choices from the types."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from radixlm.runtime.server.launch import server_flags
from radixlm.runtime.server.serve_cli import add_serve_arguments
from radixlm.runtime.server_args import ServerArgs, enumerated_options


def test_frozen_and_replace_makes_a_checked_copy():
    args = ServerArgs()
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.port = 1  # type: ignore[misc]
    assert args.replace(port=1).port == 1 and args.port == 30000
    with pytest.raises(ValueError, match="device"):
        args.replace(device="tpu")


@pytest.mark.parametrize(
    "name, value",
    [
        ("device", "tpu"),
        ("dtype", "int8"),
        ("attention_backend", "flash"),
        ("schedule_policy", "random"),
        ("log_level", "loud"),
    ],
)
def test_bad_enumerated_value_names_the_option_and_the_choices(name, value):
    with pytest.raises(ValueError, match=name) as e:
        ServerArgs(**{name: value})
    assert all(choice in str(e.value) for choice in enumerated_options()[name])


def test_cli_flags_round_trip():
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = ServerArgs(model="m", device="cpu", dtype="bf16", kv_cache_gb=0.5, disable_radix_cache=True)
    parsed = vars(parser.parse_args(server_flags(args)))
    assert ServerArgs(**parsed) == args
    with pytest.raises(
        SystemExit
    ):  # SGLang's random is served as lpm (tests/e2e/test_sglang_launch_flags.py)
        parser.parse_args(["--schedule-policy", "sideways"])
