"""The demo program behind ``radixlm demo``: a radixlm program on the default model, end to end.

It starts a local runtime (HTTP server, scheduler and detokenizer processes), then runs one program
that streams an answer, forks three critiques that share the conversation's KV cache, extracts a
typed value with a regex, and picks a verdict with ``select``; finally a batch of programs shows the
radix cache at work.
"""

from __future__ import annotations

import sys
import time

import radixlm as rl


@rl.function
def city_report(s, city):
    s += rl.system("You are a concise travel guide.")
    s += rl.user(f"Describe {city} in two sentences.")
    s += rl.assistant(rl.gen("description", max_tokens=64, temperature=0))
    critiques = s.fork(3)
    for _, (f, aspect) in enumerate(zip(critiques, ["food", "history", "weather"])):
        f += rl.user(f"In one short sentence, what about its {aspect}?")
        f += rl.assistant(rl.gen("aspect", max_tokens=32, temperature=0, stop="\n"))
    s += rl.user("Roughly how many people live there, in millions? Answer with a number.")
    s += rl.assistant(
        rl.gen("population_millions", max_tokens=8, regex=r"[0-9]{1,2}(\.[0-9])?", temperature=0)
    )
    s += rl.user("Is it a capital city?")
    s += rl.assistant(rl.select("is_capital", choices=["yes", "no"]))
    s["critiques"] = [f["aspect"] for f in critiques]


def main(model: str = "smollm2-135m") -> int:
    start = time.time()
    print(f"Starting a radixlm runtime with {model} (the first run downloads it)...", flush=True)
    with rl.Runtime(model=model) as runtime:
        print(f"Runtime ready at {runtime.url} after {time.time() - start:.1f} s\n", flush=True)
        rl.set_default_backend(runtime)

        state = city_report.run(city="Paris", stream=True)
        for chunk in state.text_iter("description"):
            print(chunk, end="", flush=True)
        print("\n")
        for name in ("critiques", "population_millions", "is_capital"):
            print(f"{name:>20} = {state[name]!r}")

        cities = ["Rome", "Tokyo", "Cairo", "Lima", "Oslo", "Nairobi", "Hanoi", "Quito"]
        t0 = time.time()
        states = city_report.run_batch([{"city": c} for c in cities], progress_bar=False)
        elapsed = time.time() - t0
        print(f"\nrun_batch: {len(cities)} programs in {elapsed:.1f} s")
        for city, st in zip(cities, states):
            print(f"  {city:>8}: capital={st['is_capital']:<3} population={st['population_millions']!r}")
        info = rl.get_server_info()
        print(
            f"\nradix cache hit rate: {info.get('cache_hit_rate', 0.0):.0%} "
            "of prompt tokens served from the cache"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
