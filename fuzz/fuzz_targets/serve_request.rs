//! Fuzz target `serve_request`: see `brevis_fuzz::serve_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::serve_request(data);
});
