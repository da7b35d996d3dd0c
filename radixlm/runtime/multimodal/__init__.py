"""Images in prompts: preprocessing through the checkpoint's processor, hash-derived placeholder ids,
the encoder stage before prefill and its bounded cache (docs/architecture.md, "Vision")."""
