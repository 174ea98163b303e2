//! PyTorch zip checkpoints (`torch.save` since 1.6: `pytorch_model.bin`,
//! `.pt`, `.pth`, `.ckpt`) and TorchScript archives (`torch.jit.save`).
//!
//! Both are zips whose entries share one prefix: `<prefix>/data.pkl` (the
//! pickled object), `<prefix>/data/<key>` (each storage's raw bytes, stored
//! uncompressed and 64-byte aligned), and for TorchScript
//! `<prefix>/constants.pkl` with `<prefix>/constants/<key>` and `code/`.
//! Each stored storage entry is a tensor whose element type comes from the
//! pickle ([`super::pickle`], which executes nothing); its name is the
//! state-dict key (or attribute path) of the one tensor that views it, and
//! its shape that tensor's size when it views the whole storage in order.
//! The pickles, code, zip headers and directory, and storages of an
//! unknown type stay opaque bytes.
//!
//! The legacy format `torch.save` wrote before 1.6 (and still writes with
//! `_use_new_zipfile_serialization=False`: pickles back to back, the
//! storages' bytes after them, no zip) is not read: such files stay opaque
//! bytes.

use std::collections::{HashMap, HashSet};

use super::pickle::{self, Unpickled};
use super::zip::{self, Entry};
use super::{MAX_TENSORS, Reader, Span, read_meta};
use crate::container::ReadAt;
use crate::dtype::Dtype;

/// The pytorch reader.
pub(crate) struct PyTorch;

/// How the entries after the prefix of a torch archive start.
const TORCH_ENTRIES: [&[u8]; 8] = [
    b"data.pkl",
    b"data/",
    b".data/",
    b"code/",
    b"constants",
    b"version",
    b"byteorder",
    b"extra/",
];

/// Whether the first entry name `head` shows looks like a torch archive's:
/// `<prefix>/` then a torch entry (or a name too long for `head` to tell).
pub(crate) fn looks_torch(head: &[u8]) -> bool {
    let Some((name, whole)) = zip::first_name(head) else {
        return false;
    };
    match name.iter().position(|&b| b == b'/') {
        Some(i) => {
            let rest = &name[i + 1..];
            TORCH_ENTRIES
                .iter()
                .any(|e| rest.starts_with(e) || (!whole && e.starts_with(rest)))
        }
        None => !whole,
    }
}

impl Reader for PyTorch {
    fn name(&self) -> &'static str {
        "pytorch"
    }

    fn detect(&self, head: &[u8], _len: u64) -> bool {
        looks_torch(head)
    }

    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
        let entries = zip::entries(src, len)?;
        let Some(prefix) = entries.iter().find_map(|e| {
            let p = e.name.strip_suffix("/data.pkl")?;
            (!p.contains('/')).then(|| p.to_owned())
        }) else {
            return Err("no <prefix>/data.pkl entry: not a torch archive".into());
        };
        let by_name: HashMap<&str, &Entry> = entries.iter().map(|e| (e.name.as_str(), e)).collect();
        let mut spans = Vec::new();
        let mut stopped = None;
        for (pkl, dir) in [("data.pkl", "data"), ("constants.pkl", "constants")] {
            let Some(e) = by_name.get(format!("{prefix}/{pkl}").as_str()) else {
                continue;
            };
            let Some((off, n)) = e.stored() else {
                stopped.get_or_insert(format!("{pkl} is not stored"));
                continue;
            };
            let bytes = read_meta(src, len, off, n).map_err(|e| format!("{pkl}: {e}"))?;
            let u = pickle::load(&bytes);
            if let Some(why) = &u.stopped {
                stopped.get_or_insert(format!("{pkl}: {why}"));
            }
            storages(&u, &format!("{prefix}/{dir}/"), dir, &by_name, &mut spans);
            if spans.len() > MAX_TENSORS {
                return Err(format!("more than {MAX_TENSORS} storages"));
            }
        }
        if let (true, Some(why)) = (spans.is_empty(), stopped) {
            return Err(why);
        }
        Ok(spans)
    }
}

/// One span per storage of `u` whose entry `<dir_path><key>` is stored.
fn storages(
    u: &Unpickled,
    dir_path: &str,
    dir: &str,
    by_name: &HashMap<&str, &Entry>,
    spans: &mut Vec<Span>,
) {
    // Each storage's viewing tensors.
    let mut views: Vec<Vec<usize>> = vec![Vec::new(); u.storages.len()];
    for (i, t) in u.tensors.iter().enumerate() {
        if let Some(v) = views.get_mut(t.storage) {
            v.push(i);
        }
    }
    // Path components every named tensor shares are dropped (a
    // `{"state_dict": {...}}` wrapper), keeping at least the last.
    let paths: Vec<&Vec<String>> = u
        .tensors
        .iter()
        .filter_map(|t| t.path.as_ref())
        .filter(|p| !p.is_empty())
        .collect();
    let mut common = paths.iter().map(|p| p.len() - 1).min().unwrap_or(0);
    if let Some(first) = paths.first() {
        for p in &paths[1..] {
            common = common.min(
                first
                    .iter()
                    .zip(p.iter())
                    .take_while(|(a, b)| a == b)
                    .count(),
            );
        }
    }
    let mut used = HashSet::new();
    for (s, v) in u.storages.iter().zip(&views) {
        let Some((offset, len)) = by_name
            .get(format!("{dir_path}{}", s.key).as_str())
            .and_then(|e| e.stored())
        else {
            continue;
        };
        let fallback = format!("{dir}/{}", s.key);
        let dtype = s.dtype.unwrap_or(Dtype::Bytes);
        let word = dtype.word_bytes() as u64;
        let numel = len / word;
        let one = match v.as_slice() {
            [t] => Some(&u.tensors[*t]),
            _ => None,
        };
        let name = one
            .and_then(|t| t.path.as_ref())
            .filter(|p| !p.is_empty())
            .map(|p| p[common.min(p.len() - 1)..].join("."))
            .filter(|n| !used.contains(n))
            .unwrap_or(fallback);
        used.insert(name.clone());
        let shape = match one {
            Some(t)
                if dtype != Dtype::Bytes
                    && len % word == 0
                    && s.numel.is_none_or(|n| n == numel)
                    && t.is_whole(numel) =>
            {
                t.size.clone()
            }
            _ if dtype == Dtype::Bytes => vec![],
            _ => vec![numel],
        };
        spans.push(Span {
            name,
            dtype,
            shape,
            offset,
            len,
        });
    }
}

// The tests compress and decompress: they need the `search` feature.
#[cfg(all(test, feature = "search"))]
mod tests {
    use super::*;
    use crate::formats::pickle::tests::state_dict;
    use crate::formats::zip::tests::build;

    fn bf16(n: usize, seed: u8) -> Vec<u8> {
        (0..2 * n)
            .map(|i| (i as u8).wrapping_mul(seed) ^ 0x3f)
            .collect()
    }

    fn sample() -> Vec<u8> {
        let pkl = state_dict(&[
            ("enc.weight", "BFloat16Storage", "0", 12, 0, &[3, 4]),
            ("enc.bias", "BFloat16Storage", "1", 4, 0, &[4]),
            ("odd", "QInt8Storage", "2", 5, 0, &[5]),
            ("view", "FloatStorage", "3", 8, 2, &[2, 3]),
        ]);
        let (w, b) = (bf16(12, 7), bf16(4, 3));
        build(
            &[
                ("archive/data.pkl", &pkl),
                ("archive/byteorder", b"little"),
                ("archive/data/0", &w),
                ("archive/data/1", &b),
                ("archive/data/2", &[9u8; 5]),
                ("archive/data/3", &[1u8; 32]),
                ("archive/version", b"3\n"),
            ],
            64,
            true,
        )
    }

    #[test]
    fn reads_storages_as_named_tensors() {
        let f = sample();
        assert!(PyTorch.detect(&f[..64], f.len() as u64));
        let mut t = PyTorch.tensors(&&f[..], f.len() as u64).unwrap();
        t.sort_by_key(|s| s.offset);
        let got: Vec<(&str, Dtype, &[u64])> = t
            .iter()
            .map(|s| (s.name.as_str(), s.dtype, s.shape.as_slice()))
            .collect();
        assert_eq!(
            got,
            [
                ("enc.weight", Dtype::BF16, &[3u64, 4][..]),
                ("enc.bias", Dtype::BF16, &[4][..]),
                ("odd", Dtype::Bytes, &[][..]),
                ("view", Dtype::F32, &[8][..]),
            ]
        );
        assert_eq!(&f[t[0].offset as usize..][..24], &bf16(12, 7)[..]);
        assert_eq!(t[0].offset % 64, 0);
    }

    #[test]
    fn not_torch_without_data_pkl() {
        let f = build(&[("archive/other", b"x")], 64, false);
        assert!(PyTorch.tensors(&&f[..], f.len() as u64).is_err());
    }

    const SAMPLE: &[u8] = include_bytes!("../../../testdata/pytorch/astra_subset.pt");
    const TWIN: &[u8] = include_bytes!("../../../testdata/astra-bf16/model.safetensors");

    #[test]
    fn real_sample_reads_as_its_safetensors_twin() {
        let found = crate::formats::read(&SAMPLE, None).unwrap();
        assert_eq!(found.format, Some("pytorch"));
        let tensors: Vec<_> = found
            .segments
            .iter()
            .filter(|s| s.kind == crate::container::SegmentKind::Tensor)
            .collect();
        assert_eq!(tensors.len(), 10);
        let twin = crate::formats::safetensors::segments(&TWIN, TWIN.len() as u64).unwrap();
        for t in &tensors {
            let s = twin
                .iter()
                .find(|s| s.name == t.name)
                .unwrap_or_else(|| panic!("{}", t.name));
            assert_eq!((t.dtype, &t.shape), (s.dtype, &s.shape), "{}", t.name);
            let (a, b) = (t.offset as usize, s.offset as usize);
            assert_eq!(
                &SAMPLE[a..a + t.len as usize],
                &TWIN[b..b + s.len as usize],
                "{}",
                t.name
            );
        }
        let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        assert!(names.contains(&"conv1.weight") && names.contains(&"bn1.num_batches_tracked"));
    }

    /// Deterministic xorshift for the mutations.
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn hostile_variants_never_panic() {
        let f = SAMPLE;
        // Truncation: every byte of the head and tail, every 61st between.
        let n = f.len();
        let cuts = (0..2048)
            .chain((2048..n - 2048).step_by(61))
            .chain(n - 2048..n);
        for cut in cuts {
            let _ = crate::formats::read_as("pytorch", &f[..cut]);
        }
        // Byte flips in the pickle, the local headers and the directory.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let cd = n - 1200;
        for _ in 0..3000 {
            let mut g = f.to_vec();
            for _ in 0..1 + rng(&mut state) % 4 {
                let r = rng(&mut state) as usize;
                let at = if r.is_multiple_of(2) {
                    r / 2 % 1100
                } else {
                    cd + r / 2 % 1200
                };
                g[at] ^= 1 << (r % 8);
            }
            let _ = crate::formats::read_as("pytorch", &g);
        }
    }

    #[test]
    fn round_trips_exactly_sample_and_hostile() {
        let mut lying = SAMPLE.to_vec();
        // The central directory says data/0 is 8 bytes longer than it is.
        let cd = lying.windows(4).rposition(|w| w == b"PK\x01\x02").unwrap();
        let first = lying[..cd]
            .windows(4)
            .position(|w| w == b"PK\x01\x02")
            .unwrap();
        let at = first
            + lying[first..]
                .windows(18)
                .position(|w| w == b"archive/data/0PK\x01\x02")
                .unwrap()
            - 46;
        let size = u32::from_le_bytes(lying[at + 20..at + 24].try_into().unwrap()) + 8;
        lying[at + 20..at + 24].copy_from_slice(&size.to_le_bytes());
        lying[at + 24..at + 28].copy_from_slice(&size.to_le_bytes());
        let t = PyTorch.tensors(&&lying[..], lying.len() as u64).unwrap();
        assert_eq!(t.len(), 9, "the lying entry is opaque, the others kept");
        assert!(t.iter().all(|s| s.name != "conv1.weight"));
        for f in [SAMPLE.to_vec(), lying, SAMPLE[..SAMPLE.len() / 2].to_vec()] {
            crate::formats::assert_round_trip(&f);
        }
    }
}
