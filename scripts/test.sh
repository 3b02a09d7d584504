#!/usr/bin/env bash
# Sets up and builds actord (as scripts/setup.sh), then runs the whole test suite through ctest (the lifecycle tests
# twice: the second time with workers running ahead), then the fuzzers:
# a clang build in build-fuzz (ASan, UBSan, libFuzzer; fuzz/README.md) and each fuzz target for 25 s
# (ACTORD_FUZZ_SECONDS in its CMake cache) from its seed corpus. Any crash, leak, sanitizer report or timeout fails
# the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
ctest --test-dir "${ACTORD_BUILD_DIR:-build}" -j "$(nproc)" --output-on-failure --timeout 600
# The lifecycle tests again with every CPU worker running ahead, as GPU workers do (actors/worker_core.hpp): requests
# resized, migrated, cancelled, preempted, swapped and killed mid-run keep every token (~40 s).
ACTORD_CPU_RUN_AHEAD=1 ctest --test-dir "${ACTORD_BUILD_DIR:-build}" -j "$(nproc)" --output-on-failure --timeout 600 \
  -R 'apply: |dp2?: |cancel|preempt|swap - |killed|kv migration - a running|rebuilt|take_|plan ahead|runs ahead'

FUZZ_DIR="${ACTORD_FUZZ_BUILD_DIR:-build-fuzz}"
if [ ! -f "$FUZZ_DIR/build.ninja" ]; then
  mkdir -p "$FUZZ_DIR"
  CC=clang CXX=clang++ cmake -S . -B "$FUZZ_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DACTORD_FUZZ=ON \
    -DACTORD_WITH_CUDA=OFF \
    >"$FUZZ_DIR/configure.log" 2>&1 ||
    { cat "$FUZZ_DIR/configure.log" >&2; exit 1; }
fi
# Only the fuzzers and the libraries they link (not actord, its tests or benches).
if ! cmake --build "$FUZZ_DIR" -j "$(nproc)" --target actord_fuzzers >"$FUZZ_DIR/build.log" 2>&1; then
  cat "$FUZZ_DIR/build.log" >&2
  echo "actord: the fuzz build failed (log: $FUZZ_DIR/build.log)" >&2
  exit 1
fi
ctest --test-dir "$FUZZ_DIR" -L fuzz -j "$(nproc)" --output-on-failure
