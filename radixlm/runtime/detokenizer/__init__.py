"""The detokenizer: incremental text per request (``incremental``) and its process (``process``)."""
