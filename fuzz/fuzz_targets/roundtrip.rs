//! Fuzz target `roundtrip`: see `brevis_fuzz::roundtrip`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::roundtrip(data);
});
