"""Routing policies across replicas and the tensor-parallel decode step."""
