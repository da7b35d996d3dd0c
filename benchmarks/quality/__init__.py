"""Output quality of lossy options (quantization, a 16-bit KV cache) against the full-precision model."""
