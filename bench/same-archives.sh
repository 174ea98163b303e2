#!/usr/bin/env bash
# bench/same-archives.sh BIN OUT.txt [models...] : compress each model folder at budget 0 and
# at the default budget, write "<sha256>  <model>/<budget>/<file>" lines to OUT.txt.
# Compare two runs with: diff A.txt B.txt
set -euo pipefail
BIN="$(realpath "$1")"; OUT="$2"; shift 2
MODELS="${BREVIS_DATA:-$HOME/.cache/brevis-data}/models"
names=("$@"); [ ${#names[@]} -gt 0 ] || names=($(cd "$MODELS" && ls -d */ | tr -d /))
W="$(mktemp -d /tmp/same.XXXXXX)"; : > "$OUT"
for m in "${names[@]}"; do
  for b in 0 default; do
    args=(); [ "$b" = default ] || args=(--budget "$b")
    "$BIN" compress "$MODELS/$m" -o "$W/$m/$b/" -T 2 --no-verify "${args[@]}" >/dev/null 2>&1 || { echo "FAIL $m $b" >>"$OUT"; continue; }
    (cd "$W" && find "$m/$b" -type f -name '*.brv' | sort | xargs sha256sum) >> "$OUT"
  done
done
rm -rf "$W"
echo "$(wc -l < "$OUT") archives -> $OUT"
