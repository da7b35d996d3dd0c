"""Tensor parallelism on ``torch.distributed``: rank processes, their group, sharding and batch
broadcast. Data parallelism lives in ``runtime/router/``."""
