"""A multi-turn conversation rendered with the model's own chat template.

python examples/multi_turn_chat.py
"""

import radixlm as sgl


@sgl.function
def chat(s, turns):
    s += sgl.system("You are a helpful assistant. Answer in one sentence.")
    for i, turn in enumerate(turns):
        s += sgl.user(turn)
        s += sgl.assistant(sgl.gen(f"reply_{i}", max_tokens=48, temperature=0))


if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        state = chat.run(turns=["Hi! What is a prime number?", "Give me an example."], backend=runtime)
        for message in state.messages():
            print(f"{message['role']:>9}: {message['content']}")
