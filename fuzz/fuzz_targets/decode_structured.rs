//! Fuzz target `decode_structured`: see `brevis_fuzz::decode_structured`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::decode_structured(data);
});
