#!/usr/bin/env bash
# Build the Python wheel that carries the brevis-hub binary (maturin's `bin`
# bindings, cli/pyproject.toml), install it in a fresh venv and run it.
# The wheel lands in target/wheels/ (or $CARGO_TARGET_DIR/wheels/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/brevis-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/build"
"$WORK/build/bin/pip" install -q 'maturin>=1.5,<2'
"$WORK/build/bin/maturin" build --release -m cli/Cargo.toml 2>&1 | tail -3
WHEELS="${CARGO_TARGET_DIR:-$ROOT/target}/wheels"
WHEEL="$(ls -t "$WHEELS"/brevis_hub-*.whl | head -1)"
python3 -m venv "$WORK/user"
"$WORK/user/bin/pip" install -q "$WHEEL"
echo "wheel: $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"
"$WORK/user/bin/brevis-hub" --version
