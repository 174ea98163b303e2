//! `bench`: Brevis beside zstd -3 and zstd -19 on the same files, in one run,
//! with the order-0 field-entropy reference.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use brevis_core::container::{Archive, SegmentKind};
use brevis_core::{CompressOptions, DecompressOptions, Dtype, LearnOptions, Prior};
use serde_json::json;

use crate::Outcome;
use crate::local::BenchArgs;
use crate::progress::Ui;

#[derive(Default, Clone)]
struct Totals {
    bytes: u64,
    brevis: u64,
    order0_bits: f64,
    zstd3: u64,
    zstd19: u64,
    c1: f64,
    cn: f64,
    d1: f64,
    dn: f64,
    z3c: f64,
    z3d: f64,
    z19c: f64,
    learn: f64,
    files: usize,
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        bytes as f64 / 1e6 / secs
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64())
}

/// Order-0 entropy of the field streams, in bits: for floats the sign bits,
/// the exponents and the mantissa bytes; for integers each byte plane; bytes
/// that are no tensor (the header) count at 8 bits each.
pub fn order0_bits(data: &[u8], archive: &[u8]) -> Result<f64> {
    let a = Archive::new(archive)?;
    let mut bits = 0.0;
    for s in a.segments() {
        let d = &s.desc;
        let bytes = &data[d.offset as usize..(d.offset + d.len) as usize];
        if d.kind == SegmentKind::Bytes {
            bits += 8.0 * d.len as f64;
            continue;
        }
        bits += tensor_order0_bits(bytes, d.dtype);
    }
    Ok(bits)
}

fn entropy(counts: &[u64]) -> f64 {
    let total: f64 = counts.iter().map(|&c| c as f64).sum();
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let c = c as f64;
            -c * (c / total).log2()
        })
        .sum()
}

fn tensor_order0_bits(bytes: &[u8], dtype: Dtype) -> f64 {
    let wb = dtype.word_bytes();
    let words = bytes.chunks_exact(wb).map(|c| {
        let mut b = [0u8; 8];
        b[..wb].copy_from_slice(c);
        u64::from_le_bytes(b)
    });
    match dtype.float_layout() {
        Some(l) => {
            let mut sign = [0u64; 2];
            let mut exp = vec![0u64; 1 << l.exponent];
            let mplanes = (l.mantissa as usize).div_ceil(8);
            let mut mant = vec![[0u64; 256]; mplanes];
            for w in words {
                sign[(w >> (l.exponent + l.mantissa)) as usize & 1] += 1;
                exp[((w >> l.mantissa) & ((1 << l.exponent) - 1)) as usize] += 1;
                let m = w & ((1u64 << l.mantissa) - 1);
                for (p, plane) in mant.iter_mut().enumerate() {
                    plane[((m >> (8 * p)) & 0xFF) as usize] += 1;
                }
            }
            entropy(&sign) + entropy(&exp) + mant.iter().map(|p| entropy(p)).sum::<f64>()
        }
        None => {
            let mut planes = vec![[0u64; 256]; wb];
            for c in bytes.chunks_exact(wb) {
                for (p, &b) in c.iter().enumerate() {
                    planes[p][b as usize] += 1;
                }
            }
            planes.iter().map(|p| entropy(p)).sum()
        }
    }
}

pub fn run(a: BenchArgs, ui: &Ui) -> Result<Outcome> {
    let all = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut models = Vec::new();
    for p in &a.paths {
        let files: Vec<PathBuf> = walk(p)?;
        if files.is_empty() {
            bail!("{}: no files", p.display());
        }
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let shards: Vec<&Path> = files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "safetensors"))
            .map(|f| f.as_path())
            .collect();
        let mut t = Totals::default();
        let prior = if let Some(pp) = &a.prior {
            Some(Arc::new(crate::local::load_prior(pp)?))
        } else if !a.no_prior && !shards.is_empty() {
            let (p, secs) = timed(|| Prior::learn(&shards, &LearnOptions::default().threads(all)));
            t.learn = secs;
            Some(Arc::new(p?))
        } else {
            None
        };
        for f in &files {
            let data = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            ui.note(format!("bench {} ({} bytes)", f.display(), data.len()));
            // Decoded and compared below, and timed apart.
            let opts = CompressOptions::default()
                .verify(false)
                .budget(a.budget)
                .prior(prior.clone());
            let (ar1, c1) = timed(|| brevis_core::compress(&data, &opts.clone().threads(1)));
            let ar1 = ar1?;
            let (arn, cn) = timed(|| brevis_core::compress(&data, &opts.clone().threads(all)));
            if arn? != ar1 {
                bail!(
                    "{}: archive differs between 1 and {all} threads (determinism)",
                    f.display()
                );
            }
            let dec = |threads: usize| -> Result<(Vec<u8>, f64)> {
                let archive = Archive::new(&ar1[..])?;
                let mut out = Vec::with_capacity(data.len());
                let (r, s) = timed(|| {
                    archive.decode_to(&mut out, &DecompressOptions::default().threads(threads))
                });
                r?;
                Ok((out, s))
            };
            let (back, d1) = dec(1)?;
            let (_, dn) = dec(all)?;
            if back != data {
                bail!("{}: round trip differs", f.display());
            }
            let (z3, z3c) = timed(|| zstd::bulk::compress(&data, 3));
            let z3 = z3?;
            let (_, z3d) = timed(|| zstd::bulk::decompress(&z3, data.len()));
            let (z19, z19c) = if a.no_zstd19 {
                (Vec::new(), 0.0)
            } else {
                let (z, s) = timed(|| zstd::bulk::compress(&data, 19));
                (z?, s)
            };
            t.bytes += data.len() as u64;
            t.brevis += ar1.len() as u64;
            t.order0_bits += order0_bits(&data, &ar1)?;
            t.zstd3 += z3.len() as u64;
            t.zstd19 += z19.len() as u64;
            t.c1 += c1;
            t.cn += cn;
            t.d1 += d1;
            t.dn += dn;
            t.z3c += z3c;
            t.z3d += z3d;
            t.z19c += z19c;
            t.files += 1;
        }
        models.push((name, t));
    }
    let rows: Vec<_> = models
        .iter()
        .map(|(name, t)| {
            let b = t.bytes.max(1) as f64;
            json!({
                "model": name, "files": t.files, "bytes": t.bytes,
                "ratio": {"brevis": t.brevis as f64 / b, "order0_ref": t.order0_bits / 8.0 / b,
                          "zstd3": t.zstd3 as f64 / b, "zstd19": if a.no_zstd19 { serde_json::Value::Null } else { json!(t.zstd19 as f64 / b) }},
                "mb_per_s": {"brevis_compress_1t": mbps(t.bytes, t.c1), "brevis_compress_all": mbps(t.bytes, t.cn),
                             "brevis_decompress_1t": mbps(t.bytes, t.d1), "brevis_decompress_all": mbps(t.bytes, t.dn),
                             "zstd3_compress": mbps(t.bytes, t.z3c), "zstd3_decompress": mbps(t.bytes, t.z3d),
                             "zstd19_compress": mbps(t.bytes, t.z19c)},
                "threads_all": all, "prior_learn_seconds": t.learn,
                "brevis_compress_seconds_1t": t.c1,
            })
        })
        .collect();
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"models": rows}))?
        );
        return Ok(Outcome::Ok);
    }
    outln!("| model | MB | order-0 ref | zstd -3 | zstd -19 | Brevis |");
    outln!("|---|---|---|---|---|---|");
    for r in &rows {
        outln!(
            "| {} | {:.1} | {:.4} | {:.4} | {} | {:.4} |",
            r["model"].as_str().unwrap_or(""),
            r["bytes"].as_u64().unwrap_or(0) as f64 / 1e6,
            r["ratio"]["order0_ref"].as_f64().unwrap_or(0.0),
            r["ratio"]["zstd3"].as_f64().unwrap_or(0.0),
            r["ratio"]["zstd19"]
                .as_f64()
                .map_or("-".into(), |v| format!("{v:.4}")),
            r["ratio"]["brevis"].as_f64().unwrap_or(0.0),
        );
    }
    outln!("\nMB/s of original bytes (compress / decompress):\n");
    outln!("| model | Brevis 1T | Brevis {all}T | zstd -3 | zstd -19 c | prior learn s |");
    outln!("|---|---|---|---|---|---|");
    for r in &rows {
        let m = &r["mb_per_s"];
        let f = |k: &str| m[k].as_f64().unwrap_or(0.0);
        outln!(
            "| {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.1} | {:.1} |",
            r["model"].as_str().unwrap_or(""),
            f("brevis_compress_1t"),
            f("brevis_decompress_1t"),
            f("brevis_compress_all"),
            f("brevis_decompress_all"),
            f("zstd3_compress"),
            f("zstd3_decompress"),
            f("zstd19_compress"),
            r["prior_learn_seconds"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(Outcome::Ok)
}

fn walk(p: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if p.is_dir() {
        let mut e: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("listing {}", p.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        e.sort();
        for x in e {
            if x.is_dir() {
                out.extend(walk(&x)?);
            } else if x.extension().is_some_and(|e| e == "safetensors") {
                out.push(x);
            }
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(out)
}
