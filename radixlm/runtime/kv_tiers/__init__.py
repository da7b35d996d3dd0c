"""KV tiers below the pool: the host arena (L2) and the disk store (L3); see docs/architecture.md."""
