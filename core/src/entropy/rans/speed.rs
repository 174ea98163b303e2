use super::*;

/// Not a test: `cargo test --release -p brevis-core --features unsafe-fast -- --ignored --nocapture rans_speed`.
#[test]
#[ignore]
fn rans_speed() {
    let n: usize = std::env::var("SPEED_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 22);
    let mut st = 12345u64;
    let syms: Vec<u8> = (0..n)
        .map(|_| {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            let r = (st >> 11) as f64 / (1u64 << 53) as f64;
            (120.0 + r.ln() * 1.8).max(0.0) as u8
        })
        .collect();
    let counts = count(&syms, &Context::None);
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let p4 = encode_counted::<LANES>(&syms, Context::None, &counts, 0);
        let e4 = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        let t = std::time::Instant::now();
        let p32 = encode_counted::<WIDE>(&syms, Context::None, &counts, 0);
        let e32 = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        let t = std::time::Instant::now();
        let s32 = encode_with_simd::<WIDE>(&syms, Context::None, &counts, 0, Simd::Off);
        let e32s = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        assert!(s32 == p32);
        eprintln!("order 0 encode 32 states: scalar {e32s:.2} ns/symbol");
        // The same symbols with a random top bit (as f16 high bytes
        // with their sign): an alphabet wider than 64 values.
        let wide: Vec<u8> = syms
            .iter()
            .enumerate()
            .map(|(i, &s)| s | (((i * 2_654_435_761) >> 13) as u8 & 0x80))
            .collect();
        let wc = count(&wide, &Context::None);
        let t = std::time::Instant::now();
        let w32 = encode_counted::<WIDE>(&wide, Context::None, &wc, 0);
        let ew = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        assert!(w32 == encode_with_simd::<WIDE>(&wide, Context::None, &wc, 0, Simd::Off));
        eprintln!(
            "order 0 encode 32 states, {} symbols: {ew:.2} ns/symbol",
            wc.rows[0].iter().filter(|&&c| c > 0).count()
        );
        let dec = |p: &[u8], wide: bool, prev: bool, simd: Simd| {
            let mut out = Vec::with_capacity(n);
            let t = std::time::Instant::now();
            if wide {
                decode_n::<u8, WIDE>(p, n, prev, None, &mut out, simd).unwrap();
            } else {
                decode_n::<u8, LANES>(p, n, prev, None, &mut out, simd).unwrap();
            }
            t.elapsed().as_secs_f64() * 1e9 / n as f64
        };
        let t = std::time::Instant::now();
        let c = count(&syms, &Context::None);
        let cn = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        assert_eq!(c.total(), n);
        eprintln!(
            "order 0 ns/symbol: encode 4 {e4:.2} 32 {e32:.2}; decode 4 {:.2} 32 {:.2} avx2 {:.2} best {:.2}; count {cn:.2}",
            dec(&p4, false, false, Simd::Off),
            dec(&p32, true, false, Simd::Off),
            dec(&p32, true, false, Simd::Avx2),
            dec(&p32, true, false, Simd::Best),
        );
        // Order 1 (a few hundred tables).
        let c4 = count_n::<LANES>(&syms, &Context::Previous);
        let c32 = count_n::<WIDE>(&syms, &Context::Previous);
        let t = std::time::Instant::now();
        let p4 = encode_counted::<LANES>(&syms, Context::Previous, &c4, 512);
        let e4 = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        let t = std::time::Instant::now();
        let p32 = encode_counted::<WIDE>(&syms, Context::Previous, &c32, 512);
        let e32 = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        eprintln!("order 1 ns/symbol: encode 4 {e4:.2} 32 {e32:.2}");
        eprintln!(
            "order 1 ns/symbol: decode 4 {:.2} 32 {:.2} avx2 {:.2} best {:.2}",
            dec(&p4, false, true, Simd::Off),
            dec(&p32, true, true, Simd::Off),
            dec(&p32, true, true, Simd::Avx2),
            dec(&p32, true, true, Simd::Best),
        );
    }
}
