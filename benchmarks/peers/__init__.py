"""radixlm against llama.cpp on the same CPU and model."""
