"""A real agent framework against ``radixlm serve``: the ``openai-agents`` SDK's ``Runner`` drives an
``Agent`` with two ``function_tool``s over our chat completions API on the default model.

The 135M model does not pick tools reliably on its own, so the first turn runs with
``tool_choice="required"`` (the SDK resets it to auto once a tool ran); the call is generated under
the tool's schema, the SDK runs the Python function and sends its result back as a ``tool`` message,
and the model answers in text.
"""

from __future__ import annotations

import asyncio

import pytest

from radixlm.runtime.server.launch import launch_server

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


def test_runner_calls_tools_and_feeds_results_back(real_model_dir):
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from agents.items import ToolCallItem, ToolCallOutputItem
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    calls: list[tuple[str, dict]] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(("get_weather", {"city": city}))
        return f"It is sunny and 21 C in {city}."

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append(("add", {"a": a, "b": b}))
        return a + b

    async def run(url: str):
        client = AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        model = OpenAIChatCompletionsModel(model="smollm2-135m", openai_client=client)
        agent = Agent(
            name="helper",
            instructions="Use the tools to answer.",
            model=model,
            tools=[get_weather, add],
            model_settings=ModelSettings(
                tool_choice="required", temperature=0, max_tokens=96, parallel_tool_calls=False
            ),
        )
        try:
            return await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
        finally:
            await client.close()

    with launch_server(model="smollm2-135m", kv_cache_gb=0.25) as handle:
        result = asyncio.run(run(handle.url))
    assert calls, "no tool was called"
    assert {name for name, _ in calls} <= {"get_weather", "add"}
    called = [i for i in result.new_items if isinstance(i, ToolCallItem)]
    outputs = [i for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert len(called) == len(outputs) == len(calls)
    expected = [
        f"It is sunny and 21 C in {args['city']}." if name == "get_weather" else str(args["a"] + args["b"])
        for name, args in calls
    ]
    assert [str(o.output) for o in outputs] == expected
    assert len(result.raw_responses) >= 2  # the model ran again after the tool results were sent back
    assert isinstance(result.final_output, str) and result.final_output.strip()
