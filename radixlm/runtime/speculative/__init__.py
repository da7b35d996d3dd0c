"""Speculative decoding: proposers guess a request's next tokens (``ngram.py``: prompt lookup;
``draft_model.py``: a small draft model), the scheduler verifies them in one step
(``runtime/scheduler/spec_verify.py``)."""
