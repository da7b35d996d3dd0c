"""Import paths of SGLang's ``sglang.lang`` package that programs use directly, for ``radixlm``:
``radixlm.lang.ir`` (the ``REGEX_*`` constants), ``radixlm.lang.choices`` (the choices methods)
and ``radixlm.lang.chat_template``. The language itself lives in ``radixlm.frontend``."""
