"""Triton kernel bodies, one module per op; imported lazily by the ``*_triton`` launchers.

``@triton.jit`` decides between compiling and interpreting when it decorates a function (it reads
``TRITON_INTERPRET`` then), so these modules are only imported on first launch. Importing
``radixlm.kernels`` therefore never imports Triton, and tests can turn the interpreter on first.
"""
