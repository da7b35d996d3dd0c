"""The decode step and the kernels under it, timed against their torch baselines or a git revision."""
