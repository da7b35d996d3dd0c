"""The real SGLang frontend (sglang==0.5.2 in its own venv, no torch) runs programs against our server.

The venv is built once under ``$RADIXLM_CACHE/venvs`` (about 15 s); without a package registry the
test is skipped with the pip error as the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from radixlm.runtime.server.launch import launch_server
from radixlm.runtime.weights.model_registry import cache_dir

SGLANG_VERSION = "0.5.2"

PROGRAMS = textwrap.dedent("""
    import json, sys
    import sglang as sgl

    assert "torch" not in sys.modules
    sgl.set_default_backend(sgl.RuntimeEndpoint(sys.argv[1]))

    @sgl.function
    def answer(s, question):
        s += "Q: " + question + "\\nA:"
        s += sgl.gen("answer", max_tokens=8, temperature=0)

    @sgl.function
    def pick(s):
        s += "My favourite colour is"
        s += sgl.select("colour", choices=[" red", " green", " blue"])

    @sgl.function
    def branches(s):
        s += "Two ideas."
        forks = s.fork(2)
        for i, f in enumerate(forks):
            f += f" Idea {i}:"
            f += sgl.gen("idea", max_tokens=4, temperature=0)
        forks.join()
        s += " Summary:" + sgl.gen("summary", max_tokens=4, temperature=0)

    out = {}
    state = answer.run(question="What is 1+1?")
    out["gen"] = {"answer": state["answer"], "text": state.text(),
                  "meta": state.get_meta_info("answer")}
    out["greedy_again"] = answer.run(question="What is 1+1?")["answer"]
    state = pick.run()
    out["select"] = state["colour"]
    state = branches.run()
    out["fork"] = {"summary": state["summary"], "text": state.text()}
    state = answer.run(question="Stream?", stream=True)
    out["stream_chunks"] = list(state.text_iter("answer"))
    out["stream_final"] = state["answer"]
    states = answer.run_batch([{"question": "a"}, {"question": "b"}, {"question": "c"}], num_threads=2)
    out["batch"] = [s["answer"] for s in states]
    out["batch_single"] = [answer.run(question=q)["answer"] for q in "abc"]
    sgl.flush_cache()
    out["server_info_keys"] = sorted(sgl.get_server_info())
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def sglang_python() -> str:
    venv = cache_dir() / "venvs" / f"sglang-{SGLANG_VERSION}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                f"sglang=={SGLANG_VERSION}",
                "pybase64",
                "pydantic",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if pip.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            pytest.skip(
                f"cannot install sglang=={SGLANG_VERSION} from the package registry: {pip.stderr[-500:]}"
            )
        (venv / ".complete").write_text("ok\n")
    return str(python)


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir, device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512
    ) as handle:
        yield handle


def test_sglang_frontend_programs(sglang_python, server, tmp_path: Path):
    script = tmp_path / "programs.py"
    script.write_text(PROGRAMS)
    run = subprocess.run(
        [sglang_python, str(script), server.url], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, f"stderr:\n{run.stderr[-4000:]}\nserver log:\n{server.log()[-2000:]}"
    line = next(s for s in run.stdout.splitlines() if s.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])

    gen = out["gen"]
    assert isinstance(gen["answer"], str) and gen["text"].endswith(gen["answer"])
    assert gen["meta"]["completion_tokens"] == 8 and gen["meta"]["finish_reason"]["type"] == "length"
    assert out["greedy_again"] == gen["answer"]
    assert out["select"] in (" red", " green", " blue")
    assert out["fork"]["text"].startswith("Two ideas.")
    assert out["fork"]["text"].endswith(out["fork"]["summary"])
    assert "".join(out["stream_chunks"]) == out["stream_final"]
    assert out["batch"] == out["batch_single"]
    assert "stats" in out["server_info_keys"]
