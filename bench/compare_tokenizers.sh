#!/usr/bin/env bash
# Encode throughput, side by side in one run: actord (one thread, and a pool of tokenizer actors) and the HF
# tokenizers library (Rust, via npm @anush008/tokenizers; one Rayon thread, then all cores) on the same ~10 MB of
# 1,000-byte documents, for each model folder given.
# Usage: bench/compare_tokenizers.sh NODE_MODULES_PARENT BUILD_DIR MODEL_DIR...
#   NODE_MODULES_PARENT: a folder outside the repository holding node_modules/@anush008/tokenizers
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
nm="$1"; build="$2"; shift 2
for model in "$@"; do
  "$build/actord_tokenizer_bench" "$model" 2
  RAYON_NUM_THREADS=1 NODE_PATH="$nm/node_modules" node "$here/tokenizer_bench_hf.js" "$model/tokenizer.json"
  NODE_PATH="$nm/node_modules" node "$here/tokenizer_bench_hf.js" "$model/tokenizer.json"
done
