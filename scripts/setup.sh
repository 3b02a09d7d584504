#!/usr/bin/env bash
# Installs actord's build dependencies (Debian 12 packages, only those missing; quiet when all are present) and
# builds it in ./build (CMake, Release, one job per core). Safe to run again: it only does what is left to do.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(
  g++ cmake ninja-build ccache pkg-config
  libcaf-dev libzmq3-dev cppzmq-dev capnproto libcapnp-dev
  libyaml-cpp-dev libspdlog-dev libcli11-dev nlohmann-json3-dev catch2 libopenblas-pthread-dev
  libpcre2-dev libutf8proc-dev libboost-dev
  libeigen3-dev  # sim/: the least-squares fit of the step cost model
  nodejs  # runs tests/openai_client with the official openai npm client
  curl  # the plain-HTTP client of the SSE framing test
  python3-torch  # the independent PyTorch reference of tests/reference
  python3-jsonschema  # the JSON schema validator that checks structured/json_schema (tests/reference)
  python3-lark  # the Earley parser that checks structured/grammar (tests/reference/check_grammar.py)
  python3-rfc3987  # RFC 3987 URIs for the jsonschema package's uri format checker (tests/reference)
  clang libclang-rt-14-dev llvm-14  # the fuzz build (fuzz/): libFuzzer, ASan and UBSan runtimes, llvm-symbolizer
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done
if ((${#missing[@]})); then
  echo "actord: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit lives at /usr/local/cuda on our machines; CMake builds the CUDA parts when it finds nvcc.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="$PATH:/usr/local/cuda/bin"; fi

BUILD_DIR="${ACTORD_BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  echo "actord: configuring and building in $BUILD_DIR (a few minutes the first time)" >&2
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$BUILD_DIR.configure.log" 2>&1 ||
    { cat "$BUILD_DIR.configure.log" >&2; exit 1; }
fi
# Quiet on success; the whole log is printed when the build fails.
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" >"$BUILD_DIR.build.log" 2>&1; then
  cat "$BUILD_DIR.build.log" >&2
  echo "actord: the build failed (log: $BUILD_DIR.build.log)" >&2
  exit 1
fi

# The official openai npm client, for the API's checks with a real client (tests/openai_client).
if [ ! -d "$BUILD_DIR/npm/node_modules/openai" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  npm install --prefix "$BUILD_DIR/npm" --no-audit --no-fund --silent openai@4 >/dev/null
fi
