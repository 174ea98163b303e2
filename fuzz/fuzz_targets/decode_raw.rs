//! Fuzz target `decode_raw`: see `brevis_fuzz::decode_raw`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::decode_raw(data);
});
