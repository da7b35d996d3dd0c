"""SGLang's spellings of the launch options: ``--model-path`` / ``--tokenizer-path`` on ``radixlm serve``
and ``python -m radixlm.launch_server``, ``model_path=`` for ``ServerArgs`` (and so ``Engine``,
``Runtime`` and ``launch_server``), and ``--chat-template`` names."""

from __future__ import annotations

import argparse

import pytest

import radixlm
from radixlm.runtime.server.chat_template_names import BUILTIN_CHAT_TEMPLATES, resolve_chat_template
from radixlm.runtime.server.serve_cli import add_serve_arguments
from radixlm.runtime.server_args import ServerArgs


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_model_path_and_model_flags_are_the_same_option():
    assert _parse(["--model-path", "org/name"]).model == "org/name"
    assert _parse(["--model", "org/name", "--tokenizer-path", "tok"]).tokenizer == "tok"
    assert _parse([]).model == ServerArgs().model


def test_radixlm_serve_takes_model_path():
    from radixlm.cli import main

    with pytest.raises(SystemExit) as e:  # --help parses the flags and exits 0
        main(["serve", "--model-path", "x", "--help"])
    assert e.value.code == 0


def test_server_args_accept_model_path():
    assert ServerArgs.from_kwargs(model_path="org/name").model == "org/name"
    assert ServerArgs.from_kwargs(model=None).model == ServerArgs().model
    assert ServerArgs.from_kwargs(model=None, model_path="a/b").model == "a/b"
    with pytest.raises(ValueError, match="model_path='a/b' and model='c/d' disagree"):
        ServerArgs.from_kwargs(model="c/d", model_path="a/b")


def test_launch_server_module_stays_callable():
    import radixlm.launch_server as module

    assert callable(module) and callable(radixlm.launch_server)


def test_chat_template_names_files_and_jinja(tmp_path):
    assert resolve_chat_template("chatml") == BUILTIN_CHAT_TEMPLATES["chatml"]
    assert resolve_chat_template("llama-3") == BUILTIN_CHAT_TEMPLATES["llama-3-instruct"]
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages[0]['content'] }}")
    assert resolve_chat_template(str(path)) == "{{ messages[0]['content'] }}"
    assert resolve_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}").startswith("{%")
    with pytest.raises(ValueError, match="neither a built-in template"):
        resolve_chat_template("no-such-template")


@pytest.mark.parametrize("name", sorted(BUILTIN_CHAT_TEMPLATES))
def test_builtin_templates_render_through_transformers(name, tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    messages = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]
    text = tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, chat_template=BUILTIN_CHAT_TEMPLATES[name]
    )
    for part in ("SYS", "Q1", "A1", "Q2"):
        assert part in text
    assert text.index("Q1") < text.index("A1") < text.index("Q2")
    without = tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=False, chat_template=BUILTIN_CHAT_TEMPLATES[name]
    )
    assert text.startswith(without)
    if name not in ("llama-2-chat", "mistral"):  # [/INST] already opens the answer in those two
        assert len(text) > len(without)  # the generation prompt opens the assistant's turn
