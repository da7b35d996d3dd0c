"""Few-shot question answering; the shared examples are cached once for the whole batch.

python examples/few_shot.py
"""

import radixlm as sgl

EXAMPLES = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Italy?", "Rome"),
]


@sgl.function
def few_shot_qa(s, question):
    s += "Answer each question with one word.\n\n"
    for q, a in EXAMPLES:
        s += f"Q: {q}\nA: {a}\n\n"
    s += f"Q: {question}\nA:" + sgl.gen("answer", max_tokens=8, stop="\n", temperature=0)


if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        sgl.set_default_backend(runtime)
        questions = ["What is the capital of Germany?", "What is the capital of Spain?"]
        for q, state in zip(questions, few_shot_qa.run_batch([{"question": q} for q in questions])):
            print(f"{q} ->{state['answer']}")
