//! Fuzz target `read_tfjs` (a TF.js manifest placed in shards): see `brevis_fuzz::read_format`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    brevis_fuzz::read_format("tfjs", data);
});
