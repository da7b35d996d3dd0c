"""Programs of our own exercising SGLang's program-state, tracing and compile API, run as a script by
either client: ``python compat_programs.py radixlm|sglang <server url> <tag>``. It prints one line
``RESULT <json>`` that ``test_sglang_compat_programs.py`` checks, so the same programs are asserted
under ``import radixlm as sgl`` and under the real ``import sglang as sgl``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys

PACKAGE, URL, TAG = sys.argv[1], sys.argv[2], sys.argv[3]
sgl = importlib.import_module(PACKAGE)
lang_ir = importlib.import_module(f"{PACKAGE}.lang.ir")  # `from sglang.lang.ir import REGEX_INT`
config_module = importlib.import_module(f"{PACKAGE}.global_config")
REGEX_INT, REGEX_FLOAT, REGEX_BOOL, REGEX_STR = (
    lang_ir.REGEX_INT,
    lang_ir.REGEX_FLOAT,
    lang_ir.REGEX_BOOL,
    lang_ir.REGEX_STR,
)

backend = sgl.RuntimeEndpoint(URL)
sgl.set_default_backend(backend)
out: dict = {"package": PACKAGE}


# ---- program state: var_scope, regex constants, stream_executor, global_config ----------------
@sgl.function
def gadget_card(s, gadget):
    s += "Describe the " + gadget + " as JSON.\n"
    with s.var_scope("card"):
        s += '{"label": ' + sgl.gen("label", regex=REGEX_STR, max_tokens=10) + ",\n"
        s += ' "parts": ' + sgl.gen("parts", regex=REGEX_INT, max_tokens=4, stop=[" ", "\n"]) + ",\n"
        s += ' "weight": ' + sgl.gen("weight", regex=REGEX_FLOAT, max_tokens=5, stop=[" ", "\n"]) + ",\n"
        s += ' "wireless": ' + sgl.gen("wireless", regex=REGEX_BOOL, max_tokens=6) + "}"
    s += "\nDone."


state = gadget_card.run(gadget="toaster", temperature=0)
out["card"] = {k: state[k] for k in ("card", "label", "parts", "weight", "wireless")}
out["card_text"] = state.text()
executor = state.stream_executor
out["executor"] = {
    "text_matches": executor.text_ == state.text(),
    "variables": {k: executor.variables[k] for k in ("card", "parts")},
    "is_finished": bool(executor.is_finished),
}
out["regex"] = [REGEX_INT, REGEX_FLOAT, REGEX_BOOL, REGEX_STR]
out["global_config"] = {
    "is_module_attribute": config_module.global_config is sgl.global_config,
    "default_backend_is_set": sgl.global_config.default_backend is backend,
    "precache": sgl.global_config.enable_precache_with_tracing,
}
out["model_name"] = sgl.global_config.default_backend.get_model_name()


@sgl.function
def echo(s, word):
    s += "Say " + word + ":" + sgl.gen("said", max_tokens=3, temperature=0)


sgl.global_config.verbosity = 2
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    state = echo.run(word="hello")
    state.sync()
sgl.global_config.verbosity = 0
out["verbosity"] = {"printed": printed.getvalue(), "text": state.text()}


# ---- tracing ----------------------------------------------------------------------------------
@sgl.function
def haiku(s, season):
    s += "A haiku about " + season + ".\n"
    s += "Line one:" + sgl.gen("one", max_tokens=4, stop="\n") + "\n"
    s += "Line two:" + sgl.gen("two", max_tokens=4, stop="\n")


out["graph_dfs"] = haiku.trace().last_node.print_graph_dfs()


@sgl.function
def formats_argument(s, name):
    s += f"Hello {name}, " + sgl.gen("greeting", max_tokens=2)


errors = {}
for call in ("trace", "compile"):
    try:
        getattr(formats_argument, call)()
        errors[call] = "no error"
    except TypeError:
        errors[call] = "TypeError"
out["fstring_errors"] = errors
out["fstring_run"] = formats_argument.run(name="Ada", temperature=0).text()


# ---- compile: a program that calls another @function ---------------------------------------
@sgl.function
def elaborate(s, point):
    s += "Elaborate on:" + point + "\n"
    s += sgl.gen("detail", max_tokens=5, stop="\n")


@sgl.function
def two_points(s, topic):
    s += "Two points about " + topic + ".\n"
    s += "1." + sgl.gen("point_1", max_tokens=4, stop=["\n", "."]) + "\n"
    s += "2." + sgl.gen("point_2", max_tokens=4, stop=["\n", "."]) + "\n"
    first = elaborate(point=s["point_1"])
    second = elaborate(point=s["point_2"])
    s += "First: " + first["detail"] + "\n"
    s += "Second: " + second["detail"] + "\n"
    s += "So" + sgl.gen("conclusion", max_tokens=4)


compiled = two_points.compile()
state = compiled.run(topic="rivers", temperature=0)
out["compiled"] = {
    "text": state.text(),
    "vars": {k: state[k] for k in ("point_1", "point_2", "conclusion")},
    "interpreted_text": two_points.run(topic="rivers", temperature=0).text(),
}
states = compiled.run_batch([{"topic": "rivers"}, {"topic": "lakes"}], temperature=0)
out["compiled_batch"] = [s.text() for s in states]
out["compiled_single_lakes"] = compiled.run(topic="lakes", temperature=0).text()


# ---- cache() of a bound program -------------------------------------------------------------
@sgl.function
def briefing(s, preamble, question):
    s += preamble
    s += "Question: " + question + "\nAnswer:" + sgl.gen("answer", max_tokens=2, temperature=0)


preamble = f"[{TAG}] You are a careful assistant. Answer every question with a single short word.\n"
assert len(preamble) > 64  # SGLang caches only longer prefixes
cached = briefing.bind(preamble=preamble)
cached.cache(backend)
state = cached.run(question="Sky colour?")
out["cache"] = {"cached_tokens": state.get_meta_info("answer")["cached_tokens"]}
control = briefing.bind(preamble=f"<{TAG}> Another preamble, never cached before this very run of it.\n")
state = control.run(question="Sky colour?")
out["cache"]["control_cached_tokens"] = state.get_meta_info("answer")["cached_tokens"]


# ---- choices methods called directly --------------------------------------------------------
scores = {
    "choices": ["cat", "category", "dog"],
    "normalized_prompt_logprobs": [-0.5, -0.3, -0.4],
    "input_token_logprobs": [
        [[-0.2, 11, None]],
        [[-0.2, 11, None], [-0.4, 12, None]],
        [[-0.6, 13, None], [-0.2, 14, None]],
    ],
    "output_token_logprobs": [[], [], []],
    "unconditional_token_logprobs": [
        [[None, 11, None]],
        [[None, 11, None], [-1.5, 12, None]],
        [[None, 13, None], [-0.1, 14, None]],
    ],
}
decisions = {}
for method in ("token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized"):
    decision = getattr(sgl, method)(**scores)
    decisions[method] = {"decision": decision.decision, "meta": decision.meta_info}
out["choices"] = decisions

print("RESULT " + json.dumps(out, default=float))
