"""The chat templates where SGLang programs import ``sglang.lang.chat_template``."""

from radixlm.frontend.chat_template import ChatTemplate, get_chat_template, register_chat_template

__all__ = ["ChatTemplate", "get_chat_template", "register_chat_template"]
