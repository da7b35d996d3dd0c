#!/usr/bin/env bash
# The GPU check's documented entry point; the script itself lives with the GPU benchmarks.
exec bash "$(dirname "$0")/gpu/gpu_check.sh" "$@"
