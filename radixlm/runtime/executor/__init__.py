"""Runs the model: the model runner, its forward batch, CUDA graphs and the deterministic mode."""
