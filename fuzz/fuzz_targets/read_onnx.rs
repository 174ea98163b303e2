//! Fuzz target `read_onnx`: see `brevis_fuzz::read_format`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::read_format("onnx", data);
});
