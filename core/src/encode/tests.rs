//! Tests of compression as a whole: pools, the self-check, region sizes,
//! the whole-file screen and duplicates.

use super::check::*;
use super::segments::*;
use super::whole::*;
use super::*;
use crate::container::SegmentDesc;
#[cfg(feature = "parallel")]
use crate::container::f16_file;
use crate::dtype::Dtype;
#[cfg(feature = "parallel")]
use crate::pool::{Workers, pool};

#[test]
#[cfg(feature = "parallel")]
fn compressing_runs_on_one_shared_pool() {
    // A number of threads has one pool for the process.
    let (Workers::Own(a), Workers::Own(b), Workers::Own(c)) = (pool(3), pool(3), pool(2)) else {
        panic!("no pool was built");
    };
    assert!(std::sync::Arc::ptr_eq(&a, &b) && !std::sync::Arc::ptr_eq(&a, &c));
    assert_eq!((a.current_num_threads(), c.current_num_threads()), (3, 2));
    // Every read of the source, the header's too, is on a thread of
    // the pool: the caller hands the whole file over once.
    struct Watched(Vec<u8>, std::sync::atomic::AtomicUsize);
    impl ReadAt for Watched {
        fn len(&self) -> std::io::Result<u64> {
            Ok(self.0.len() as u64)
        }
        fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            if rayon::current_thread_index().is_none() {
                self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.0[..].read_exact_at(offset, buf)
        }
    }
    // One f16 tensor of 64 regions (batches on both threads), in a
    // small file (the whole-file screen reads it too).
    let n = 1usize << 16;
    let tensor: Vec<u8> = (0..n as u64)
        .flat_map(|i| ((((i * 2_654_435_761) >> 7) & 0x3ff) as u16 | 14 << 10).to_le_bytes())
        .collect();
    let file = f16_file(&tensor);
    for threads in [1, 2] {
        let src = Watched(file.clone(), Default::default());
        let opts = CompressOptions::default()
            .threads(threads)
            .region_words(1024)
            .verify(false);
        let mut out = std::io::Cursor::new(Vec::new());
        compress_source(&src, Path::new("<memory>"), &mut out, &opts).unwrap();
        assert_eq!(
            src.1.into_inner(),
            0,
            "{threads} threads: reads off the pool"
        );
    }
}

/// A source whose regions fail to read past the middle (its earlier reads,
/// for duplicates and the search's sample, succeed) fails compression with
/// its error on every number of threads, whichever thread read it, and no
/// thread is left waiting (the regions are claimed as they come free).
#[test]
#[cfg(feature = "parallel")]
fn a_read_error_mid_file_fails_compression_without_a_hang() {
    /// Bytes whose region reads past offset `.1` fail.
    struct Failing(Vec<u8>, u64);
    impl ReadAt for Failing {
        fn len(&self) -> std::io::Result<u64> {
            Ok(self.0.len() as u64)
        }
        fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            // A region: 1024 words of 2 bytes.
            if offset > self.1 && buf.len() == 2048 {
                return Err(std::io::Error::other("the disk went away"));
            }
            self.0[..].read_exact_at(offset, buf)
        }
    }
    let n = 1usize << 16;
    let tensor: Vec<u8> = (0..n as u64)
        .flat_map(|i| ((((i * 2_654_435_761) >> 7) & 0x3ff) as u16 | 14 << 10).to_le_bytes())
        .collect();
    // 64 rows of 1024 words: a region a row.
    let header = format!(
        r#"{{"w":{{"dtype":"F16","shape":[64,1024],"data_offsets":[0,{}]}}}}"#,
        tensor.len()
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&tensor);
    let read = |threads: usize, f: &Failing| {
        let opts = CompressOptions::default()
            .threads(threads)
            .region_words(1024)
            .whole_file(false)
            .verify(false);
        compress_source(
            f,
            Path::new("x"),
            &mut std::io::Cursor::new(Vec::new()),
            &opts,
        )
    };
    // Whole, it compresses (the failure is only past the middle).
    read(2, &Failing(file.clone(), u64::MAX)).unwrap();
    for threads in [1, 2, 4] {
        let e = read(threads, &Failing(file.clone(), file.len() as u64 / 2)).unwrap_err();
        assert!(
            e.to_string().contains("the disk went away"),
            "{threads}: {e}"
        );
    }
}

#[test]
fn self_check_rejects_an_archive_of_other_bytes() {
    let data = b"the source; not a safetensors file".repeat(100);
    let opts = CompressOptions::default().verify(false);
    let mut out = std::io::Cursor::new(Vec::new());
    let report = compress_source(&&data[..], Path::new("<memory>"), &mut out, &opts).unwrap();
    let archive = out.into_inner();
    self_check(Archive::new(&archive[..]).unwrap(), &report, 1, false).unwrap();
    let mut other = report.clone();
    other.sha256[0] ^= 1;
    let e = self_check(Archive::new(&archive[..]).unwrap(), &other, 1, false).unwrap_err();
    assert!(matches!(e, EncodeError::SelfCheck(_)), "{e}");
    let mut longer = report;
    longer.original_len += 1;
    let e = self_check(Archive::new(&archive[..]).unwrap(), &longer, 1, false).unwrap_err();
    assert!(e.to_string().contains("bytes decoded"), "{e}");
}

#[test]
#[cfg(feature = "parallel")]
fn a_source_sha256_given_is_recorded_unhashed_and_checked() {
    use sha2::Digest;
    // A small f16 file of several regions, and its own digest.
    let n = 1usize << 14;
    let tensor: Vec<u8> = (0..n as u64)
        .flat_map(|i| ((((i * 2_654_435_761) >> 7) & 0x3ff) as u16 | 14 << 10).to_le_bytes())
        .collect();
    let file = f16_file(&tensor);
    let sha: [u8; 32] = sha2::Sha256::digest(&file).into();
    let opts = CompressOptions::default().threads(2).region_words(1024);
    let hashed = compress(&file, &opts).unwrap();
    // The right digest given: the same archive, proven.
    let given = compress(&file, &opts.clone().source_sha256(Some(sha))).unwrap();
    assert_eq!(given, hashed);
    // A wrong one: the self-check names both digests and nothing is
    // handed over (a file left nothing at its destination).
    let mut wrong = sha;
    wrong[31] ^= 1;
    let e = compress(&file, &opts.clone().source_sha256(Some(wrong))).unwrap_err();
    match &e {
        EncodeError::SourceSha256 { given, actual } => {
            assert_eq!((given, actual), (&hex(&wrong), &hex(&sha)), "{e}")
        }
        e => panic!("{e}"),
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("a.safetensors"), dir.path().join("a.brv"));
    std::fs::write(&src, &file).unwrap();
    let e = compress_file(&src, &dst, false, &opts.clone().source_sha256(Some(wrong)));
    assert!(matches!(e, Err(EncodeError::SourceSha256 { .. })));
    assert!(!dst.exists());
    // Unverified, the archive records the digest given: the source was
    // not hashed, and decoding it fails its SHA-256 check.
    let unproven = compress(&file, &opts.verify(false).source_sha256(Some(wrong))).unwrap();
    let a = Archive::new(&unproven[..]).unwrap();
    assert_eq!(a.info().sha256, wrong);
    let e = a
        .decode_to(&mut Vec::new(), &crate::DecompressOptions::default())
        .unwrap_err();
    assert!(matches!(e, crate::DecodeError::ShaMismatch { .. }), "{e}");
}

/// Lowercase hex.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn embedding_tables_of_wide_words_get_smaller_regions() {
    let desc = |name: &str, dtype: Dtype, shape: Vec<u64>| SegmentDesc {
        kind: SegmentKind::Tensor,
        dtype,
        name: name.into(),
        len: shape.iter().product::<u64>() * dtype.word_bytes() as u64,
        shape,
        offset: 0,
    };
    let words = crate::container::DEFAULT_REGION_WORDS;
    let region = |name, dtype, shape| segment_region_words(&desc(name, dtype, shape), words, false);
    // minilm's word embeddings (30522 x 384 f32): 171 rows of 384, the
    // fewest of at least WIDE_SYMBOLS words (32 rANS states).
    let wide = crate::entropy::WIDE_SYMBOLS as u64;
    let embed = region(
        "embeddings.word_embeddings.weight",
        Dtype::F32,
        vec![30522, 384],
    );
    assert_eq!(embed, 171 * 384);
    assert!(embed >= wide && embed - 384 < wide && embed < words);
    assert_eq!(
        region("model.embed_tokens.weight", Dtype::F64, vec![1 << 14, 64]),
        wide
    );
    // Other f32 tensors, 16-bit embeddings and integer tables keep the
    // default (cut to whole rows).
    let default = words / 384 * 384;
    for (name, dtype) in [
        ("encoder.layer.0.output.dense.weight", Dtype::F32),
        ("decoder.embed_tokens.weight", Dtype::F16),
        ("decoder.embed_tokens.weight", Dtype::BF16),
        ("decoder.embed_tokens.weight", Dtype::I32),
    ] {
        assert_eq!(
            region(name, dtype, vec![51864, 384]),
            default,
            "{name} {dtype:?}"
        );
    }
    assert_eq!(
        region("decoder.embed_tokens.weight", Dtype::F32, vec![51864, 384]),
        embed
    );
}

#[test]
fn whole_file_screen_passes_what_zstd_codes_well_only() {
    // Longer than the sample: the -22 sample rule is on the path.
    let n = 3 * WHOLE_SAMPLE_BYTES;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut noise = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let random: Vec<u8> = (0..n).map(|_| noise() as u8).collect();
    let skewed: Vec<u8> = (0..n).map(|_| (noise() % 7 == 0) as u8 * 200).collect();
    assert!(!whole_may_win(&random, &[], n as u64 / 2));
    assert!(whole_may_win(&skewed, &[], n as u64));
    assert!(!whole_may_win(&skewed, &[], 1));
    // Random bytes twice over, as two tensors: the second half is free.
    let twice = [&random[..n / 2], &random[..n / 2]].concat();
    let halves = [(0, n as u64 / 2), (n as u64 / 2, n as u64 / 2)];
    assert_eq!(
        cross_tensor_repeats(&twice, &halves),
        (n / 2 / REPEAT_BLOCK * REPEAT_BLOCK) as u64
    );
    assert!(whole_may_win(&twice, &halves, n as u64 * 3 / 4));
    assert!(!whole_may_win(&twice, &[], n as u64 * 3 / 4));
    // Blocks of one byte value are not repeats.
    let zeros = vec![0u8; n];
    assert_eq!(cross_tensor_repeats(&zeros, &halves), 0);
}

/// Blocks that share a fingerprint but differ (zero but for one byte
/// away from the four words it reads) are told apart, and each found
/// again where a later tensor repeats it; a tensor repeating itself
/// does not count, nor a block shorter than a whole one.
#[test]
fn repeats_are_found_among_blocks_of_one_fingerprint() {
    let blocks = 40;
    let mut sparse = vec![0u8; blocks * REPEAT_BLOCK];
    for k in 0..blocks {
        // Never at a multiple of 256 (the fingerprint's words).
        sparse[k * REPEAT_BLOCK + 9 + 5 * k] = 1 + k as u8;
    }
    let fps: std::collections::HashSet<u64> =
        sparse.chunks_exact(REPEAT_BLOCK).map(fingerprint).collect();
    assert_eq!(fps.len(), 1, "the blocks share one fingerprint");
    let len = sparse.len() as u64;
    // Second tensor: the first's blocks in another order, one of them
    // changed.
    let mut second: Vec<u8> = sparse
        .chunks_exact(REPEAT_BLOCK)
        .rev()
        .flatten()
        .copied()
        .collect();
    // (Away from the fingerprint's words: it shares their fingerprint.)
    second[100] ^= 0xAA;
    let file = [&sparse[..], &second[..], &sparse[..REPEAT_BLOCK + 100]].concat();
    let tensors = [(0, len), (len, len), (2 * len, REPEAT_BLOCK as u64 + 100)];
    let repeated = (blocks as u64 - 1) * REPEAT_BLOCK as u64 + REPEAT_BLOCK as u64;
    assert_eq!(cross_tensor_repeats(&file, &tensors), repeated);
    // One tensor of the same blocks twice: no earlier tensor, no repeat.
    let twice = [&sparse[..], &sparse[..]].concat();
    assert_eq!(cross_tensor_repeats(&twice, &[(0, 2 * len)]), 0);
}

/// Bytes of a source in memory are lent, a file's read; out of range
/// is an error either way.
#[test]
fn read_cow_lends_from_memory_and_reads_from_files() {
    let data: Vec<u8> = (0..=255).collect();
    let mem: &[u8] = &data;
    let lent = read_cow(&mem, 10, 20).unwrap();
    assert!(matches!(lent, Cow::Borrowed(_)));
    assert_eq!(&lent[..], &data[10..30]);
    let dir = std::env::temp_dir().join(format!("brevis-read-cow-{}", std::process::id()));
    std::fs::write(&dir, &data).unwrap();
    let file = std::fs::File::open(&dir).unwrap();
    let read = read_cow(&file, 10, 20).unwrap();
    assert!(matches!(read, Cow::Owned(_)));
    assert_eq!(&read[..], &data[10..30]);
    for (offset, len) in [(250, 7), (256, 1), (u64::MAX, 2)] {
        assert!(read_cow(&mem, offset, len).is_err());
    }
    assert!(read_cow(&file, 250, 7).is_err());
    std::fs::remove_file(&dir).unwrap();
}

/// Two f16 tensors of noise, the second the first with one value
/// changed: the file coded whole codes the second as matches.
#[test]
fn near_duplicate_tensors_are_coded_whole() {
    let n = 1usize << 20;
    let mut x = 7u64;
    let a: Vec<u8> = (0..n)
        .flat_map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Small weights: exponents of a few values, mantissas random.
            let e = 10 + (x >> 60) % 4;
            let w = ((x >> 63) << 15) | (e << 10) | ((x >> 20) & 0x3FF);
            (w as u16).to_le_bytes()
        })
        .collect();
    let mut b = a.clone();
    b[12345] ^= 0x40;
    let header = format!(
        r#"{{"a":{{"dtype":"F16","shape":[{n}],"data_offsets":[0,{}]}},"b":{{"dtype":"F16","shape":[{n}],"data_offsets":[{},{}]}}}}"#,
        2 * n,
        2 * n,
        4 * n
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&a);
    file.extend_from_slice(&b);
    let opts = CompressOptions::default().verify(false);
    let mut out = std::io::Cursor::new(Vec::new());
    let r = compress_source(&&file[..], Path::new("<memory>"), &mut out, &opts).unwrap();
    assert!(
        r.archive_len < file.len() as u64 * 6 / 10,
        "{} of {}",
        r.archive_len,
        file.len()
    );
    let archive = out.into_inner();
    assert_eq!(archive.len() as u64, r.archive_len);
    self_check(Archive::new(&archive[..]).unwrap(), &r, 1, false).unwrap();
    // Into a file, at one thread and two: the whole-file archive is
    // written over the tensor archive and the file cut to its length.
    let dir = std::env::temp_dir().join(format!("brevis-whole-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, dst) = (dir.join("near.safetensors"), dir.join("near.brv"));
    std::fs::write(&src, &file).unwrap();
    for threads in [1, 2] {
        let opts = CompressOptions::default().threads(threads);
        let f = compress_file(&src, &dst, true, &opts).unwrap();
        assert_eq!(f.archive_len, r.archive_len);
        assert_eq!(std::fs::read(&dst).unwrap(), archive, "{threads} threads");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
