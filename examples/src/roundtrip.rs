//! Compress a file in memory, decompress it and check the bytes are identical.
//!
//! `cargo run -p brevis-examples --example roundtrip -- model.safetensors`
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: roundtrip FILE")?;
    let data = std::fs::read(&path)?;
    let archive = brevis_core::compress(&data, &brevis_core::CompressOptions::default())?;
    let back = brevis_core::decompress(&archive)?;
    assert_eq!(back, data, "round trip changed the bytes");
    println!(
        "{path}: {} -> {} bytes ({:.4})",
        data.len(),
        archive.len(),
        archive.len() as f64 / data.len().max(1) as f64
    );
    Ok(())
}
