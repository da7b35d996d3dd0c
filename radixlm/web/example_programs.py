"""The playground's example programs, compiled to the request graphs ``static/examples.json`` ships.

The page never sends Python: it shows each program's source and posts its graph. Regenerate the
file after editing a program here (a test checks it is current)::

    python -m radixlm.web.example_programs
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import radixlm as sgl
from radixlm.frontend.chat_template import get_chat_template
from radixlm.frontend.compiler import compile_program
from radixlm.program.sampling import run_defaults

OUTPUT = Path(__file__).parent / "static" / "examples.json"


@sgl.function
def tree_of_thought(s: Any) -> None:
    s += "Problem: plan a picnic for ten people on a small budget.\n"
    branches = s.fork(3)
    for i, branch in enumerate(branches):
        branch += f"Approach {i + 1}:" + sgl.gen("approach", max_tokens=16, stop="\n")
    branches.join()
    for i, branch in enumerate(branches):
        s += f"Approach {i + 1}:" + branch["approach"] + "\n"
    s += "The most promising approach is number" + sgl.select("best", choices=[" 1", " 2", " 3"])


@sgl.function
def few_shot_qa(s: Any) -> None:
    s += "Q: What is the capital of France?\nA: Paris\n"
    s += "Q: What is the capital of Japan?\nA: Tokyo\n"
    s += "Q: What is the capital of Italy?\nA:" + sgl.gen("answer", max_tokens=8, stop="\n")
    s += "\nIs that answer correct?" + sgl.select("check", choices=[" yes", " no"])


@sgl.function
def json_extraction(s: Any) -> None:
    s += "Extract the city and its population from: Lyon has about 520,000 inhabitants.\n"
    s += sgl.gen("city", max_tokens=48, regex=r'\{"city": "[A-Za-z ]{1,20}", "population": [0-9]{1,9}\}')


EXAMPLES = (tree_of_thought, few_shot_qa, json_extraction)


def example_entries() -> list[dict[str, Any]]:
    """``[{"name", "source", "graph"}]``: each example with its greedy request graph."""
    template = get_chat_template("default")
    entries = []
    for fn in EXAMPLES:
        ir = fn.trace()
        graph = compile_program(ir, template, run_defaults({"temperature": 0.0}))
        entries.append({"name": fn.func.__name__, "source": inspect.getsource(fn.func), "graph": graph})
    return entries


def render() -> str:
    return json.dumps(example_entries(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
