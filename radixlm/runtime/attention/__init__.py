"""Attention in the runtime: the backend interface (``backend``), its torch and Triton
implementations, the factory that picks one, and the model-layer op (``radix_attention``).

The kernels they call live in ``radixlm.kernels``.
"""
