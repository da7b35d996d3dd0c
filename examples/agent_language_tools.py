"""The same agent in the language: ``select`` picks the tool, ``gen(json_schema=...)`` writes its arguments
(valid JSON for that tool's schema), Python runs the tool and the result goes back into the prompt.

    python examples/agent_language_tools.py
"""

import json

import radixlm as sgl

WEATHER = {"paris": "sunny, 21 C", "london": "rain, 14 C", "tokyo": "cloudy, 18 C"}


def get_weather(city: str) -> str:
    return WEATHER.get(city.strip().lower(), f"no weather data for {city}")


def add(a: int, b: int) -> int:
    return a + b


FUNCTIONS = {"get_weather": get_weather, "add": add}
SCHEMAS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
    },
    "add": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}


@sgl.function
def agent(s, question, max_turns=3):
    s += sgl.system(
        "You answer questions. Tools: get_weather(city) gives the weather in a city; "
        "add(a, b) adds two integers. Pick a tool, give its JSON arguments, or finish."
    )
    s += sgl.user(question)
    for turn in range(max_turns):
        with s.assistant():
            s += "Tool: " + sgl.select(f"tool_{turn}", choices=[*FUNCTIONS, "finish"])
            if s[f"tool_{turn}"] == "finish":
                break
            tool = s[f"tool_{turn}"]
            s += "\nArguments: " + sgl.gen(
                f"args_{turn}", json_schema=SCHEMAS[tool], max_tokens=48, temperature=0
            )
        result = FUNCTIONS[tool](**json.loads(s[f"args_{turn}"]))
        s += sgl.user(f"Result of {tool}: {json.dumps(result)}")
    with s.assistant():
        s += "Answer: " + sgl.gen("answer", max_tokens=48, stop="\n", temperature=0)


if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        for question in ["What is the weather in Paris?", "What is 19 plus 23?"]:
            state = agent.run(question=question, backend=runtime)
            for turn in range(3):
                if f"args_{turn}" in state:
                    print(f"  tool {state[f'tool_{turn}']}({state[f'args_{turn}']})")
            print("Q:", question, "\nA:", state["answer"].strip())
