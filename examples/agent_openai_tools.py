"""An agent that calls two Python tools in a loop over the OpenAI API against ``radixlm serve``.

The first turn must call a tool (``tool_choice="required"``: the call is generated under the tool's
parameter schema, so it always parses); later turns may call more tools or answer (``auto``).

    python examples/agent_openai_tools.py                       # starts a server on the default model
    python examples/agent_openai_tools.py http://127.0.0.1:30000  # or uses a running one
"""

import json
import sys

import openai

from radixlm.runtime.server.launch import launch_server

WEATHER = {"paris": "sunny, 21 C", "london": "rain, 14 C", "tokyo": "cloudy, 18 C"}


def get_weather(city: str) -> str:
    return WEATHER.get(city.strip().lower(), f"no weather data for {city}")


def add(a: int, b: int) -> int:
    return a + b


FUNCTIONS = {"get_weather": get_weather, "add": add}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 30}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]


def run_agent(client: openai.OpenAI, question: str, max_turns: int = 3) -> str:
    messages = [
        {"role": "system", "content": "Answer the user's question; use the tools when they help."},
        {"role": "user", "content": question},
    ]
    for turn in range(max_turns):
        response = client.chat.completions.create(
            model="default",
            messages=messages,
            tools=TOOLS,
            tool_choice="required" if turn == 0 else "auto",
            parallel_tool_calls=False,
            temperature=0,
            max_tokens=128,
        )
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            result = FUNCTIONS[call.function.name](**arguments)
            print(f"  tool {call.function.name}({arguments}) -> {result}")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    final = client.chat.completions.create(
        model="default", messages=messages, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=96
    )
    return final.choices[0].message.content


def main(url: str) -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    for question in ["What is the weather in Paris?", "What is 19 plus 23?"]:
        print("Q:", question)
        print("A:", run_agent(client, question))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with launch_server(model="smollm2-135m") as server:
            main(server.url)
