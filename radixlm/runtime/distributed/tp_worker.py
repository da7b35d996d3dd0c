"""``python -m radixlm.runtime.distributed.tp_worker``: one tensor-parallel rank > 0. Reads
``(server_args, rank, parent_pid)`` pickled on stdin, loads its shard, serves until told to stop."""

from __future__ import annotations

import os
import pickle
import sys

from radixlm import _env  # noqa: F401  (thread settings before torch)


def main() -> None:
    server_args, rank, parent_pid = pickle.loads(sys.stdin.buffer.read())
    from radixlm.runtime.distributed.tensor_parallel import serve_rank
    from radixlm.runtime.executor.model_runner import ModelRunner
    from radixlm.runtime.ipc import watch_parent

    if parent_pid is not None:
        watch_parent(parent_pid, socket_dir="")
    runner = ModelRunner(server_args, tp_rank=rank)
    try:
        serve_rank(runner)
    finally:
        runner.close()
    # NOTE: told to stop and out of the group, nothing is left to do; ending here skips the
    # interpreter's teardown, where native threads of torch's libraries may still hold Python objects
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
