"""Vision-language models: image encoders (vision towers), projectors and the families built on them."""
