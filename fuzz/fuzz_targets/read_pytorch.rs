//! Fuzz target `read_pytorch`: see `brevis_fuzz::read_format`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::read_format("pytorch", data);
});
