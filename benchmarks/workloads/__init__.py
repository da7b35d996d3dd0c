"""Whole-system workloads: the engine, the server, programs, agents, soak, constrained decoding."""
