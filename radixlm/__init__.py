"""radixlm: a structured-generation language for LLMs with its own serving runtime.

SGLang programs run unchanged with ``import radixlm as sgl``::

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=64))

    sgl.set_default_backend(sgl.Runtime(model="smollm2-135m"))
    print(qa.run(question="What is 2 + 2?")["answer"])

Importing this package is light: the runtime (and torch) load only when ``Engine``,
``launch_server`` or a local backend is used.
"""

from __future__ import annotations

from typing import Any

import radixlm._env  # noqa: F401  (thread settings before anything imports torch)
from radixlm.frontend.api import (
    assistant,
    assistant_begin,
    assistant_end,
    flush_cache,
    function,
    gen,
    gen_int,
    gen_string,
    get_server_info,
    image,
    select,
    separate_reasoning,
    system,
    system_begin,
    system_end,
    user,
    user_begin,
    user_end,
    video,
)
from radixlm.frontend.backends.anthropic import Anthropic
from radixlm.frontend.backends.base import Backend
from radixlm.frontend.backends.engine import EngineBackend
from radixlm.frontend.backends.litellm import LiteLLM
from radixlm.frontend.backends.openai import OpenAI
from radixlm.frontend.backends.runtime import Runtime
from radixlm.frontend.backends.runtime_endpoint import RuntimeEndpoint
from radixlm.frontend.backends.vertexai import VertexAI
from radixlm.frontend.chat_template import ChatTemplate, get_chat_template, register_chat_template
from radixlm.frontend.compiled import CompiledFunction
from radixlm.frontend.default_backend import get_default_backend, set_default_backend
from radixlm.frontend.errors import DynamicProgramError, ProgramError, UnsupportedFeatureError
from radixlm.frontend.function import SglFunction
from radixlm.frontend.state import ProgramState, ProgramStateGroup
from radixlm.global_config import global_config
from radixlm.program.choices import (
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from radixlm.version import __version__  # noqa: F401  (the public version)

_LAZY = {
    "Engine": ("radixlm.runtime.engine", "Engine"),
    "launch_server": ("radixlm.runtime.server.launch", "launch_server"),
    "CustomLogitProcessor": ("radixlm.runtime.sampling.custom_logit_processor", "CustomLogitProcessor"),
}


def __getattr__(name: str) -> Any:
    """Load the runtime's entry points on first use (they import torch)."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'radixlm' has no attribute {name!r}")


__all__ = [
    "Backend",
    "ChatTemplate",
    "CompiledFunction",
    "CustomLogitProcessor",
    "DynamicProgramError",
    "Engine",
    "EngineBackend",
    "OpenAI",
    "Anthropic",
    "LiteLLM",
    "VertexAI",
    "ProgramError",
    "ProgramState",
    "ProgramStateGroup",
    "Runtime",
    "RuntimeEndpoint",
    "SglFunction",
    "UnsupportedFeatureError",
    "assistant",
    "assistant_begin",
    "assistant_end",
    "flush_cache",
    "function",
    "gen",
    "gen_int",
    "gen_string",
    "get_chat_template",
    "get_default_backend",
    "get_server_info",
    "global_config",
    "greedy_token_selection",
    "image",
    "launch_server",
    "register_chat_template",
    "select",
    "separate_reasoning",
    "set_default_backend",
    "system",
    "system_begin",
    "system_end",
    "token_length_normalized",
    "unconditional_likelihood_normalized",
    "user",
    "user_begin",
    "user_end",
    "video",
]
