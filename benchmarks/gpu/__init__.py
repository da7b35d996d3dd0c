"""The GPU machine's check (``gpu_check.sh``) and benchmark (``gpu_bench.py``)."""
