#!/usr/bin/env bash
# The test suite: builds the CLI (the CLI and Hub tests run the binary), then
# runs every test of the workspace (unit, property, archive corruption, fuzz
# regressions, CLI, Hub end to end against `brevis-hub serve` on 127.0.0.1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build -p brevis-cli --bins
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast
fi
# The workspace build turns on brevis-core's `unsafe-fast` (the CLI does):
# the library's own tests run once more without it (the safe decoders only).
cargo test -p brevis-core --lib --quiet
# The decoder alone (no search, no rayon: `parallel` gates it) must build and pass its tests:
# "decoding never needs" the search, and a library user may turn it off.
cargo test -p brevis-core --lib --no-default-features --quiet
cargo build -p brevis-core --lib --no-default-features --features unsafe-fast --quiet
# Compression without rayon (`parallel` off): everything on the calling thread.
cargo test -p brevis-core --lib --no-default-features --features search --quiet
