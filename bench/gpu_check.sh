#!/usr/bin/env bash
# GPU check (one GPU, < 5 minutes): see bench/gpu_check.py. Uses the project's .venv where there is one, else
# python3 (the device machine's, which holds CUDA torch).
#   bash bench/gpu_check.sh [--passages N] [--corpus FILE] [--models-dir DIR] [--only MODEL ...]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=python3
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
exec "$PYTHON" bench/gpu_check.py "$@"
