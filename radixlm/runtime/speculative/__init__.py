"""Speculative decoding: proposers guess a request's next tokens, the scheduler verifies them in one
extend (``runtime/scheduler/spec_verify.py``)."""
