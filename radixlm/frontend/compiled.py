"""``CompiledFunction``: what ``SglFunction.compile()`` returns (SGLang's name and calls).

The program is traced once, its arguments left as placeholders; each ``run(**arguments)`` binds them
into the request graph, which the runtime executes whole, and replays the results into a
``ProgramState``. A program the tracer finds dynamic (its control flow reads generated values or
arguments), or a backend without request graphs, runs the ordinary way instead, so a compiled
function always runs.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.compiler import compile_program
from radixlm.frontend.default_backend import resolve_backend
from radixlm.frontend.global_config import global_config
from radixlm.frontend.program_ir import ProgramIR, TraceNode
from radixlm.frontend.replay import replay, run_graph
from radixlm.frontend.state import ProgramState
from radixlm.program.graph_executor import bind_arguments
from radixlm.program.sampling import RUN_DEFAULTS, run_defaults, split_run_defaults


class _Program(Protocol):
    """What a compiled function needs of its ``SglFunction``."""

    arg_names: list[str]

    def run(self, *args: Any, **kwargs: Any) -> ProgramState: ...

    def cache(self, backend: Any | None = None) -> str: ...


class CompiledFunction:
    """A traced program: ``run(**arguments)``, ``run_batch([...])``, ``print_graph()``, and the
    request graph itself (``graph``, JSON; ``graph_for(backend)``)."""

    def __init__(
        self,
        function: _Program,
        ir: ProgramIR,
        fixed: dict[str, Any],
        sampling: dict[str, Any],
        backend: Backend | None,
    ) -> None:
        self.function = function
        #: The traced program (its ``last_node.print_graph_dfs()`` is SGLang's view).
        self.ir = ir
        self._fixed = fixed  # program arguments given to compile()
        self._sampling = sampling  # sampling defaults given to compile()
        self._backend = backend

    # ---- the graph --------------------------------------------------------------------------
    @property
    def graph(self) -> dict[str, Any]:
        """The request graph for the backend given to ``compile()`` (else the default backend)."""
        return self.graph_for(None)

    def graph_for(self, backend: Any | None) -> dict[str, Any]:
        """The request graph with ``backend``'s chat template and the compile-time sampling
        defaults; arguments not fixed at compile time stay ``{"arg": name}`` placeholders (see
        ``radixlm.program.graph_executor.bind_arguments``). ``DynamicProgramError`` if dynamic."""
        be = resolve_backend(backend if backend is not None else self._backend)
        return compile_program(self.ir, be.chat_template, run_defaults(self._sampling))

    @property
    def last_node(self) -> TraceNode | None:
        """The traced program's last node (``last_node.print_graph_dfs()``)."""
        return self.ir.last_node

    def print_graph(self) -> None:
        """Print the traced program's nodes, dependencies first."""
        node = self.ir.last_node
        print(node.print_graph_dfs() if node is not None else "")

    # ---- running ----------------------------------------------------------------------------
    def run(self, *, backend: Any | None = None, **kwargs: Any) -> ProgramState:
        """Run with these arguments and sampling defaults (``run()``'s keywords, over those given
        to ``compile()``)."""
        sampling, arguments = split_run_defaults({**self._sampling, **kwargs})
        values = {**self._fixed, **arguments}
        unknown = sorted(set(values) - set(self.function.arg_names))
        if unknown:
            raise TypeError(f"{self.ir.name}() has no argument(s) {', '.join(unknown)}")
        be = resolve_backend(backend if backend is not None else self._backend)
        if self.ir.is_static and be.supports_graphs:
            graph = compile_program(self.ir, be.chat_template, sampling)
            names = graph.get("arguments", [])
            missing = [n for n in names if n not in values]
            if missing:
                raise TypeError(f"{self.ir.name}() missing argument(s) {', '.join(missing)}")
            bound = bind_arguments(graph, **{n: values[n] for n in names})
            result = run_graph(be, bound)
            if result is not None:
                return replay(self.ir.bind(values), bound, result, be, sampling)
        given = {k: v for k, v in {**self._sampling, **kwargs}.items() if k in RUN_DEFAULTS}
        return self.function.run(backend=be, **values, **given)

    def run_batch(
        self,
        batch_kwargs: list[dict[str, Any]],
        *,
        backend: Any | None = None,
        num_threads: str | int = "auto",
        **sampling: Any,
    ) -> list[ProgramState]:
        """``run`` for each argument dict, concurrently; states in input order. The first failure
        is raised after all have finished."""
        if not batch_kwargs:
            return []
        be = resolve_backend(backend if backend is not None else self._backend)
        if len(batch_kwargs) > 1 and global_config.enable_precache_with_tracing:
            self.function.cache(be)
        workers = min(len(batch_kwargs), 64) if num_threads == "auto" else max(1, int(num_threads))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="radixlm-compiled") as pool:
            futures = [pool.submit(self.run, backend=be, **kw, **sampling) for kw in batch_kwargs]
        return [f.result() for f in futures]
