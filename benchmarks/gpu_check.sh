#!/usr/bin/env bash
# One GPU check for radixlm (under 8 minutes on one H200): install, run the GPU-only tests and the
# kernel tests on the GPU, the interpreter tests on the CPU, then benchmarks/gpu_bench.py.
#
# The GPU machine has no internet. Pure-Python packages missing from its image (gguf, which the
# model loader imports) travel as wheels in .whl/ (ignored via .git/info/exclude), prepared here with
#   python3 -m pip download --no-deps -d .whl gguf==0.19.0
# and carried with the run (carry: [".whl"]). A pre-converted smollm2-135m directory may be passed
# in RADIXLM_MODEL_DIR; without it the benchmark uses random weights of the same config.
# Logs go to $OUT when set (the device tool returns them), else /tmp/radixlm_gpu_check.
set -uo pipefail
cd "$(dirname "$0")/.."
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
python3 -c 'import radixlm.runtime.model_runner' || { echo "radixlm does not import"; status=1; }

step "GPU tests + kernel tests compiled for the GPU"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tee "$LOG_DIR/pytest_gpu.log" \
    || status=1

step "interpreter tests on the CPU (as CI runs them)"
CUDA_VISIBLE_DEVICES="" TRITON_INTERPRET=1 OMP_NUM_THREADS=4 timeout 120 \
    python3 -m pytest -q -p no:cacheprovider -m triton_interpret tests/kernels 2>&1 \
    | tee "$LOG_DIR/pytest_interpret.log" || status=1

step "benchmark"
timeout 300 python3 benchmarks/gpu_bench.py 2>&1 | tee "$LOG_DIR/gpu_bench.log" || status=1

step "done: status $status"
exit $status
