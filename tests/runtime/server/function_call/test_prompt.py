"""Tools, tool calls and tool results rendered through chat templates with and without tool support."""

from __future__ import annotations

import json

from radixlm.runtime.server.function_call.prompt import messages_for_template
from radixlm.runtime.server.function_call.protocol import FunctionDef
from radixlm.runtime.server.function_call.registry import get_parser

ADD = FunctionDef(
    name="add", description="Add", parameters={"type": "object", "properties": {"a": {"type": "integer"}}}
)
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
CONVERSATION = [
    {"role": "user", "content": "Add 2"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": "4", "tool_call_id": "call_1"},
]
TOOLS_TEMPLATE = (
    "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
    "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }}"
    "{% endfor %}\n{% endfor %}"
)


def test_template_without_tools_gets_default_prompt_and_text_calls(smollm2_tokenizer):
    template = smollm2_tokenizer.chat_template
    msgs, tools = messages_for_template(CONVERSATION, [ADD], get_parser("hermes"), template)
    assert tools is None
    assert msgs[0]["role"] == "system" and '"name": "add"' in msgs[0]["content"]
    assert "<tool_call>" in msgs[0]["content"]
    assert msgs[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call>',
    }
    assert msgs[3] == {"role": "user", "content": "<tool_response>\n4\n</tool_response>"}
    prompt = smollm2_tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert prompt.count("<|im_start|>") == 5 and prompt.endswith("<|im_start|>assistant\n")


def test_template_with_tools_gets_them_and_argument_objects(smollm2_tokenizer):
    msgs, tools = messages_for_template(CONVERSATION, [ADD], get_parser("hermes"), TOOLS_TEMPLATE)
    assert tools == [{"type": "function", "function": ADD.model_dump(exclude_none=True)}]
    prompt = smollm2_tokenizer.apply_chat_template(
        msgs, tools=tools, tokenize=False, chat_template=TOOLS_TEMPLATE
    )
    assert prompt.startswith("TOOLS:add;")
    assert "CALL add " + json.dumps({"a": 2}) in prompt and "[tool]4" in prompt
