//! Fuzz target `read_safetensors`: see `brevis_fuzz::read_format`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::read_format("safetensors", data);
});
