"""Data parallelism: the cache-aware routing policy, the in-server replica controller (``--dp-size``)
and the standalone HTTP router (``radixlm router``)."""
