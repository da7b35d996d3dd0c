"""A ReAct-style agent with a Python calculator tool.

The program reads generated values in Python (which tool to call, its input), so radixlm runs it
in the interpreter automatically.

    python examples/react_agent.py
"""

import ast
import operator

import radixlm as sgl

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def calculator(expression: str) -> str:
    """Evaluate + - * / over numbers; anything else is an error message."""

    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("unsupported expression")

    try:
        return str(ev(ast.parse(expression.split("=")[0].strip(), mode="eval").body))
    except Exception as exc:  # noqa: BLE001 - the agent sees the error as an observation
        return f"error: {exc}"


@sgl.function
def agent(s, question, max_steps=3):
    s += (
        "Solve the question. Use the calculator for arithmetic.\n"
        "Format: Thought: ... then Action: calculator or finish, then Input: ...\n\n"
    )
    s += "Question: " + question + "\n"
    for step in range(max_steps):
        s += "Thought:" + sgl.gen(f"thought_{step}", max_tokens=32, stop="\n", temperature=0) + "\n"
        s += "Action: " + sgl.select(f"action_{step}", choices=["calculator", "finish"]) + "\n"
        s += "Input:" + sgl.gen(f"input_{step}", max_tokens=16, stop="\n", temperature=0) + "\n"
        if s[f"action_{step}"] == "finish":
            s["answer"] = s[f"input_{step}"].strip()
            return
        s += "Observation: " + calculator(s[f"input_{step}"]) + "\n"
    s += "Final answer:" + sgl.gen("answer", max_tokens=16, stop="\n", temperature=0)


if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        state = agent.run(question="What is 17 * 23 + 4?", backend=runtime)
        print(state.text())
        print("answer:", state["answer"])
