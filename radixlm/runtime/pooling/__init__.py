"""Embedding, rerank and classification: pooling configs, pooling, and the scheduler's encode step."""
