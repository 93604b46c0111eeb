#!/usr/bin/env bash
# Seed the dataset cache ($PYSERINI_EXT_DATA) from a local copy (default ../shared/data), so CI and `make demo`
# work offline; datasets not found there are downloaded later by pyserini_ext.data where the network allows.
# Used by .ci/run and `make demo`. Existing datasets in the cache are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSERINI_EXT_DATA="${PYSERINI_EXT_DATA:-$HOME/.cache/pyserini_ext/datasets}"
source_dir="${PYSERINI_EXT_SEED:-../shared/data}"
mkdir -p "$PYSERINI_EXT_DATA"
if [ ! -d "$source_dir" ]; then
  echo "seed_datasets: no $source_dir; datasets will be downloaded when needed" >&2
  exit 0
fi
for d in "$source_dir"/*/; do
  name=$(basename "$d")
  if [ ! -e "$PYSERINI_EXT_DATA/$name" ]; then
    cp -r "$d" "$PYSERINI_EXT_DATA/$name"
    chmod -R u+w "$PYSERINI_EXT_DATA/$name"
  fi
done
