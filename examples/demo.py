"""The README's first command: fetch the default model, start a runtime, run the quickstart.

    python examples/demo.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import radixlm as sgl  # noqa: E402
from quickstart import run  # noqa: E402


def main() -> None:
    start = time.time()
    print("Starting a radixlm runtime with smollm2-135m (the first run downloads the model)...", flush=True)
    with sgl.Runtime(model="smollm2-135m") as runtime:
        print(f"Runtime ready at {runtime.url} after {time.time() - start:.1f}s\n", flush=True)
        run(runtime)


if __name__ == "__main__":
    main()
