//! `bench`: Brevis beside zstd -3 and zstd -19 on the same files, in one run,
//! with the order-0 field-entropy reference.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use brevis_core::{Archive, SegmentKind};
use brevis_core::{CompressOptions, DecompressOptions, Dtype, LearnOptions, Prior, Sidecars};
use clap::Args;
use serde_json::json;
use sha2::Digest;

use crate::Outcome;
use crate::args::{Budget, Json, PriorChoice};
use crate::progress::Ui;

/// Sums over the files of one path (or over all paths). zstd -19 and the
/// prior's learning are `None` when not measured (`--no-zstd19`; a prior
/// given or `--no-prior`).
#[derive(Default, Clone)]
struct Totals {
    bytes: u64,
    brevis: u64,
    order0_bits: f64,
    zstd3: u64,
    zstd19: Option<u64>,
    c1: f64,
    cn: f64,
    /// Compressing given the source's SHA-256 (as `mirror` compresses a
    /// download already checked against it).
    k1: f64,
    kn: f64,
    d1: f64,
    dn: f64,
    /// Decoding alone (no SHA-256 of the output).
    e1: f64,
    en: f64,
    z3c: f64,
    z3d: f64,
    z19c: Option<f64>,
    learn: Option<f64>,
    files: usize,
    /// Whether `dn` and `en` time the files decoding all at once (a repo
    /// of several files), not one after another.
    all_at_once: bool,
}

impl Totals {
    /// Ratios beside the original bytes ([`brevis_core::ratio`]: 1.0 for
    /// an empty input); absent measurements are null.
    fn ratios(&self) -> serde_json::Value {
        let r = |x: u64| brevis_core::ratio(x, self.bytes);
        // The order-0 reference in bytes, a fraction.
        let order0 = if self.bytes == 0 {
            r(0)
        } else {
            self.order0_bits / 8.0 / self.bytes as f64
        };
        json!({"brevis": r(self.brevis), "order0_ref": order0,
               "zstd3": r(self.zstd3), "zstd19": self.zstd19.map(r)})
    }

    /// Add `o`'s files and sizes (the total's; not its times): zstd -19 is
    /// in the sum only if measured in both.
    fn add_sizes(&mut self, o: &Totals) {
        self.files += o.files;
        self.bytes += o.bytes;
        self.brevis += o.brevis;
        self.order0_bits += o.order0_bits;
        self.zstd3 += o.zstd3;
        self.zstd19 = self.zstd19.zip(o.zstd19).map(|(a, b)| a + b);
    }
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        bytes as f64 / 1e6 / secs
    }
}

/// A number with `decimals`, or `-` when absent (JSON null).
fn cell(v: &serde_json::Value, decimals: usize) -> String {
    v.as_f64()
        .map_or_else(|| "-".into(), |x| format!("{x:.decimals$}"))
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

/// Ratio and speed beside zstd -3 and -19 on the same files, in one run.
#[derive(Args, Debug)]
#[command(
    after_help = "Example:\n  brevis-hub bench ~/.cache/brevis-data/models/minilm-l6-v2 --json"
)]
pub struct BenchArgs {
    /// Files or folders.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub json: Json,
    #[command(flatten)]
    pub budget: Budget,
    /// Skip zstd -19 (slow on big files).
    #[arg(long)]
    pub no_zstd19: bool,
    #[command(flatten)]
    pub prior: PriorChoice,
}

pub fn run(a: BenchArgs, ui: &Ui) -> Result<Outcome> {
    let all = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut models = Vec::new();
    for p in &a.paths {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        models.push((name, p.display().to_string(), measure_path(&a, p, all, ui)?));
    }
    let rows: Vec<_> = models
        .iter()
        .map(|(name, path, t)| {
            json!({
                "model": name, "path": path, "files": t.files, "bytes": t.bytes,
                "archive_bytes": t.brevis, "ratio": t.ratios(),
                "mb_per_s": {"brevis_compress_1t": mbps(t.bytes, t.c1), "brevis_compress_all": mbps(t.bytes, t.cn),
                             "brevis_encode_1t": mbps(t.bytes, t.k1), "brevis_encode_all": mbps(t.bytes, t.kn),
                             "brevis_decode_1t": mbps(t.bytes, t.e1), "brevis_decode_all": mbps(t.bytes, t.en),
                             "brevis_decompress_1t": mbps(t.bytes, t.d1), "brevis_decompress_all": mbps(t.bytes, t.dn),
                             "zstd3_compress": mbps(t.bytes, t.z3c), "zstd3_decompress": mbps(t.bytes, t.z3d),
                             "zstd19_compress": t.z19c.map(|s| mbps(t.bytes, s))},
                "threads_all": all, "prior_learn_seconds": t.learn, "level": a.budget.level().get(),
                "files_decoded_at_once": t.all_at_once,
                "brevis_compress_seconds_1t": t.c1,
            })
        })
        .collect();
    let mut sum = Totals {
        zstd19: (!a.no_zstd19).then_some(0),
        ..Totals::default()
    };
    for (_, _, t) in &models {
        sum.add_sizes(t);
    }
    let total = json!({
        "files": sum.files, "bytes": sum.bytes, "archive_bytes": sum.brevis, "ratio": sum.ratios(),
    });
    if a.json.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"models": rows, "total": total}))?
        );
        return Ok(Outcome::Ok);
    }
    print_tables(&rows, &total, all)?;
    Ok(Outcome::Ok)
}

/// The sums over the files of one path argument (its prior learned first,
/// unless given or `--no-prior`).
fn measure_path(a: &BenchArgs, p: &Path, all: usize, ui: &Ui) -> Result<Totals> {
    let found: Vec<PathBuf> = walk(p)?;
    // The describing files (a TF.js model.json, an ONNX model) are read
    // for their shards' tensors; in a folder, only weight files are
    // measured.
    let sidecars = Sidecars::find(&found);
    let files: Vec<PathBuf> = if p.is_dir() {
        found
            .into_iter()
            .filter(|f| sidecars.has_tensors(f))
            .collect()
    } else {
        found
    };
    if files.is_empty() {
        bail!("{}: no weight files", p.display());
    }
    let shards: Vec<&Path> = files
        .iter()
        .filter(|f| sidecars.has_tensors(f))
        .map(|f| f.as_path())
        .collect();
    let mut t = Totals {
        zstd19: (!a.no_zstd19).then_some(0),
        z19c: (!a.no_zstd19).then_some(0.0),
        ..Totals::default()
    };
    let prior = if let Some(pp) = &a.prior.prior {
        Some(Arc::new(crate::files::load_prior(pp)?))
    } else if !a.prior.no_prior && !shards.is_empty() {
        let learn = LearnOptions::default()
            .threads(all)
            .sidecars(sidecars.clone());
        let (p, secs) = timed(|| Prior::learn(&shards, &learn));
        t.learn = Some(secs);
        Some(Arc::new(p?))
    } else {
        None
    };
    let opts = a
        .budget
        .apply(CompressOptions::default())
        .verify(false)
        .prior(prior);
    // A repo's archives, kept (up to AT_ONCE_MAX_BYTES) to time their
    // decoding all at once, as `decompress`, `pull` and `verify` do.
    let mut kept: Option<Vec<(Vec<u8>, usize)>> = (files.len() > 1).then(Vec::new);
    for f in &files {
        let data = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        ui.note(format!("bench {} ({} bytes)", f.display(), data.len()));
        let opts = opts.clone().sidecar(sidecars.get(f).cloned());
        let archive = measure_file(f, &data, &opts, (all, a.no_zstd19), &mut t)?;
        if let Some(k) = &mut kept {
            k.push((archive, data.len()));
            if k.iter().map(|(a, _)| a.len() as u64).sum::<u64>() > AT_ONCE_MAX_BYTES {
                kept = None;
            }
        }
    }
    if let Some(archives) = kept {
        (t.dn, t.en) = (
            at_once(&archives, all, true)?,
            at_once(&archives, all, false)?,
        );
        t.all_at_once = true;
    }
    Ok(t)
}

/// Most archive bytes of a repo kept in memory to time decoding its files
/// all at once (beyond it, each file is timed alone, one after another).
const AT_ONCE_MAX_BYTES: u64 = 2 << 30;

/// Seconds to decode every archive (with its original length) at once on
/// `threads`, each file a share of them, as `decompress` does a folder
/// (a file's SHA-256 is serial: files in parallel keep the cores busy),
/// into fresh memory; the faster of [`ROUNDS`]. `hash`: with each file's
/// SHA-256 check (decompress), else the decoder alone.
fn at_once(archives: &[(Vec<u8>, usize)], threads: usize, hash: bool) -> Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let (r, s) = timed(|| {
            brevis_hub::pipeline::each_file(
                archives,
                threads,
                |(_, len)| *len as u64,
                |(ar, len), threads| {
                    let mut out = vec![0u8; *len];
                    decode_into(&Archive::new(&ar[..])?, &mut out, threads, hash)
                },
            )
        });
        r?;
        best = best.min(s);
    }
    Ok(best)
}

/// Decode `archive` into `out` (its length) on `threads`: with its
/// SHA-256 check (`hash`, as decompress does) or the decoder alone.
fn decode_into(
    archive: &Archive<&[u8]>,
    out: &mut [u8],
    threads: usize,
    hash: bool,
) -> Result<(), brevis_core::DecodeError> {
    let opts = DecompressOptions::default().threads(threads);
    if hash {
        archive.decode_to_slice(out, &opts).map(|_| ())
    } else {
        archive.decode_unhashed_to_slice(out, &opts).map(|_| ())
    }
}

/// Timed runs of each Brevis measurement: the fastest is kept.
const ROUNDS: usize = 2;

/// Brevis on 1 and on `all` threads (the archives must be the same, and
/// decode to `data`), zstd -3 and (unless `no_zstd19`) zstd -19 on one
/// file, added to `t`; its archive.
fn measure_file(
    f: &Path,
    data: &[u8],
    opts: &CompressOptions,
    (all, no_zstd19): (usize, bool),
    t: &mut Totals,
) -> Result<Vec<u8>> {
    // The reference the timed runs must give again (and, decoded below,
    // the proof of the round trip: `opts` does not verify). Its run is
    // not timed: it pays for the allocator's and the pool's first pages,
    // which later runs (and a repo's next file) find ready.
    let ar1 = brevis_core::compress(data, &opts.clone().threads(1))?;
    // Encode: compress given the source's SHA-256, not hashing it again
    // (as `mirror` compresses a download checked against the Hub's).
    let sha: [u8; 32] = sha2::Sha256::digest(data).into();
    let known = opts.clone().source_sha256(Some(sha));
    // Seconds, the faster of ROUNDS (as peers' benchmarks keep the best
    // of their runs; this machine's speed drifts by tens of percent
    // within a second): compress 1T, all; encode 1T, all.
    let mut c = [f64::INFINITY; 4];
    for _ in 0..ROUNDS {
        for (i, secs) in c.iter_mut().enumerate() {
            let o = if i < 2 { opts } else { &known };
            let threads = if i % 2 == 0 { 1 } else { all };
            let (ar, s) = timed(|| brevis_core::compress(data, &o.clone().threads(threads)));
            if ar? != ar1 {
                bail!(
                    "{}: archive differs on {threads} threads{} (determinism)",
                    f.display(),
                    if i < 2 {
                        ""
                    } else {
                        ", given the source's SHA-256"
                    }
                );
            }
            *secs = secs.min(s);
        }
    }
    // Decompress: decode, hash and check the SHA-256 (as every command
    // does); decode: the decoder alone, as other compressors are timed.
    let archive = Archive::new(&ar1[..])?;
    let dec = |threads: usize, hash: bool| -> Result<(Vec<u8>, f64)> {
        // Fresh memory, as a decompressor's output is: its first touch
        // is timed.
        let mut out = vec![0u8; data.len()];
        let (r, s) = timed(|| decode_into(&archive, &mut out, threads, hash));
        r?;
        Ok((out, s))
    };
    let (back, _) = dec(1, true)?;
    if back != data {
        bail!("{}: round trip differs", f.display());
    }
    drop(back);
    // Seconds, the faster of ROUNDS: decompress 1T, all; decode 1T, all.
    let mut d = [f64::INFINITY; 4];
    for _ in 0..ROUNDS {
        for (i, secs) in d.iter_mut().enumerate() {
            let threads = if i % 2 == 0 { 1 } else { all };
            *secs = secs.min(dec(threads, i < 2)?.1);
        }
    }
    let [d1, dn, e1, en] = d;
    let (z3, z3c) = timed(|| zstd::bulk::compress(data, 3));
    let z3 = z3?;
    let (_, z3d) = timed(|| zstd::bulk::decompress(&z3, data.len()));
    if !no_zstd19 {
        let (z, s) = timed(|| zstd::bulk::compress(data, 19));
        let len = z?.len() as u64;
        t.zstd19 = t.zstd19.map(|x| x + len);
        t.z19c = t.z19c.map(|x| x + s);
    }
    t.bytes += data.len() as u64;
    t.brevis += ar1.len() as u64;
    t.order0_bits += order0_bits(data, &ar1)?;
    t.zstd3 += z3.len() as u64;
    t.c1 += c[0];
    t.cn += c[1];
    t.k1 += c[2];
    t.kn += c[3];
    t.d1 += d1;
    t.dn += dn;
    t.e1 += e1;
    t.en += en;
    t.z3c += z3c;
    t.z3d += z3d;
    t.files += 1;
    drop(archive);
    Ok(ar1)
}

/// The ratio table and the speed table, in Markdown.
fn print_tables(rows: &[serde_json::Value], total: &serde_json::Value, all: usize) -> Result<()> {
    // A model is named by its folder's name, or by the path as given when
    // two share that name.
    let label = |r: &serde_json::Value| -> String {
        let name = r["model"].as_str().unwrap_or("");
        if rows.iter().filter(|o| o["model"] == r["model"]).count() > 1 {
            r["path"].as_str().unwrap_or(name).to_owned()
        } else {
            name.to_owned()
        }
    };
    outln!("| model | MB | order-0 ref | zstd -3 | zstd -19 | Brevis |");
    outln!("|---|---|---|---|---|---|");
    let mut lines: Vec<(String, &serde_json::Value)> = rows.iter().map(|r| (label(r), r)).collect();
    if rows.len() > 1 {
        lines.push(("total".into(), total));
    }
    for (name, r) in &lines {
        let bytes = r["bytes"].as_u64().unwrap_or(0);
        // No ratio of an empty input: `-` (its JSON keeps 1.0).
        let ratio = |k: &str| {
            if bytes == 0 {
                "-".into()
            } else {
                cell(&r["ratio"][k], 4)
            }
        };
        outln!(
            "| {} | {:.1} | {} | {} | {} | {} |",
            name,
            bytes as f64 / 1e6,
            ratio("order0_ref"),
            ratio("zstd3"),
            ratio("zstd19"),
            ratio("brevis"),
        );
    }
    outln!(
        "\nMB/s of original bytes, in memory (compress / encode = compress given the source's SHA-256, as mirror does / decode / decompress = decode + SHA-256 check; on all threads a folder's files decode at once, as `decompress` does them):\n"
    );
    outln!("| model | Brevis 1T | Brevis {all}T | zstd -3 | zstd -19 c | prior learn s |");
    outln!("|---|---|---|---|---|---|");
    for r in rows {
        let m = &r["mb_per_s"];
        let f = |k: &str| cell(&m[k], 0);
        outln!(
            "| {} | {} / {} / {} / {} | {} / {} / {} / {} | {} / {} | {} | {} |",
            label(r),
            f("brevis_compress_1t"),
            f("brevis_encode_1t"),
            f("brevis_decode_1t"),
            f("brevis_decompress_1t"),
            f("brevis_compress_all"),
            f("brevis_encode_all"),
            f("brevis_decode_all"),
            f("brevis_decompress_all"),
            f("zstd3_compress"),
            f("zstd3_decompress"),
            cell(&m["zstd19_compress"], 1),
            cell(&r["prior_learn_seconds"], 1),
        );
    }
    Ok(())
}

/// The files under `p` (a file: itself), in name order; hidden entries
/// and `.brv` archives left out.
fn walk(p: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if p.is_dir() {
        let mut e: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("listing {}", p.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|x| {
                !x.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        e.sort();
        for x in e {
            if x.is_dir() {
                out.extend(walk(&x)?);
            } else if x.is_file() && x.extension().is_none_or(|e| e != "brv") {
                out.push(x);
            }
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(out)
}
