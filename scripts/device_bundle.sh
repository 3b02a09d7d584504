#!/usr/bin/env bash
# Builds actord and its test binary for a lent GPU machine and gathers what that machine lacks into
# build-device/bundle: the two binaries (sm_90 + compute_90 PTX, stripped) and the shared libraries of this
# machine's Debian packages they need (CAF, ZeroMQ, Cap'n Proto, yaml-cpp, spdlog, fmt, PCRE2, utf8proc and their
# own dependencies). Left out: the C and C++ runtimes (the GPU machine's are newer) and CUDA's libraries (cuBLAS,
# NCCL: the GPU machine has its own, found by bundle/run.sh). OpenBLAS is left out of this build (its 36 MB would
# not fit the device tool's 64 MiB carry; the CPU GEMM falls back to its own kernels). Also writes bundle/run.sh,
# which runs there: the [cuda] tests, the same under compute-sanitizer, and `actord generate` with device: cuda.
#
# Use: scripts/device_bundle.sh, then carry build-device/bundle and run `build-device/bundle/run.sh [all | tests |
# nobench]` on the device (all: tests, sanitizer, stories260K on the GPU, the host's AMX checks, then
# bench/cuda_device_bench.sh; DEVICE_SECONDS bounds the whole run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh  # the packages, and a normal build (the bundle's own build dir is separate)
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "device_bundle: no nvcc at /usr/local/cuda/bin: the bundle would have no CUDA backend" >&2
  exit 1
fi
export PATH="$PATH:/usr/local/cuda/bin"
BUILD=build-device
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACTORD_WITH_OPENBLAS=OFF \
    >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log" >&2; exit 1; }
fi
cmake --build "$BUILD" -j "$(nproc)" --target actord actord_tests actord_gemm_bench >"$BUILD.build.log" 2>&1 ||
  { tail -50 "$BUILD.build.log" >&2; exit 1; }

OUT="$BUILD/bundle"
rm -rf "$OUT"
mkdir -p "$OUT/lib"
cp "$BUILD/actord" "$BUILD/tests/actord_tests" "$BUILD/actord_gemm_bench" "$OUT/"
strip "$OUT/actord" "$OUT/actord_tests" "$OUT/actord_gemm_bench"
# Every library the binaries load but those the GPU machine brings itself.
ldd "$BUILD/actord" "$BUILD/tests/actord_tests" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) continue ;;
    libcuda.so.*|libcudart*|libcublas*|libnccl*) continue ;;
  esac
  cp -L "$lib" "$OUT/lib/"
done
strip --strip-unneeded "$OUT"/lib/*.so* 2>/dev/null || true

cat >"$OUT/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine, from the repository root of the carried checkout, each step bounded so that the whole run
# ends within DEVICE_SECONDS (default 560) of its start: the [cuda] tests, the same but the whole-model ones under
# compute-sanitizer, stories260K through `actord generate` on the GPU, the host CPU's [amx] tests and GEMM bench
# (these machines' Xeons may have AMX), then bench/cuda_device_bench.sh until the deadline. Logs under $OUT (or /tmp).
# run.sh [all | tests | nobench]; BENCH_ONLY="b1 hf ...": just those benchmarks (bench/cuda_device_bench.sh --only)
# SKIP_TESTS=1: not the [cuda] tests; SKIP_SANITIZER=1: no compute-sanitizer runs; MEMCHECK_TESTS / RACECHECK_TESTS (Catch2 test specs) and
# MEMCHECK_SECONDS / RACECHECK_SECONDS narrow them for a short lease.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
LOGS="${OUT:-/tmp}"
BUDGET="${DEVICE_SECONDS:-560}"
mkdir -p "$LOGS"
left() { echo $((BUDGET - SECONDS)); }
bounded() {  # seconds, command...: at most that long, and never past the budget
  local limit="$1"; shift
  [ "$(left)" -lt "$limit" ] && limit=$(left)
  [ "$limit" -lt 5 ] && { echo "(skipped: out of time)"; return 124; }
  timeout "$limit" "$@"
}
# CUDA's libraries: the toolkit's, else the ones PyTorch's wheels bring.
CUDA_LIBS="/usr/local/cuda/lib64"
for mod in nvidia.cublas nvidia.nccl nvidia.cuda_runtime; do
  dir=$(python3 -c "import importlib, os; m = importlib.import_module('$mod'); print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null) &&
    CUDA_LIBS="$CUDA_LIBS:$dir"
done
export LD_LIBRARY_PATH="$HERE/lib:$CUDA_LIBS:${LD_LIBRARY_PATH:-}"
export ACTORD_SOURCE_DIR="$ROOT" ACTORD_BINARY="$HERE/actord"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
grep -m1 'model name' /proc/cpuinfo; grep -m1 -o 'amx[a-z_0-9]*' /proc/cpuinfo | tr '\n' ' '; echo
"$HERE/actord" info >"$LOGS/info.txt" 2>&1; grep -i -E 'isa|amx|cuda' "$LOGS/info.txt" | head -8
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: not the [cuda] tests (a second call of one lease)
  bounded 200 "$HERE/actord_tests" "[cuda]" -d yes >"$LOGS/cuda_tests.log" 2>&1
  echo "[cuda] tests: exit $? (log: cuda_tests.log)"; grep -E '^[0-9.]+ s: |passed|failed|positions' "$LOGS/cuda_tests.log" | tail -16
  grep -A10 'FAILED' "$LOGS/cuda_tests.log" | head -40
fi
if [ -z "${SKIP_HOST:-}" ]; then  # SKIP_HOST=1: not the host CPU's [amx] tests and GEMM bench (measured before)
  bounded 60 "$HERE/actord_tests" "[amx]" -d yes >"$LOGS/amx_tests.log" 2>&1
  echo "[amx] tests on this host CPU: exit $?"; tail -3 "$LOGS/amx_tests.log"
fi
if [ -z "${SKIP_SANITIZER:-}" ] && command -v compute-sanitizer >/dev/null; then
  # The kernel tests (whole models and NCCL's processes run too slowly under memcheck to fit a device call).
  bounded "${MEMCHECK_SECONDS:-120}" compute-sanitizer --tool memcheck --error-exitcode 9 "$HERE/actord_tests" \
    "${MEMCHECK_TESTS:-[cuda]~[model]~[nccl]}" >"$LOGS/sanitizer.log" 2>&1
  echo "compute-sanitizer memcheck on the [cuda] kernel tests: exit $? (log: sanitizer.log)"; tail -3 "$LOGS/sanitizer.log"
  bounded "${RACECHECK_SECONDS:-60}" compute-sanitizer --tool racecheck --error-exitcode 9 "$HERE/actord_tests" \
    "${RACECHECK_TESTS:-cuda: rope*}" >"$LOGS/racecheck.log" 2>&1
  echo "compute-sanitizer racecheck on ${RACECHECK_TESTS:-cuda: rope*}: exit $? (log: racecheck.log)"; tail -3 "$LOGS/racecheck.log"
  grep -h -A10 'FAILED' "$LOGS/sanitizer.log" "$LOGS/racecheck.log" | head -40  # a failed check, in the reply itself
fi
cd "$ROOT"
if [ "${1:-all}" = tests ]; then exit 0; fi
bounded 60 "$HERE/actord" generate configs/quickstart.yaml --set groups[0].device=cuda --prompt-ids 1 --max-tokens 256 \
  --temperature 0 --json >"$LOGS/generate_cuda.json" 2>"$LOGS/generate_cuda.err"
echo "generate on cuda: exit $?"
python3 - "$LOGS/generate_cuda.json" models/stories260K/reference_greedy_256.json <<'PY'
import json, sys
try:
    got = json.load(open(sys.argv[1]))["generated_ids"]
    ref = json.load(open(sys.argv[2]))["generated_ids"]
    print("stories260K on cuda equals its reference:", got == ref)
except Exception as e:
    print("no output to compare:", e)
PY
if [ -z "${SKIP_HOST:-}" ]; then
  bounded 60 "$HERE/actord_gemm_bench" 2 step >"$LOGS/gemm_bench_host.txt" 2>&1
  echo "host gemm bench (2 threads): exit $?"; tail -12 "$LOGS/gemm_bench_host.txt"
fi
# The benchmarks of issue 12 (bench/cuda_device_bench.sh: decode MBU, tokens/s at 1, 64, 256 beside HF transformers,
# 4k prefill TFLOP/s beside the cuBLAS rate) until the budget's end; the summary and the log back in $LOGS.
if [ "${1:-all}" != nobench ]; then
  "$ROOT/bench/cuda_device_bench.sh" --actord "$HERE/actord" --out /tmp/actord-device-bench --deadline $(($(left) - 5)) \
    --only "${BENCH_ONLY:-}" >"$LOGS/bench.log" 2>&1
  echo "device bench: exit $? (log: bench.log)"; cp /tmp/actord-device-bench/summary.json "$LOGS/bench_summary.json" 2>/dev/null
  tail -45 "$LOGS/bench.log"
fi
RUN
chmod +x "$OUT/run.sh"
echo "device bundle: $OUT ($(du -sh "$OUT" | cut -f1)); carry it and run $OUT/run.sh on the GPU machine"
