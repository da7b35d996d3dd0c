"""Every flag of SGLang's ``server_args.py`` on our launch line: classified, and parsed as classified.

SGLang's list comes from its source in the sglang venv (``tests/e2e/test_sglang_client.py`` builds it)
or, without the venv, from the snapshot that ``tests/helpers/sglang_server_args.py`` wrote from it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from radixlm.cli import build_parser
from radixlm.runtime.server.serve_cli import add_serve_arguments, server_args_from_flags
from radixlm.runtime.server.sglang_flag_types import Nearest, Refuse
from radixlm.runtime.server.sglang_flags import SGLANG_FLAGS
from radixlm.runtime.server.sglang_flags_doc import render
from radixlm.runtime.server_args import ServerArgs, enumerated_options
from radixlm.version import __version__
from tests.helpers.sglang_server_args import SNAPSHOT, flags_from_source, sglang_flags, venv_server_args

REPO = Path(__file__).resolve().parents[2]
FLAGS = sglang_flags()
BY_NAME = {record["names"][0]: record for record in FLAGS}

# A value our options accept, where the generic sample of the flag's type would not do.
SAMPLES: dict[str, list[str]] = {
    "--device": ["cpu"],
    "--model-impl": ["transformers"],
    "--log-level": ["info"],
    "--reasoning-parser": ["qwen3"],
    "--tool-call-parser": ["qwen25"],
    "--json-model-override-args": ['{"is_original_qwen3_reranker": true}'],
    "--dist-init-addr": ["10.0.0.2:25000"],
    "--nnodes": ["2", "--tp-size", "2", "--dist-init-addr", "10.0.0.2:25000"],
    "--node-rank": ["1", "--nnodes", "2", "--tp-size", "2", "--dist-init-addr", "10.0.0.2:25000"],
}
GENERIC = {"int": "3", "float": "0.5"}


def parse(argv: list[str]) -> tuple[ServerArgs, list[str]]:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_serve_arguments(parser)
    return server_args_from_flags(parser.parse_args(argv))


def sample(record: dict[str, Any]) -> list[str]:
    """A launch-line value for the flag: none for a switch, else one that is not a no-op value."""
    name = record["names"][0]
    if not record["arity"]:
        return []
    if name in SAMPLES:
        return SAMPLES[name]
    accepts = SGLANG_FLAGS[name].accepts
    values = SGLANG_FLAGS[name].values
    choices = [
        c for c in record["choices"] or [] if c not in accepts and not isinstance(values.get(c), Refuse)
    ]
    return [choices[0] if choices else GENERIC.get(record["type"], "x")]


def test_snapshot_matches_sglang_source():
    where = venv_server_args()
    if where is None:
        pytest.skip("no sglang venv (tests/e2e/test_sglang_client.py builds it); the snapshot stands in")
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert flags_from_source(where.read_text(encoding="utf-8")) == snapshot, (
        "SGLang's flags changed: run `python tests/helpers/sglang_server_args.py` and classify the new ones"
    )


def test_every_sglang_flag_is_classified_once():
    assert len(FLAGS) == 210
    assert sorted(BY_NAME) == sorted(SGLANG_FLAGS), "the table and SGLang's list differ"
    for record in FLAGS:
        flag = SGLANG_FLAGS[record["names"][0]]
        assert tuple(record["names"][1:]) == flag.aliases, flag.name
        if flag.status == "implemented":
            assert flag.field is not None and hasattr(ServerArgs(), flag.field), flag.name
            ours = enumerated_options().get(flag.field, ())
            assert not set(flag.values) & set(ours), f"{flag.name}: a translated value is one of ours"
        else:
            assert flag.arity == record["arity"], flag.name
            assert flag.sglang and flag.here, flag.name


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_launch_line_with_flag_behaves_as_classified(name):
    record = BY_NAME[name]
    flag = SGLANG_FLAGS[name]
    for spelling in record["names"]:
        argv = [spelling, *sample(record)]
        if flag.status == "refused":
            with pytest.raises(ValueError) as err:
                parse(argv)
            assert str(err.value) == flag.message() and "Here: " in str(err.value)
            continue
        args, warnings = parse(argv)
        if flag.status == "warned":
            assert warnings == [flag.message()] and name in warnings[0]
            assert args == ServerArgs(), f"{spelling} changed an option"
            continue
        assert flag.field is not None
        expected: Any = True if not record["arity"] else argv[1]
        if record["type"] in ("int", "float") and record["arity"]:
            expected = {"int": int, "float": float}[record["type"]](expected)
        if record["arity"] == "*":  # a list option (--lora-paths a=/x b=/y)
            expected = tuple(argv[1:])
        assert getattr(args, flag.field) == _translated(flag.values.get(expected, expected)), spelling
        assert len(warnings) == isinstance(flag.values.get(expected), Nearest)


def _translated(outcome: Any) -> Any:
    return outcome.value if isinstance(outcome, Nearest) else outcome


# values that need another flag on the same line
COMPANIONS = {"STANDALONE": ["--speculative-draft-model-path", "draft-model"]}


@pytest.mark.parametrize("name", sorted(n for n, f in SGLANG_FLAGS.items() if f.values))
def test_every_sglang_value_of_an_implemented_flag(name):
    flag = SGLANG_FLAGS[name]
    assert flag.field is not None
    values = BY_NAME[name]["choices"] or list(flag.values)
    for value in values:
        outcome = flag.values.get(value, value)
        if isinstance(outcome, Refuse):
            with pytest.raises(ValueError, match=f"{name} {value} is not supported: "):
                parse([name, value])
            continue
        args, warnings = parse([name, value, *COMPANIONS.get(value, [])])
        if isinstance(outcome, Nearest):
            assert getattr(args, flag.field) == outcome.value
            assert warnings == [f"{name} {value}: {outcome.why}."]
        else:
            assert getattr(args, flag.field) == outcome and warnings == []


@pytest.mark.parametrize(
    "argv",
    [["--pp-size", "1"], ["--load-format", "auto"], ["--disaggregation-mode", "null"], ["--page-size", "1"]],
)
def test_values_that_ask_for_what_we_do_are_accepted_silently(argv):
    assert parse(argv) == (ServerArgs(), [])


def test_a_common_sglang_launch_line():
    """SGLang's docs abbreviate (``--tp 2``); argparse takes unique prefixes on both sides."""
    args, warnings = parse(
        "--model-path Qwen/Qwen2.5-0.5B-Instruct --port 30001 --host 0.0.0.0 --trust-remote-code "
        "--tp 1 --dtype half --mem-fraction-static 0.7 --random-seed 42 --disable-overlap-schedule "
        "--grammar-backend xgrammar --enable-torch-compile --cuda-graph-max-bs 16".split()
    )
    assert (args.model, args.port, args.host, args.tp_size, args.dtype) == (
        "Qwen/Qwen2.5-0.5B-Instruct",
        30001,
        "0.0.0.0",
        1,
        "float16",
    )
    assert (args.mem_fraction_static, args.seed, args.grammar_backend, args.cuda_graph_max_bs) == (
        0.7,
        42,
        "llguidance",
        16,
    )
    named = [w.split()[0] for w in warnings]
    assert named == [
        "--grammar-backend",
        "--trust-remote-code",
        "--disable-overlap-schedule",
        "--enable-torch-compile",
    ]


def test_help_describes_every_flag():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub in [("radixlm", parser), *subparsers.choices.items()]:
        assert sub.format_help()  # renders (a stray % in a help text would raise)
        for action in sub._actions:
            if action.option_strings or action.dest not in ("help", "command"):
                assert action.help and action.help.strip(), f"{command} {action.option_strings} has no help"
    assert set(SGLANG_FLAGS) <= {s for a in subparsers.choices["serve"]._actions for s in a.option_strings}


def test_version():
    for argv in (["-m", "radixlm.launch_server", "--version"], ["-m", "radixlm.cli", "--version"]):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO, timeout=120)
        assert (out.returncode, out.stdout.strip()) == (0, f"radixlm {__version__}")


def test_refused_flag_stops_the_launch_with_the_reason():
    out = subprocess.run(
        [sys.executable, "-m", "radixlm.launch_server", "--model-path", "x", "--enable-double-sparsity"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode != 0
    assert out.stderr.strip() == f"radixlm serve: error: {SGLANG_FLAGS['--enable-double-sparsity'].message()}"


def test_flag_table_document_is_current():
    doc = (REPO / "docs" / "sglang-launch-flags.md").read_text(encoding="utf-8")
    assert doc == render(), (
        "regenerate: python -m radixlm.runtime.server.sglang_flags_doc > docs/sglang-launch-flags.md"
    )


def test_sglang_keyword_arguments(caplog):
    """``Runtime(...)`` / ``Engine(...)`` take SGLang's ``ServerArgs`` names like the launch line."""
    args = ServerArgs.from_kwargs(
        model_path="m",
        random_seed=3,
        dtype="half",
        tp_size=1,
        pp_size=1,
        trust_remote_code=True,
        is_embedding=False,
    )
    assert (args.model, args.seed, args.dtype, args.tp_size) == ("m", 3, "float16", 1)
    assert [r.getMessage() for r in caplog.records] == [SGLANG_FLAGS["--trust-remote-code"].message()]
    with pytest.raises(ValueError, match="--enable-double-sparsity is not supported"):
        ServerArgs.from_kwargs(enable_double_sparsity=True)
    assert ServerArgs.from_kwargs(lora_paths=["a=/x"]).enable_lora  # SGLang: paths enable LoRA
    with pytest.raises(ValueError, match="random_seed=3 and seed=4 disagree"):
        ServerArgs.from_kwargs(random_seed=3, seed=4)
    with pytest.raises(ValueError, match="unknown runtime option"):
        ServerArgs.from_kwargs(no_such_option=1)
