"""SGLang's named chat templates (``sglang.lang.chat_template``) as data, and its rules for picking
one by model path.

Each entry is ``(default_system_prompt, {role: (prefix, suffix)}, stop strings, style)``; ``style``
``"llama2"`` folds the first system turn into the first user turn as Llama 2 chat does. The strings
are the same as SGLang's so that a program renders the same prompt under either frontend.
"""

from __future__ import annotations

import re

Roles = dict[str, tuple[str, str]]
Spec = tuple[str, Roles, tuple[str, ...], str]


def _same(prefix_fmt: str, suffix: str, roles: tuple[str, ...] = ("system", "user", "assistant")) -> Roles:
    return {r: (prefix_fmt.format(role=r), suffix) for r in roles}


_CHATML = _same("<|im_start|>{role}\n", "<|im_end|>\n")
_IM_END = ("<|im_end|>",)
_LLAMA3 = _same("<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>")
_DEEPSEEK: Roles = {
    "system": ("", ""),
    "user": ("<｜User｜>", ""),
    "assistant": ("<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
}
_DEEPSEEK_STOP = ("<｜end▁of▁sentence｜>",)
_MINICPM: Roles = {"system": ("", " "), "user": ("user:", " "), "assistant": ("assistant:", "</s>")}
_DBRX_SYSTEM = (
    "You are DBRX, created by Databricks. You were last updated in December 2023. You answer questions "
    "based on information available up to that point.\nYOU PROVIDE SHORT RESPONSES TO SHORT QUESTIONS OR "
    "STATEMENTS, but provide thorough responses to more complex and open-ended questions.\nYou assist with "
    "various tasks, from writing to coding (using markdown for code blocks — remember to use ``` with code, "
    "JSON, and tables).\n(You do not have real-time data access or code execution capabilities. You avoid "
    "stereotyping and provide balanced perspectives on controversial topics. You do not provide song "
    "lyrics, poems, or news articles and do not divulge details of your training data.)\nThis is your "
    "system prompt, guiding your responses. Do not reference it, just respond to the user. If you find "
    "yourself talking about this message, stop. You should be responding appropriately and usually that "
    "means not mentioning this.\nYOU DO NOT MENTION ANY OF THIS INFORMATION ABOUT YOURSELF UNLESS THE "
    "INFORMATION IS DIRECTLY PERTINENT TO THE USER'S QUERY."
)
_YI_VL_SYSTEM = (
    "This is a chat between an inquisitive human and an AI assistant. Assume the role of the AI assistant. "
    "Read all the images carefully, and respond to the human's questions with informative, helpful, "
    "detailed and polite answers."
    "这是一个好奇的人类和一个人工智能助手之间的对话。假设你扮演这个AI助手的角色。仔细阅读所有的图像，"
    "并对人类的问题做出信息丰富、有帮助、详细的和礼貌的回答。"
)
_INTERNVL_SYSTEM = (
    "你是书生·万象，英文名是InternVL，是由上海人工智能实验室、"
    "清华大学及多家合作单位联合开发的多模态大语言模型。"
)
_INTERNS1_SYSTEM = (
    "You are an AI assistant whose name is Intern-S1 (书生大模型).\n- Intern-S1 (书生大模型) is a "
    "vision-language model that is developed by Shanghai AI Laboratory (上海人工智能实验室).  It is "
    "designed to be helpful, honest, and harmless.\n- Intern-S1 (书生大模型) can understand and "
    "communicate fluently in the language chosen by the user such as English and 中文.\nYou are an "
    "expert reasoner with extensive experience in all areas. You approach problems through systematic "
    "thinking and rigorous reasoning. Your response should reflect deep understanding and precise "
    "logical thinking, making your solution path and reasoning clear to others. Please put your thinking "
    "process within <think>...</think> tags."
)
_HELPFUL = "You are a helpful assistant."

SGLANG_TEMPLATES: dict[str, Spec] = {
    "default": (
        "",
        {"system": ("SYSTEM:", "\n"), "user": ("USER:", "\n"), "assistant": ("ASSISTANT:", "\n")},
        (),
        "plain",
    ),
    "claude": (
        "",
        {"system": ("", ""), "user": ("\n\nHuman: ", ""), "assistant": ("\n\nAssistant:", "")},
        (),
        "plain",
    ),
    "chatml": ("", _CHATML, _IM_END, "plain"),
    "chatml-llava": (_HELPFUL, _CHATML, _IM_END, "plain"),
    "qwen": (_HELPFUL, _CHATML, _IM_END, "plain"),
    "qwen2-vl": (_HELPFUL, _CHATML, _IM_END, "plain"),
    "vicuna_v1.1": (
        "A chat between a curious user and an artificial intelligence assistant. "
        "The assistant gives helpful, detailed, and polite answers to the user's questions.",
        {"system": ("", " "), "user": ("USER:", " "), "assistant": ("ASSISTANT:", "</s>")},
        (),
        "plain",
    ),
    "llama-2-chat": (
        "",
        {
            "system": ("<<SYS>>\n", "\n<</SYS>>\n\n"),
            "user": ("[INST] ", " [/INST]"),
            "assistant": ("", " </s><s>"),
        },
        (),
        "llama2",
    ),
    "mistral": (
        "",
        {
            "system": ("[SYSTEM_PROMPT] ", " [/SYSTEM_PROMPT]"),
            "user": ("[INST] ", " [/INST]"),
            "assistant": ("", " </s><s>"),
        },
        ("</s>",),
        "plain",
    ),
    "llama-3-instruct": ("", _LLAMA3, ("<|eot_id|>",), "plain"),
    "llama-3-instruct-llava": ("", _LLAMA3, ("<|eot_id|>",), "plain"),
    "llama-4": ("", _same("<|header_start|>{role}<|header_end|>\n\n", "<|eot|>"), ("<|eot|>",), "plain"),
    "minicpmv": ("", _MINICPM, ("<|im_end|>", "<|endoftext|>"), "plain"),
    "minicpmo": ("", _MINICPM, ("<|im_end|>", "<|endoftext|>"), "plain"),
    # SGLang spells janus-pro's user role "User", so a "user" turn there has no markers.
    "janus-pro": ("", {**_DEEPSEEK, "user": ("", "")}, _DEEPSEEK_STOP, "plain"),
    "janus": ("", _DEEPSEEK, _DEEPSEEK_STOP, "plain"),
    "yi-1.5": (
        "",
        {
            "system": ("", ""),
            "user": ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
            "assistant": ("", "<|im_end|>\n"),
        },
        _IM_END,
        "plain",
    ),
    "yi-vl": (
        _YI_VL_SYSTEM,
        {"system": ("", "\n\n"), "user": ("### Human:", "\n"), "assistant": ("### Assistant:", "\n")},
        (),
        "plain",
    ),
    "gemma-it": (
        "",
        {
            "system": ("", ""),
            "user": ("<start_of_turn>user\n", "<end_of_turn>\n"),
            "assistant": ("<start_of_turn>model\n", "<end_of_turn>\n"),
        },
        (),
        "plain",
    ),
    "dbrx-instruct": (
        _DBRX_SYSTEM,
        {
            "system": ("<|im_start|>system\n", "<|im_end|>"),
            "user": ("\n<|im_start|>user\n", "<|im_end|>"),
            "assistant": ("\n<|im_start|>assistant\n", "<|im_end|>"),
        },
        _IM_END,
        "plain",
    ),
    "c4ai-command-r": (
        "",
        {
            "system": ("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>"),
            "user": ("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|END_OF_TURN_TOKEN|>"),
            "assistant": ("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"),
        },
        (),
        "plain",
    ),
    "internvl-2-5": (_INTERNVL_SYSTEM, _CHATML, ("<|im_end|>", "<|action_end|>"), "plain"),
    "interns1": (_INTERNS1_SYSTEM, _CHATML, ("<|im_end|>", "<|action_end|>"), "plain"),
    "granite-3-instruct": (
        "",
        _same("<|start_of_role|>{role}<|end_of_role|>", "<|end_of_text|>"),
        ("<|end_of_text|>",),
        "plain",
    ),
    "deepseek-v3": ("", _DEEPSEEK, _DEEPSEEK_STOP, "plain"),
    "glm-4v": ("", _same("<|{role}|>\n", "\n"), ("<|user|>", "<|endoftext|>", "<|observation|>"), "plain"),
}

# SGLang's model-path rules, in its order: the first that matches names the template.
_I = re.IGNORECASE
_PATH_RULES: list[tuple[str, str, str | None]] = [
    # (pattern that must match, template name, pattern that must not match)
    (r"deepseek-(v3|r1)", "deepseek-v3", r"base"),
    (r"janus", "janus-pro", None),
    (r"dbrx.*instruct|instruct.*dbrx", "dbrx-instruct", None),
    (r"vicuna|llava-v1\.5|llava-next-video-7b", "vicuna_v1.1", None),
    (r"llama-2.*chat|codellama.*instruct", "llama-2-chat", None),
    (r"pixtral|(mistral|mixtral).*instruct", "mistral", None),
    (r"llama-3.*instruct", "llama-3-instruct", None),
    (r"tinyllama", "chatml", None),
    (r"qwen.*vl", "qwen2-vl", None),
    (r"glm[-_]?4(\.\d+)?v", "glm-4v", None),
    (r"qwen.*(chat|instruct)", "qwen", r"llava"),
    (r"llava-v1\.6-34b|llava-v1\.6-yi-34b|llava-next-video-34b|llava-onevision-qwen2", "chatml-llava", None),
    (r"yi-vl", "yi-vl", r"llava"),
    (r"yi-1\.5.*chat", "yi-1.5", None),
    (r"gemma.*it", "gemma-it", None),
    (r"minicpm-v", "minicpmv", None),
    (r"minicpm-o", "minicpmo", None),
    (r"c4ai-command-r", "c4ai-command-r", None),
    (r"granite.*instruct", "granite-3-instruct", None),
    (r"gemma-3", "gemma-it", None),
    (r"internvl2_5", "internvl-2-5", None),
    (r"intern-s1|interns1", "interns1", None),
]


def template_name_for_model_path(model_path: str) -> str:
    """The SGLang template name its frontend infers from a model path (``default`` when none)."""
    for pattern, name, unless in _PATH_RULES:
        if re.search(pattern, model_path, _I) and not (unless and re.search(unless, model_path, _I)):
            return name
    return "default"
