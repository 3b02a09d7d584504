#!/usr/bin/env bash
# Sets up and builds actord (as scripts/setup.sh), then runs the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
ctest --test-dir "${ACTORD_BUILD_DIR:-build}" -j "$(nproc)" --output-on-failure --timeout 600
