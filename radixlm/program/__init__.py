"""What the language (``radixlm.frontend``) and the runtime (``radixlm.runtime``) both need.

- ``context``: a program's model context as text and token-id segments (``input_segments``).
- ``sampling``: the sampling option names, the run-level defaults and how they merge.
- ``choices``: how ``select`` decides between scored choices.
- ``protocols``: the requests ``gen`` and ``select`` send and how they read the answers.
- ``graph_executor``: runs a compiled request graph next to the runtime.

This package imports nothing from ``radixlm.frontend`` or ``radixlm.runtime``; both import it.
"""
