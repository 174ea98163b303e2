#!/usr/bin/env bash
# Run every cargo-fuzz target (or the ones named) for SECONDS each.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      SECONDS defaults to 30
#   FUZZ_KEEP_GOING=1 scripts/fuzz.sh 60       go on after a crash or hang
#                                              (libFuzzer fork mode), to
#                                              collect several findings
#
# An input that runs longer than FUZZ_TIMEOUT seconds (default 10) is a
# finding too (timeout-* artifact): programs must run in bounded time.
# Works on a stable toolchain: cargo-fuzz needs nightly flags, which
# RUSTC_BOOTSTRAP=1 unlocks. Corpora live in fuzz/corpus/<target>/ (not
# committed) and are seeded from the golden fixture. Crash inputs land in
# fuzz/artifacts/<target>/: commit them; `cargo test -p brevis-tests archive`
# replays them all. Exits 1 if any target found a crash.
#
# Leak detection is off: every decode builds a rayon pool whose threads'
# thread-local destructor lists LeakSanitizer reports as leaked (128 bytes
# from __cxa_thread_atexit_impl), a false positive that would stop each run.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
secs="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(decode_raw decode_structured roundtrip program serve_request
             read_safetensors read_gguf read_pytorch read_npy read_npz read_onnx
             read_ctranslate2 read_tfjs)
fi
export RUSTC_BOOTSTRAP=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked || exit 2
fi

# Seeds come from the newest format's golden fixture (decode_raw: every version's).
fixtures="$root/core/tests/fixtures"
fixture="$(ls -d "$fixtures"/v* | sort -V | tail -n 1)"
seed() {
    local t="$1" dir="fuzz/corpus/$1"
    mkdir -p "$dir"
    case "$t" in
        decode_raw)
            for v in "$fixtures"/v*; do
                cp "$v/small.safetensors.brv" "$dir/golden-$(basename "$v").brv"
            done ;;
        decode_structured)
            printf '\x00' >"$dir/none"
            printf '\x01\x01\x10\x00\x42' >"$dir/table"
            printf '\x03\x03\x40\x00\x07' >"$dir/body" ;;
        roundtrip)
            { printf '\x00'; cat "$fixture/small.safetensors"; } >"$dir/golden"
            printf '\x07\x03\x0c\x01\x00\x10\x03\x01\x02\x03\x04\x01\x04' >"$dir/wrapped" ;;
        program)
            # Every region program of the golden archive, one file each.
            command -v python3 >/dev/null && python3 - "$fixture/small.safetensors.brv" "$dir" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read()
toff, tlen = struct.unpack("<QQ", a[48:64])
t, pos = a[toff:toff + tlen], 0
def varint():
    global pos
    v = s = 0
    while True:
        b = t[pos]; pos += 1
        v |= (b & 0x7F) << s; s += 7
        if b < 0x80:
            return v
body = 72
for i in range(varint()):
    pos += 2
    n = varint(); pos += n
    for _ in range(varint()):
        varint()
    varint(); varint(); varint()
    for r in range(varint()):
        n = varint(); pos += 8
        open(f"{sys.argv[2]}/golden-{i}-{r}", "wb").write(a[body:body + n])
        body += n
PY
            ;;
        # The readers' targets start from the committed real samples: from
        # nothing, libFuzzer rarely gets past a format's magic bytes.
        read_safetensors) cp "$root"/testdata/silero-vad/*.safetensors "$dir/" ;;
        read_gguf) cp "$root"/testdata/gguf/*.gguf "$dir/" ;;
        read_pytorch) cp "$root"/testdata/pytorch/*.pt "$dir/" ;;
        read_ctranslate2) cp "$root"/testdata/ct2/model.bin "$dir/whisper-cut.bin" ;;
        read_onnx)
            cp "$root"/testdata/onnx/*.onnx "$dir/"
            cp "$root"/testdata/onnx-external/silero_vad_half.onnx "$dir/external.onnx" ;;
        read_npy) cp "$root"/testdata/numpy/*.npy "$dir/" ;;
        read_npz) cp "$root"/testdata/numpy/*.npz "$dir/" ;;
        read_tfjs)
            cp "$root"/testdata/tfjs/model.json "$dir/meet.json"
            printf '{"weightsManifest":[{"paths":["a.bin","b.bin"],"weights":[{"name":"w","shape":[3,5],"dtype":"float32"},{"name":"q","shape":[7],"dtype":"float32","quantization":{"dtype":"uint8","scale":1,"min":0}},{"name":"s","shape":[1],"dtype":"string"}]}]}' >"$dir/manifest" ;;
        serve_request)
            # Method byte, raw URL path, newline, NDJSON commit lines.
            printf '\x00/org/m/resolve/main/sub/model.safetensors\n' >"$dir/resolve"
            { printf '\x02/api/models/org/m/commit/main\n'
              printf '{"key":"header","value":{"summary":"x","parentCommit":"%s"}}\n' "$(printf 'a%.0s' $(seq 40))"
              printf '{"key":"lfsFile","value":{"path":"m.bin","oid":"%s","size":3}}\n' "$(printf 'b%.0s' $(seq 64))"
              printf '{"key":"file","value":{"path":"a.txt","content":"aGk=","encoding":"base64"}}\n'
              printf '{"key":"copyFile","value":{"srcPath":"a","path":"b","srcRevision":"main"}}\n'
            } >"$dir/commit"
            printf '\x03/lfs-upload/org/m/%s/3/3/99/%s/part/1\n' "$(printf 'c%.0s' $(seq 64))" "$(printf '0%.0s' $(seq 64))" >"$dir/part" ;;
    esac
}

cargo fuzz build -O || exit 2
extra=(-timeout="${FUZZ_TIMEOUT:-10}")
if [ "${FUZZ_KEEP_GOING:-0}" = 1 ]; then
    extra+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
status=0
for t in "${targets[@]}"; do
    seed "$t"
    echo "== fuzz $t for ${secs}s" >&2
    if ! cargo fuzz run -O "$t" "fuzz/corpus/$t" -- -max_total_time="$secs" -detect_leaks=0 -print_final_stats=1 "${extra[@]}"; then
        echo "!! $t found a crash: see fuzz/artifacts/$t/" >&2
        status=1
    fi
done
exit $status
