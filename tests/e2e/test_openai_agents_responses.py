"""The ``openai-agents`` SDK with its default model class, ``OpenAIResponsesModel``, against
``radixlm serve``'s ``/v1/responses``: an ``Agent`` with a ``function_tool`` run by ``Runner``, sending
the whole conversation each turn (the SDK's default), streamed, and stateful
(``auto_previous_response_id``: each turn sends only its new items and names the previous response).

As in ``test_openai_agents_sdk.py`` (the chat completions variant), the first turn runs with
``tool_choice="required"`` (the SDK resets it to auto once a tool ran) so the 135M model calls the
tool; the call is generated under the tool's schema and the SDK feeds its result back as a
``function_call_output`` item.
"""

from __future__ import annotations

import asyncio

import pytest

from radixlm.runtime.server.launch import launch_server

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.mark.parametrize("mode", ["stateless", "streamed", "stateful"])
def test_runner_calls_a_tool_over_the_responses_api(real_model_dir, server_url, mode):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from agents.items import ToolCallItem, ToolCallOutputItem
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return f"It is sunny and 21 C in {city}."

    async def run():
        client = AsyncOpenAI(base_url=server_url + "/v1", api_key="unused", max_retries=0)
        agent = Agent(
            name="helper",
            instructions="Use the tools to answer.",
            model=OpenAIResponsesModel(model="smollm2-135m", openai_client=client),
            tools=[get_weather],
            model_settings=ModelSettings(
                tool_choice="required", temperature=0, max_tokens=96, parallel_tool_calls=False
            ),
        )
        question = "What is the weather in Paris?"
        try:
            if mode == "streamed":
                streamed = Runner.run_streamed(agent, question, max_turns=4)
                async for _ in streamed.stream_events():
                    pass
                return streamed
            stateful = mode == "stateful"
            return await Runner.run(agent, question, max_turns=4, auto_previous_response_id=stateful)
        finally:
            await client.close()

    result = asyncio.run(run())
    assert calls, "no tool was called"
    called = [i for i in result.new_items if isinstance(i, ToolCallItem)]
    outputs = [i for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert len(called) == len(outputs) == len(calls)
    assert [str(o.output) for o in outputs] == [f"It is sunny and 21 C in {city}." for city in calls]
    assert len(result.raw_responses) >= 2  # the model ran again after the tool result was sent back
    assert isinstance(result.final_output, str) and result.final_output.strip()
    if mode == "stateful":
        first, second = result.raw_responses[:2]
        usage = second.usage
        # the follow-up named the first response and was served from its pinned KV
        assert (
            usage.input_tokens_details.cached_tokens
            >= first.usage.input_tokens + first.usage.output_tokens - 1
        )


@pytest.fixture(scope="module")
def server_url(real_model_dir):
    with launch_server(model="smollm2-135m", kv_cache_gb=0.25) as handle:
        yield handle.url
