"""Tool calling on the OpenAI chat API.

- ``parsers``: the formats models write tool calls in (hermes/qwen, llama3 JSON, mistral, pythonic),
  each read as a monotone ``Snapshot`` of the output so far, so the same code answers a finished
  output and a stream;
- ``streaming``: snapshots -> OpenAI ``delta.tool_calls`` chunks;
- ``constraints``: the grammar a call is generated under (always-parsing calls);
- ``prompt``: tools and tool messages rendered through the chat template.
"""
