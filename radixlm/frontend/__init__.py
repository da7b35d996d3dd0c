"""The language: SGLang's frontend API (``radixlm`` re-exports it).

- ``api``: ``gen``, ``select``, roles and the other public functions; ``function``: ``SglFunction``,
  which runs a program as a compiled request graph or in the interpreter.
- ``ir``: expressions and ``VarKey``; ``program_ir``: a traced program's statements (``ProgramIR``)
  and its trace graph; ``tracer``: program function -> ``ProgramIR``; ``compiler``: ``ProgramIR`` ->
  request graph (run by ``radixlm.program.graph_executor``); ``compiled``: what ``compile()``
  returns; ``replay``: a graph's results -> the program's state.
- ``interpreter``: runs expressions eagerly; ``state``/``state_base``: what a program sees as ``s``.
- ``chat_template``: role markers as text; ``backends``: the runtimes a program talks to;
  ``default_backend``: which one it uses; ``global_config``: SGLang's settings; ``errors``.
"""
