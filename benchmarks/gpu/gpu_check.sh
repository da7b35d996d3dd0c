#!/usr/bin/env bash
# One GPU check for radixlm (under 9 minutes on one H200): install, run the GPU tests (the whole
# engine on CUDA and quantized checkpoints among them), the CPU kernel tests on that machine's ISA, then
# benchmarks/gpu/gpu_bench.py (its figures also as JSON: $LOG_DIR/gpu_bench.json).
# The interpreter tests are not repeated here: CI runs them on the CPU.
#
# The GPU machine has no internet and its image (Python 3.12) lacks pyzmq, outlines-core,
# llguidance, interegular, gguf, google-re2 and the HTTP server's packages (fastapi, pydantic, ...).
# They travel as wheels in .whl/ (ignored via .git/info/exclude), prepared here with
# `bash benchmarks/gpu/gpu_wheels.sh`, and carried with the run (carry: [".whl"]). A pre-converted
# smollm2-135m directory may be passed in RADIXLM_MODEL_DIR; without it the benchmark uses random
# weights of the same config.
# Logs go to $OUT when set (the device tool returns them), else /tmp/radixlm_gpu_check.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=5 PIP_RETRIES=0
LOG_DIR="${OUT:-/tmp/radixlm_gpu_check}"
mkdir -p "$LOG_DIR"
status=0

step() { echo; echo "=== $* ($(date +%T))"; }

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if ! python3 -c 'import torch' 2>/dev/null; then
    python3 -m pip install -q torch || { echo "no torch and no way to install it"; exit 1; }
fi
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda,
"triton", triton.__version__, "gpu", torch.cuda.is_available())'

step "install"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/radixlm_site .whl/*.whl \
        && export PYTHONPATH="/tmp/radixlm_site:${PYTHONPATH:-}"
fi
# --no-deps: the image's packages serve; anything else must come from .whl (no registry here).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null \
    || export PYTHONPATH="$PWD:${PYTHONPATH:-}"
python3 -m pip install -q "pytest>=8" pytest-timeout 2>/dev/null || true
export PYTHONPATH="$PWD:${PYTHONPATH:-}"  # tests import tests.helpers
python3 -c 'import radixlm.runtime.executor.model_runner' || { echo "radixlm does not import"; status=1; }

# The GPU tests first (the files that name CUDA), so that a slow CPU-kernel run cannot cut them off.
# test_gpu_speculative.py passing here is what AUTO_DEVICES (runtime/speculative/spec_args.py) waits
# for before speculation is on by default on CUDA too.
gpu_tests=$(grep -l -i cuda tests/kernels/test_*.py | tr '\n' ' ')
step "GPU tests: $gpu_tests"
timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout 150 -rfs $gpu_tests 2>&1 \
    | tee "$LOG_DIR/pytest_gpu.log" || status=1

step "CPU kernel tests, built with this machine's compiler and ISA (AVX-512 where CI has AVX2 only)"
cpu_ignores=$(for f in $gpu_tests; do printf -- '--ignore %s ' "$f"; done)
# shellcheck disable=SC2086
timeout 220 python3 -m pytest -q -p no:cacheprovider --timeout 100 -rf tests/kernels $cpu_ignores 2>&1 \
    | tail -n 40 | tee "$LOG_DIR/pytest_cpu_kernels.log" || status=1

step "benchmark"
timeout 200 python3 -m benchmarks.gpu.gpu_bench --json "$LOG_DIR/gpu_bench.json" ${GPU_BENCH_ARGS:-} 2>&1 | tee "$LOG_DIR/gpu_bench.log" || status=1

step "done: status $status"
exit $status
