//! The generic codec: one zstd frame.

/// `data` as one zstd frame at `level`, with this thread's compression
/// context: a fresh context zeroes (and first touches) its match tables on
/// every call, which on small inputs at high levels costs more than the
/// compression. A reused context gives the same frame.
pub fn zstd_compress(data: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    thread_local! {
        static CCTX: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    CCTX.with(|c| {
        let mut c = c.borrow_mut();
        let cctx = match c.as_mut() {
            Some(cctx) => {
                cctx.set_compression_level(level)?;
                cctx
            }
            None => c.insert(zstd::bulk::Compressor::new(level)?),
        };
        cctx.compress(data)
    })
}

/// `data` as one zstd frame at `level` whose window covers all of it (up to
/// 2^`max_window_log` bytes), where the level's own window is smaller: a
/// region of 32 MiB then finds matches anywhere in itself, as zstd -19 of
/// a whole file finds them 8 MiB back. Decoders read such frames (the
/// window is at most the region, far under zstd's 128 MiB decoding limit).
pub fn zstd_compress_whole(
    data: &[u8],
    level: i32,
    max_window_log: u32,
) -> std::io::Result<Vec<u8>> {
    let need = usize::BITS - data.len().saturating_sub(1).leading_zeros();
    let window_log = need.clamp(10, max_window_log);
    let mut c = zstd::bulk::Compressor::new(level)?;
    c.set_parameter(zstd::stream::raw::CParameter::WindowLog(window_log))?;
    c.compress(data)
}

/// A zstd literal's payload: one frame that must decode to exactly `len`
/// bytes (never more is allocated).
pub fn zstd_decompress_exact(payload: &[u8], len: usize) -> Result<Vec<u8>, crate::DecodeError> {
    let raw = zstd::bulk::decompress(payload, len)
        .map_err(|e| crate::DecodeError::corrupt(format!("zstd literal: {e}")))?;
    if raw.len() != len {
        return Err(crate::DecodeError::corrupt("zstd literal: wrong length"));
    }
    Ok(raw)
}

/// [`zstd_decompress_exact`] into `dst`, which the frame must fill
/// exactly.
pub fn zstd_decompress_into(payload: &[u8], dst: &mut [u8]) -> Result<(), crate::DecodeError> {
    let n = zstd::bulk::decompress_to_buffer(payload, dst)
        .map_err(|e| crate::DecodeError::corrupt(format!("zstd literal: {e}")))?;
    if n != dst.len() {
        return Err(crate::DecodeError::corrupt("zstd literal: wrong length"));
    }
    Ok(())
}
