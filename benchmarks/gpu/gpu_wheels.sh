#!/usr/bin/env bash
# Wheels for the GPU machine's image (Python 3.12, no registry): the packages radixlm needs that the
# image lacks, saved to .whl/ for benchmarks/gpu/gpu_check.sh (carry: [".whl"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo "/.whl/" >> .git/info/exclude; }
platforms=()
for p in manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
for spec in pyzmq==27.3.0 outlines_core==0.2.14 llguidance==1.9.1 interegular==0.3.3 gguf==0.19.0 google-re2==1.1.20250805 \
            fastapi==0.165.0 starlette==1.10.0 pydantic==2.13.4 pydantic_core==2.46.4 annotated-types==0.7.0 \
            typing-inspection==0.4.2 uvicorn==0.55.0; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --abi cp312 --abi abi3 --abi none "${platforms[@]}" -d .whl "$spec"
done
ls -la .whl
