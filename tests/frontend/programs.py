"""Typical SGLang programs, written exactly as for SGLang but with ``import radixlm as sgl``.

Shared by the fake-backend tests and the real-runtime tests.
"""

from __future__ import annotations

import radixlm as sgl


@sgl.function
def few_shot_qa(s, question):
    s += "The following are questions with answers.\n\n"
    s += "Q: What is the capital of France?\nA: Paris\n\n"
    s += "Q: What is the capital of Germany?\nA: Berlin\n\n"
    s += "Q: " + question + "\nA:"
    s += sgl.gen("answer", max_tokens=8, stop="\n")


@sgl.function
def multi_turn(s, question_1, question_2):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question_1)
    s += sgl.assistant(sgl.gen("answer_1", max_tokens=8))
    s += sgl.user(question_2)
    s += sgl.assistant(sgl.gen("answer_2", max_tokens=8))


@sgl.function
def role_blocks(s, question):
    with s.user():
        s += question
    with s.assistant():
        s += sgl.gen("answer", max_tokens=6)


@sgl.function
def choose(s, question):
    s += "Question: " + question + "\n"
    s += "Answer (yes or no):" + sgl.select("verdict", choices=[" yes", " no"])
    s += "\nConfidence:" + sgl.gen("confidence", max_tokens=4)


@sgl.function
def tree(s, topic):
    s += f"Write about {topic}.\n"
    forks = s.fork(3)
    for i, f in enumerate(forks):
        f += f"Idea {i}:" + sgl.gen("idea", max_tokens=6, stop="\n")
    forks.join()
    s += "Best idea: " + forks[0]["idea"] + "\nSummary:" + sgl.gen("summary", max_tokens=6)


@sgl.function
def extract(s, text):
    s += "Text: " + text + "\nAge:"
    s += sgl.gen_int("age", max_tokens=4)
    s += "\nName:" + sgl.gen("name", max_tokens=6, regex=r" [A-Z][a-z]+")


@sgl.function
def reads_generated_value(s, question):
    s += "Q: " + question + "\nA:" + sgl.gen("answer", max_tokens=6, stop="\n")
    if "w" in s["answer"]:
        s += "\nMore:" + sgl.gen("more", max_tokens=4)
    else:
        s += "\nDone."


STATIC_CASES = [
    (few_shot_qa, {"question": "What is the capital of Italy?"}),
    (multi_turn, {"question_1": "Hi there.", "question_2": "What is 2+2?"}),
    (role_blocks, {"question": "Name a color."}),
    (choose, {"question": "Is the sky blue?"}),
    (tree, {"topic": "tea"}),
]
