"""Multi-LoRA serving: PEFT adapters applied per request on top of one base model (``docs/architecture.md``,
"LoRA adapters")."""
