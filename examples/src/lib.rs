//! Small runnable programs using Brevis. See `cargo run -p brevis-examples --example roundtrip`.
