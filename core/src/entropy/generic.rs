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
