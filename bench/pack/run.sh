#!/usr/bin/env bash
# Builds pack_bench in build/bench and runs it; arguments go to pack_bench
# (--data DIR --threads N --repeat N --tmp DIR --skip-resize --json).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build/bench -G Ninja -DSTOKER_BUILD_TESTS=OFF -DSTOKER_BUILD_BENCH=ON >/dev/null
ninja -C build/bench pack_bench >/dev/null
exec build/bench/bench/pack_bench "$@"
