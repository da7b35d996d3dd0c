"""API speculative execution against SGLang's own code as the reference: the matching of a chat
turn (``OpenAI.spec_pattern_match``) and the completion path (``StreamExecutor._spec_gen`` and
``_execute_fill``) of sglang 0.5.2, run in its venv on the same outputs as ours
(``radixlm.frontend.api_speculation``). Only cases SGLang's code accepts (one stop string per gen)."""

from __future__ import annotations

import json
import subprocess
import textwrap

from radixlm.frontend.api_speculation import CompletionSpeculation, Piece, match_turn
from tests.e2e.test_sglang_client import sglang_python  # noqa: F401  (the venv fixture)

CHAT_CASES = [  # (turn: fixed text as a string, a gen as [name, stop]), output
    ([["a", "\n"], "\nB:", ["b", "\n"]], "x\nB: y\nz"),
    ([["a", ";"], "; c=", ["b", ";"]], "x; d=y;"),
    ([["a", ","], ", ", ["b", "."]], "one, two"),
    ([["a", "!"], "! ", ["b", "."]], "no bang here."),
    ([["name", "\n"], "\nAge:", ["age", "\n"], "\nJob:", ["job", "\n"]], "Ada\nAge: 36\nJob: poet\nmore"),
]
COMPLETION_CASES = [  # (steps: ["gen", max_tokens, stop] or ["fill", text]), outputs in call order
    (
        [["gen", 16, "\n"], ["fill", "\nAge:"], ["gen", 16, "\n"], ["fill", "\nJob:"], ["gen", 4, None]],
        ["Ada\nAge: 36\nJob: poet", "spare", "spare"],
    ),
    ([["gen", 16, "\n"], ["fill", "\nCity:"], ["gen", 16, "\n"]], ["Ada\nAge: 36\n", "Rome\n", "spare"]),
    (
        [["gen", 3, None], ["fill", "da"], ["gen", 8, ["!", "?"]], ["gen", 2, None]],
        ["Ada is here? yes", "zz", "spare"],
    ),
]

SGLANG_SIDE = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    from sglang.lang.backend.openai import OpenAI
    from sglang.lang.interpreter import StreamExecutor

    chat_cases, completion_cases = json.load(sys.stdin)
    chat = []
    for turn, output in chat_cases:
        fmt = [{"text": p, "stop": None, "name": None} if isinstance(p, str)
               else {"text": "", "stop": p[1], "name": p[0]} for p in turn]
        ok = OpenAI.spec_pattern_match(SimpleNamespace(spec_format=fmt), output)
        chat.append([ok, [t["text"] for t in fmt]])
    completion = []
    for steps, outputs in completion_cases:
        calls = iter(outputs)
        backend = SimpleNamespace(is_chat_model=False, generate=lambda s, sampling_params: (next(calls), {}))
        ex = SimpleNamespace(cur_role=None, num_api_spec_tokens=32, backend=backend, speculated_text="",
                             text_="")
        values = []
        for step in steps:
            if step[0] == "fill":
                StreamExecutor._execute_fill(ex, step[1])
            else:
                params = SimpleNamespace(max_new_tokens=step[1], stop=step[2])
                values.append(StreamExecutor._spec_gen(ex, params)[0])
        completion.append([values, len(outputs) - len(list(calls))])
    print("RESULT " + json.dumps([chat, completion]))
""")


def _ours() -> list:
    chat = []
    for turn, output in CHAT_CASES:
        pieces = [Piece(p) if isinstance(p, str) else Piece("", True, p[0], (p[1],)) for p in turn]
        ok = match_turn(pieces, output)
        chat.append([ok, [p.text for p in pieces]])
    completion = []
    for steps, outputs in COMPLETION_CASES:
        calls = iter(outputs)
        spec = CompletionSpeculation(32)
        values = []
        for step in steps:
            if step[0] == "fill":
                spec.fill(step[1])
            else:
                options = {"max_new_tokens": step[1], "stop": step[2]}
                values.append(spec.gen(options, lambda _, it=calls: (next(it), {}))[0])
        completion.append([values, len(outputs) - len(list(calls))])
    return [chat, completion]


def test_matching_and_completion_speculation_as_sglang(sglang_python):  # noqa: F811
    run = subprocess.run(
        [sglang_python, "-c", SGLANG_SIDE],
        input=json.dumps([CHAT_CASES, COMPLETION_CASES]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.split("RESULT ", 1)[1])
    assert _ours() == theirs
