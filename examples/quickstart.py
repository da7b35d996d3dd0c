"""Quickstart: a chat program with a generation, a choice and streaming.

python examples/quickstart.py
"""

import radixlm as sgl


@sgl.function
def quickstart(s, question):
    s += sgl.system("You are a concise assistant.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=64, temperature=0))
    s += sgl.user("Was that answer about geography? Reply yes or no.")
    s += sgl.assistant(sgl.select("about_geography", choices=["yes", "no"]))


def run(backend) -> None:
    """Run the program, printing the text as it streams, then every variable."""
    state = quickstart.run(question="What is the capital of France?", stream=True, backend=backend)
    for chunk in state.text_iter():
        print(chunk, end="", flush=True)
    print()
    for name in ("answer", "about_geography"):
        print(f"{name} = {state[name]!r}")


if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        run(runtime)
