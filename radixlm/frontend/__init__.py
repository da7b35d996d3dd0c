"""The language: SGLang's frontend API (``radixlm`` re-exports it).

- ``api``: ``gen``, ``select``, roles and the other public functions; ``function``: ``SglFunction``,
  which runs a program as a compiled request graph or in the interpreter.
- ``ir``: expressions, statements and ``VarKey``; ``tracer``: program function -> ``ProgramIR``;
  ``compiler``: ``ProgramIR`` -> request graph (run by ``radixlm.program.graph_executor``).
- ``interpreter``: runs expressions eagerly; ``state``/``state_base``: what a program sees as ``s``.
- ``chat_template``: role markers as text; ``backends``: the runtimes a program talks to;
  ``default_backend``: which one it uses; ``errors``.
"""
