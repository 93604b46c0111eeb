#!/usr/bin/env bash
# The GPU checks (one GPU): `encode` (< 5 minutes, bench/gpu/encode.py) or `train prepare|run` (bench/gpu/train.py).
# Runs from the repository root with the project's .venv where there is one, else python3 (a device machine's, which
# holds CUDA torch).
#   bash bench/gpu/check.sh encode [--passages N] [--corpus FILE] [--models-dir DIR] [--only MODEL ...]
#   bash bench/gpu/check.sh train prepare BUNDLE | train run BUNDLE [--steps 40] [--only MODEL ...] [--profile]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=python3
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
case "${1:-}" in
  encode|train) check=$1; shift; exec "$PYTHON" -m "bench.gpu.$check" "$@" ;;
  *) echo "usage: bash bench/gpu/check.sh encode|train [options] (docs/gpu.md)" >&2; exit 2 ;;
esac
