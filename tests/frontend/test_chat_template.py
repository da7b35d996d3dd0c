"""Role prefixes and suffixes derived from Hugging Face chat templates and the named registry."""

from __future__ import annotations

import pytest

from radixlm.frontend.chat_template import from_jinja, get_chat_template, guess_chat_template

LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
NO_SYSTEM = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ raise_exception('no system') }}"
    "{% endif %}{{ '<' + message['role'] + '>' + message['content'] + '</s>' }}{% endfor %}"
)


def render(template, turns):
    text, first = "", True
    for role, content in turns:
        text += template.begin_text(role, first) + content + template.suffix(role)
        first = False
    return text


def test_llama3_template_matches_registry_and_drops_bos():
    derived = from_jinja(LLAMA3, special={"bos_token": "<|begin_of_text|>"})
    assert derived.roles == get_chat_template("llama-3").roles
    assert derived.default_system == ""


def test_template_without_system_role_falls_back_to_user_markers():
    derived = from_jinja(NO_SYSTEM)
    assert derived.roles["user"] == ("<user>", "</s>")
    assert derived.roles["system"] == derived.roles["user"]


def test_guess_chat_template_by_family():
    assert guess_chat_template("meta-llama/Meta-Llama-3-8B-Instruct").name == "llama-3"
    assert guess_chat_template("Qwen/Qwen2.5-0.5B-Instruct").name == "chatml"
    assert guess_chat_template("some-base-model").name == "default"
    with pytest.raises(ValueError, match="registered"):
        get_chat_template("nope")


@pytest.mark.real_model
def test_roles_render_exactly_like_apply_chat_template(smollm2_tokenizer):
    template = from_jinja(smollm2_tokenizer.chat_template)
    for turns in (
        [("user", "Hi"), ("assistant", "Hello!"), ("user", "2+2?")],
        [("system", "Be brief."), ("user", "Hi"), ("assistant", "Yo")],
    ):
        msgs = [{"role": r, "content": c} for r, c in turns]
        expected = smollm2_tokenizer.apply_chat_template(msgs, tokenize=False)
        assert render(template, turns) == expected
