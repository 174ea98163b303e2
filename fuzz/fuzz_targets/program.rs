//! Fuzz target `program`: see `brevis_fuzz::program`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::program(data);
});
