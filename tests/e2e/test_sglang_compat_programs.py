"""SGLang's program-state, tracing and compile API (issue 28, classes 1 and 2), under both clients.

``compat_programs.py`` (programs of our own) runs twice against one server on the tiny model: with
``import radixlm as sgl`` and with the real sglang 0.5.2 client. Each run's output is checked on its
own, and where both clients send the same prompt text (first generations, pure computations) the two
must agree exactly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from radixlm.runtime.server.launch import launch_server
from tests.e2e.test_sglang_client import sglang_python  # noqa: F401  (the real client's venv, a fixture)

SCRIPT = Path(__file__).with_name("compat_programs.py")
REPO = Path(__file__).resolve().parents[2]
CLIENTS = ("radixlm", "sglang")


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir, device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def results(server, sglang_python) -> dict[str, dict]:  # noqa: F811
    pythons = {"radixlm": sys.executable, "sglang": sglang_python}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = {}
    for client in CLIENTS:
        run = subprocess.run(
            [pythons[client], str(SCRIPT), client, server.url, f"tag-{client}"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env if client == "radixlm" else None,
        )
        log = server.log()[-2000:]
        assert run.returncode == 0, f"{client} stderr:\n{run.stderr[-4000:]}\nserver log:\n{log}"
        line = next(s for s in run.stdout.splitlines() if s.startswith("RESULT "))
        out[client] = json.loads(line[len("RESULT ") :])
    return out


@pytest.mark.parametrize("client", CLIENTS)
def test_var_scope_holds_the_text_of_its_block(results, client):
    out = results[client]
    card = out["card"]
    expected = (
        f'{{"label": {card["label"]},\n "parts": {card["parts"]},\n "weight": {card["weight"]},\n'
        f' "wireless": {card["wireless"]}}}'
    )
    assert card["card"] == expected
    assert out["card_text"] == "Describe the toaster as JSON.\n" + expected + "\nDone."
    regex_int, regex_float, regex_bool, _ = out["regex"]
    assert re.fullmatch(regex_int, card["parts"]) and re.fullmatch(regex_float, card["weight"])
    assert re.fullmatch(regex_bool, card["wireless"]) and card["label"].startswith('"')


@pytest.mark.parametrize("client", CLIENTS)
def test_stream_executor_and_global_config(results, client):
    out = results[client]
    assert out["executor"] == {
        "text_matches": True,
        "variables": {"card": out["card"]["card"], "parts": out["card"]["parts"]},
        "is_finished": True,
    }
    expected_config = {"is_module_attribute": True, "default_backend_is_set": True, "precache": True}
    assert out["global_config"] == expected_config
    assert out["verbosity"]["printed"] == out["verbosity"]["text"] + "\n"
    assert out["verbosity"]["text"].startswith("Say hello:")


def test_regex_constants_accept_what_sglangs_accept(results):
    samples = ["12", "-7 ", "+3\n", "x1", "1.5", ".5", "-0.25 \n", "1.", "True", "False", "true"]
    samples += ['"ab c_9"', '"a-b"', '""', "'a'", '"a"b"']
    for ours, theirs in zip(results["radixlm"]["regex"], results["sglang"]["regex"]):
        for text in samples:
            assert bool(re.fullmatch(ours, text)) == bool(re.fullmatch(theirs, text)), (ours, theirs, text)


@pytest.mark.parametrize("client", CLIENTS)
def test_trace_prints_the_graph_dependencies_first(results, client):
    lines = results[client]["graph_dfs"].splitlines()
    assert len(lines) == 8  # 6 texts or arguments, 2 gens
    defined: list[str] = []
    for line in lines:
        m = re.fullmatch(r"%(\d+) = (?:%(\d+) \+ )?(.+)", line)
        assert m is not None, line
        assert m.group(2) is None or m.group(2) == defined[-1]  # one chain, each node after its input
        defined.append(m.group(1))
    assert "season" in lines[1] and "A haiku about " in lines[0]
    assert "'one'" in lines[4] and "'two'" in lines[7]


@pytest.mark.parametrize("client", CLIENTS)
def test_fstring_over_a_traced_argument_raises_type_error(results, client):
    out = results[client]
    assert out["fstring_errors"] == {"trace": "TypeError", "compile": "TypeError"}
    assert out["fstring_run"].startswith("Hello Ada, ")  # run() gives the value: no placeholder


@pytest.mark.parametrize("client", CLIENTS)
def test_compiled_program_calling_another_function(results, client):
    out = results[client]
    text, v = out["compiled"]["text"], out["compiled"]["vars"]
    head = f"Two points about rivers.\n1.{v['point_1']}\n2.{v['point_2']}\nFirst: "
    assert text.startswith(head) and "\nSecond: " in text and text.endswith("\nSo" + v["conclusion"])
    assert out["compiled_batch"] == [text, out["compiled_single_lakes"]]
    if client == "radixlm":
        # One request graph, contexts as token ids: exactly what the interpreter produces.
        assert text == out["compiled"]["interpreted_text"]


def test_compiled_first_generation_agrees_across_clients(results):
    ours, theirs = results["radixlm"]["compiled"]["vars"], results["sglang"]["compiled"]["vars"]
    assert ours["point_1"] == theirs["point_1"]
    assert results["radixlm"]["card"]["label"] == results["sglang"]["card"]["label"]
    assert results["radixlm"]["model_name"] == results["sglang"]["model_name"] != ""


@pytest.mark.parametrize("client", CLIENTS)
def test_cache_prefills_the_bound_prefix(results, client):
    cache = results[client]["cache"]
    assert cache["cached_tokens"] >= 64 and cache["control_cached_tokens"] < 8


def test_choices_methods_decide_as_sglangs_own(results):
    ours, theirs = results["radixlm"]["choices"], results["sglang"]["choices"]
    assert ours == theirs
    assert ours["greedy_token_selection"]["decision"] == "cat"
    assert ours["unconditional_likelihood_normalized"]["decision"] == "category"
