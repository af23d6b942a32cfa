#!/usr/bin/env bash
# The GPU check's one device call (see benchmarks/gpu_check.py): install the carried wheels (TRL, datasets,
# gguf, pydantic, the bundled model's parts) into /tmp/site, then run the flywheel on CUDA; figures to $OUT.
# `bash benchmarks/gpu_check.sh --dry-run` runs every step here on the CPU with tiny sizes (no wheels installed).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if [[ "${1:-}" == "--dry-run" ]]; then
    PY=${PY:-.venv/bin/python}
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # tiny sizes: one thread, no spin-waiting on a busy CPU
    exec "$PY" benchmarks/gpu_check.py run --dry-run --train --out "${OUT:-gpu-check-out}" --workspace /tmp/gpu-check-dry --timeout 3600
fi
PY=${PY:-python3}
shopt -s nullglob
wheels=(.gpu/*/*.whl)
if (( ${#wheels[@]} )); then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}"
fi
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec "$PY" benchmarks/gpu_check.py run --out "${OUT:?OUT is set by the device tool}" --timeout 480
