"""Tree of thought: fork the context into branches, then judge them (fork and join).

python examples/tree_of_thought.py
"""

import radixlm as sgl


@sgl.function
def tree_of_thought(s, problem, width=3):
    s += "Problem: " + problem + "\n"
    branches = s.fork(width)
    for i, branch in enumerate(branches):
        branch += f"Approach {i + 1}: " + sgl.gen("approach", max_tokens=40, stop="\n\n", temperature=0.8)
    branches.join()
    for i, approach in enumerate(s["approach"]):
        s += f"Approach {i + 1}: {approach.strip()}\n"
    s += "The most promising approach is number" + sgl.select(
        "best", choices=[f" {i + 1}" for i in range(width)]
    )


if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        state = tree_of_thought.run(
            problem="Plan a picnic for ten people on a small budget.", backend=runtime
        )
        for i, approach in enumerate(state["approach"]):
            print(f"approach {i + 1}: {approach.strip()}")
        print("best:", state["best"])
