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


def _turns(template, turns):
    from radixlm.frontend.chat_template import Turns

    t, text = Turns(template), ""
    for role, content in turns:
        text += t.begin(role) + content + t.end(role)
    return text


def test_llama2_style_puts_the_system_prompt_inside_the_first_inst():
    """SGLang's llama-2-chat: a first system turn opens with [INST], the user turn after it opens
    with nothing."""
    template = get_chat_template("llama-2-chat")
    text = _turns(template, [("system", "S"), ("user", "U"), ("assistant", "A"), ("user", "V")])
    assert text == "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]A </s><s>[INST] V [/INST]"
    assert _turns(template, [("user", "U")]) == "[INST] U [/INST]"


def test_sglang_default_system_prompts_open_the_first_turn():
    assert _turns(get_chat_template("qwen"), [("user", "U")]) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
    )
    assert _turns(get_chat_template("default"), [("system", "S"), ("user", "U")]) == "SYSTEM:S\nUSER:U\n"


def test_every_sglang_name_is_registered_and_model_paths_pick_as_sglang_does():
    from radixlm.frontend.chat_template import get_chat_template_by_model_path
    from radixlm.frontend.sglang_templates import SGLANG_TEMPLATES

    for name in SGLANG_TEMPLATES:
        assert get_chat_template(name).name == name
    picks = {
        "meta-llama/Llama-2-7b-chat-hf": "llama-2-chat",
        "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-instruct",
        "Qwen/Qwen2.5-0.5B-Instruct": "qwen",
        "Qwen/Qwen2-VL-7B-Instruct": "qwen2-vl",
        "lmsys/vicuna-7b-v1.5": "vicuna_v1.1",
        "mistralai/Mistral-7B-Instruct-v0.3": "mistral",
        "google/gemma-2-2b-it": "gemma-it",
        "deepseek-ai/DeepSeek-V3": "deepseek-v3",
        "deepseek-ai/DeepSeek-V3-Base": "default",
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0": "chatml",
        "HuggingFaceTB/SmolLM2-135M-Instruct": "default",
    }
    assert {path: get_chat_template_by_model_path(path).name for path in picks} == picks


def test_runtime_endpoint_takes_sglangs_arguments():
    from radixlm.frontend.backends.runtime_endpoint import RuntimeEndpoint

    endpoint = RuntimeEndpoint("http://127.0.0.1:9", None, False, "vicuna_v1.1")
    assert endpoint.chat_template.name == "vicuna_v1.1"  # no request: the name decides
    with pytest.raises(ValueError, match="registered"):
        RuntimeEndpoint("http://127.0.0.1:9", chat_template_name="nope")
