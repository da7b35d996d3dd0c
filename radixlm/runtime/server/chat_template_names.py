"""``--chat-template NAME``: SGLang's built-in chat template names, as Jinja templates of our own.

``--chat-template`` takes one of these names, a file holding a Jinja template, or Jinja text.
Each template renders the roles system/user/assistant (an assistant turn ends with its end-of-turn
marker) and, with ``add_generation_prompt``, opens the assistant's turn.
"""

from __future__ import annotations

import os
from typing import Any


def _role_template(turn: str, generation_prompt: str, system_default: str = "", prelude: str = "") -> str:
    """A Jinja template writing each message as ``turn`` (with ``role`` and ``content`` in scope)."""
    default = ""
    if system_default:
        default = (
            "{% if messages[0]['role'] != 'system' %}"
            + turn.replace("{{ role }}", "system").replace("{{ content }}", system_default)
            + "{% endif %}"
        )
    return (
        prelude + default + "{% for message in messages %}{% set role = message['role'] %}"
        "{% set content = message['content'] %}"
        + turn
        + "{% endfor %}"
        + "{% if add_generation_prompt %}"
        + generation_prompt
        + "{% endif %}"
    )


_CHATML_TURN = "<|im_start|>{{ role }}\n{{ content }}<|im_end|>\n"
_LLAMA3_TURN = "<|start_header_id|>{{ role }}<|end_header_id|>\n\n{{ content | trim }}<|eot_id|>"

_LLAMA2 = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{% set ns.system = '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' %}"
    "{% elif message['role'] == 'user' %}[INST] {{ ns.system }}{{ message['content'] | trim }} [/INST]"
    "{% set ns.system = '' %}"
    "{% elif message['role'] == 'assistant' %} {{ message['content'] | trim }} {{ eos_token }}"
    "{% endif %}{% endfor %}"
)
_MISTRAL = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\\n\\n' %}"
    "{% elif message['role'] == 'user' %}[INST] {{ ns.system }}{{ message['content'] }}[/INST]"
    "{% set ns.system = '' %}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] }}{{ eos_token }}"
    "{% endif %}{% endfor %}"
)
_GEMMA = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\\n\\n' %}"
    "{% else %}{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n{{ ns.system if role == 'user' else '' }}{{ message['content'] | trim }}"
    "<end_of_turn>\n{% if role == 'user' %}{% set ns.system = '' %}{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
_VICUNA = (
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% else %}"
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the user's questions.{% endif %}"
    "{% for message in messages if message['role'] != 'system' %}"
    "{% if message['role'] == 'user' %} USER: {{ message['content'] }}"
    "{% else %} ASSISTANT: {{ message['content'] }}</s>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %} ASSISTANT:{% endif %}"
)
_DEEPSEEK_V3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}<｜User｜>{{ message['content'] }}"
    "{% else %}<｜Assistant｜>{{ message['content'] }}<｜end▁of▁sentence｜>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"
)

BUILTIN_CHAT_TEMPLATES: dict[str, str] = {
    "chatml": _role_template(_CHATML_TURN, "<|im_start|>assistant\n"),
    "qwen": _role_template(
        _CHATML_TURN, "<|im_start|>assistant\n", system_default="You are a helpful assistant."
    ),
    "llama-3-instruct": _role_template(
        _LLAMA3_TURN, "<|start_header_id|>assistant<|end_header_id|>\n\n", prelude="{{ bos_token }}"
    ),
    "llama-2-chat": _LLAMA2,
    "mistral": _MISTRAL,
    "gemma-it": _GEMMA,
    "vicuna_v1.1": _VICUNA,
    "deepseek-v3": _DEEPSEEK_V3,
}
# Other spellings SGLang uses for the same formats.
ALIASES = {
    "qwen2": "qwen",
    "qwen2.5": "qwen",
    "llama-3": "llama-3-instruct",
    "llama3": "llama-3-instruct",
    "llama-2": "llama-2-chat",
    "mistral-instruct": "mistral",
    "gemma": "gemma-it",
    "vicuna": "vicuna_v1.1",
    "deepseek": "deepseek-v3",
}


def builtin_chat_template(name: str) -> str | None:
    """The Jinja text of a built-in template name (or alias), else None."""
    return BUILTIN_CHAT_TEMPLATES.get(ALIASES.get(name, name))


def resolve_chat_template(value: str | None) -> str | None:
    """``--chat-template``: a built-in name, a file holding a Jinja template, or Jinja text.

    Raises ``ValueError`` for a value that is none of these (a name-like word that is not built in),
    listing the names."""
    if not value:
        return None
    named = builtin_chat_template(value)
    if named is not None:
        return named
    if os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            return f.read()
    if "{{" in value or "{%" in value:
        return value
    names = ", ".join([*BUILTIN_CHAT_TEMPLATES, *ALIASES])
    raise ValueError(
        f"--chat-template {value!r} is neither a built-in template ({names}), a file, nor Jinja text"
    )


def reserved_template_names(tokenizer: Any) -> set[str]:
    """Names a chat template gets from the tokenizer itself: ``apply_chat_template``'s parameters, the
    variables it renders with, and the special tokens it passes (a clash is a TypeError, not a 400)."""
    import inspect

    names = set(inspect.signature(tokenizer.apply_chat_template).parameters) - {"kwargs"}
    names |= {"messages", "tools", "documents", "add_generation_prompt", "raise_exception", "strftime_now"}
    return names | set(getattr(tokenizer, "special_tokens_map", {}) or {})
