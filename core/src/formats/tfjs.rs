//! TF.js: a `model.json` whose `weightsManifest` lists, group by group,
//! the weight shard files (`paths`, e.g. `group1-shard1of2.bin`) and the
//! weights their concatenated bytes hold, in order (`name`, `shape`,
//! `dtype`, and for a quantized weight `quantization.dtype`, the type it
//! is stored as). A weight may run from one shard into the next.
//!
//! The shards hold no header: what is known of them comes from the
//! manifest, so this is no [`super::Reader`] but a describer of other
//! files (see [`super::sidecar`]). A manifest is also accepted bare, as
//! the list of groups (`weights_manifest.json`).
//!
//! Element types: `float32`, `int32`, `bool`, `complex64` (pairs of
//! `float32`), and the stored types `float16`, `uint8`, `uint16`, `int8`.
//! A `string` weight (each element a length and its bytes) has a size
//! only its data tells: the group is listed up to it, the rest of its
//! bytes stay opaque.

use serde::Deserialize;
use serde::de::{SeqAccess, Visitor};

use super::{MAX_META, MAX_TENSORS, Span};
use crate::container::ReadAt;
use crate::dtype::Dtype;

/// Largest manifest read (the model topology included, skipped without
/// being kept): the largest of human-models is 0.9 MB.
pub(super) const MAX_MANIFEST: u64 = 16 << 20;
/// Most dimensions kept as a shape; a weight with more is listed flat.
const MAX_RANK: usize = crate::container::MAX_DIMS as usize;
/// Most bytes of a weight's name kept (a longer name is cut).
const MAX_NAME: usize = 4096;

/// A weight group: its shard files, in order, and its weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Group {
    /// Shard files as the manifest names them (relative to its folder;
    /// unchecked).
    pub paths: Vec<String>,
    /// Weights in the order their bytes follow each other.
    pub weights: Vec<Weight>,
}

/// One weight of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Weight {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// Its bytes.
    pub len: u64,
}

/// Whether a file starting with `head` may be a manifest: JSON, an
/// object or a list.
pub(super) fn claims(head: &[u8], len: u64) -> bool {
    len <= MAX_MANIFEST
        && matches!(
            head.iter().find(|b| !b.is_ascii_whitespace()),
            Some(b'{' | b'[')
        )
}

/// The weight groups of a manifest file.
pub(super) fn groups(src: &dyn ReadAt, len: u64) -> Result<Vec<Group>, String> {
    if len > MAX_MANIFEST {
        return Err(format!("{len} bytes, more than {MAX_MANIFEST} of JSON"));
    }
    let mut text = vec![0u8; len as usize];
    src.read_exact_at(0, &mut text)
        .map_err(|e| format!("reading: {e}"))?;
    parse(&text)
}

/// `model.json`: only its `weightsManifest` is kept (the topology and
/// everything else skipped, not built).
#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "weightsManifest")]
    weights_manifest: Option<Vec<GroupJson>>,
}

#[derive(Deserialize)]
struct GroupJson {
    paths: Vec<String>,
    #[serde(default)]
    weights: Vec<WeightJson>,
}

#[derive(Deserialize)]
struct WeightJson {
    name: String,
    dtype: Option<String>,
    shape: Option<Dims>,
    quantization: Option<Quantization>,
}

#[derive(Deserialize)]
struct Quantization {
    dtype: Option<String>,
}

/// A shape as read: at most [`MAX_RANK`] + 1 dimensions kept (more say
/// only that there are too many). A dimension that is no unsigned
/// integer fails the manifest.
struct Dims(Vec<u64>);

impl<'de> Deserialize<'de> for Dims {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dims;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of dimensions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dims, A::Error> {
                let mut dims = Vec::new();
                while let Some(d) = seq.next_element::<u64>()? {
                    if dims.len() <= MAX_RANK {
                        dims.push(d);
                    }
                }
                Ok(Dims(dims))
            }
        }
        d.deserialize_seq(V)
    }
}

/// The weight groups of a manifest's text: a `model.json`, or the bare
/// list of groups.
pub(super) fn parse(text: &[u8]) -> Result<Vec<Group>, String> {
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    let list: Vec<GroupJson> = if first == Some(&b'[') {
        serde_json::from_slice(text).map_err(|e| format!("no weightsManifest list: {e}"))?
    } else {
        serde_json::from_slice::<ModelJson>(text)
            .map_err(|e| format!("not a TF.js model.json: {e}"))?
            .weights_manifest
            .ok_or("no weightsManifest")?
    };
    let mut out = Vec::new();
    let mut count = 0usize;
    for g in list {
        let mut weights = Vec::new();
        for w in g.weights {
            count += 1;
            if count > MAX_TENSORS {
                return Err(format!("more than {MAX_TENSORS} weights"));
            }
            // A weight whose size cannot be told ends what is known of
            // its group.
            let Some(w) = weight(w) else { break };
            weights.push(w);
        }
        out.push(Group {
            paths: g.paths,
            weights,
        });
    }
    Ok(out)
}

/// A weight entry, `None` when its size cannot be told.
fn weight(w: WeightJson) -> Option<Weight> {
    let stored = w.quantization.and_then(|q| q.dtype).or(w.dtype)?;
    let (dtype, pair) = match stored.as_str() {
        "float32" => (Dtype::F32, false),
        "complex64" => (Dtype::F32, true),
        "int32" => (Dtype::I32, false),
        "bool" => (Dtype::Bool, false),
        "float16" => (Dtype::F16, false),
        "uint8" => (Dtype::U8, false),
        "int8" => (Dtype::I8, false),
        "uint16" => (Dtype::U16, false),
        _ => return None,
    };
    let mut shape = w.shape?.0;
    if shape.len() > MAX_RANK {
        // Too many dimensions (only MAX_RANK + 1 were kept): no size.
        return None;
    }
    if pair {
        shape.push(2);
    }
    let len = shape
        .iter()
        .try_fold(dtype.word_bytes() as u64, |a, &d| a.checked_mul(d))?;
    if shape.len() > MAX_RANK {
        shape = vec![len / dtype.word_bytes() as u64];
    }
    let mut name = w.name;
    if name.len() > MAX_NAME {
        let mut cut = MAX_NAME;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    Some(Weight {
        name,
        dtype,
        shape,
        len,
    })
}

/// The spans of a group's weights in each of its shards, given the
/// shards' lengths (`lens`, as many as are known, in order). A weight
/// that runs from one shard into the next is a flat span in each, named
/// `NAME#0`, `NAME#1`, ...; one past the last known shard is left out.
pub(super) fn shard_spans(group: &Group, lens: &[u64]) -> Vec<Vec<Span>> {
    let mut out = vec![Vec::new(); lens.len()];
    // Pieces and the bytes of their names, bounded whatever the manifest
    // says (a weight over many shards is a piece, and a name, in each).
    let (mut pieces, mut names) = (0usize, 0usize);
    // Each shard's start in the group's bytes.
    let mut starts = Vec::with_capacity(lens.len());
    let mut at = 0u64;
    for &l in lens {
        starts.push(at);
        at = at.saturating_add(l);
    }
    let total = at;
    let mut pos = 0u64;
    for w in &group.weights {
        let Some(end) = pos.checked_add(w.len).filter(|e| *e <= total) else {
            break;
        };
        let first = starts.partition_point(|&s| s <= pos).saturating_sub(1);
        let mut k = 0;
        let mut p = pos;
        let mut shard = first;
        while p < end && shard < lens.len() {
            let shard_end = starts[shard].saturating_add(lens[shard]);
            let piece_end = end.min(shard_end);
            let len = piece_end - p;
            if len > 0 {
                pieces += 1;
                names += w.name.len() + 4;
                if pieces > MAX_TENSORS || names as u64 > MAX_META {
                    return out;
                }
                let whole = p == pos && piece_end == end;
                let word = w.dtype.word_bytes() as u64;
                out[shard].push(Span {
                    name: if whole {
                        w.name.clone()
                    } else {
                        format!("{}#{k}", w.name)
                    },
                    dtype: w.dtype,
                    shape: if whole {
                        w.shape.clone()
                    } else {
                        vec![len / word]
                    },
                    offset: p - starts[shard],
                    len,
                });
                k += 1;
            }
            p = piece_end;
            shard += 1;
        }
        pos = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(weights: &str, paths: &str) -> Vec<u8> {
        format!(r#"{{"format":"graph-model","weightsManifest":[{{"paths":[{paths}],"weights":[{weights}]}}]}}"#)
            .into_bytes()
    }

    #[test]
    fn reads_types_and_quantization() {
        let m = manifest(
            r#"{"name":"a","shape":[2,3],"dtype":"float32"},
               {"name":"q","shape":[4],"dtype":"float32","quantization":{"dtype":"uint8","scale":0.1,"min":-1}},
               {"name":"h","shape":[3],"dtype":"float32","quantization":{"dtype":"float16"}},
               {"name":"c","shape":[1],"dtype":"complex64"},
               {"name":"i","shape":[],"dtype":"int32"}"#,
            r#""w.bin""#,
        );
        let g = parse(&m).unwrap();
        assert_eq!(g[0].paths, ["w.bin"]);
        let got: Vec<_> = g[0]
            .weights
            .iter()
            .map(|w| (w.name.as_str(), w.dtype, w.shape.clone(), w.len))
            .collect();
        assert_eq!(
            got,
            [
                ("a", Dtype::F32, vec![2, 3], 24),
                ("q", Dtype::U8, vec![4], 4),
                ("h", Dtype::F16, vec![3], 6),
                ("c", Dtype::F32, vec![1, 2], 8),
                ("i", Dtype::I32, vec![], 4),
            ]
        );
    }

    #[test]
    fn a_string_weight_ends_the_group() {
        let m = manifest(
            r#"{"name":"a","shape":[2],"dtype":"float32"},
               {"name":"s","shape":[2],"dtype":"string"},
               {"name":"b","shape":[2],"dtype":"float32"}"#,
            r#""w.bin""#,
        );
        let g = parse(&m).unwrap();
        assert_eq!(g[0].weights.len(), 1);
    }

    #[test]
    fn a_weight_across_two_shards_is_split() {
        let m = manifest(
            r#"{"name":"a","shape":[3],"dtype":"float32"},
               {"name":"b","shape":[4],"dtype":"float32"},
               {"name":"c","shape":[1],"dtype":"float32"}"#,
            r#""s1.bin","s2.bin""#,
        );
        let g = parse(&m).unwrap();
        // 12 + 16 + 4 bytes over shards of 20 and 12.
        let s = shard_spans(&g[0], &[20, 12]);
        let names = |v: &Vec<Span>| {
            v.iter()
                .map(|s| (s.name.clone(), s.offset, s.len, s.shape.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&s[0]),
            [("a".into(), 0, 12, vec![3]), ("b#0".into(), 12, 8, vec![2])]
        );
        assert_eq!(
            names(&s[1]),
            [("b#1".into(), 0, 8, vec![2]), ("c".into(), 8, 4, vec![1])]
        );
        // A shard short of the manifest: what does not fit is left out.
        let s = shard_spans(&g[0], &[20]);
        assert_eq!(names(&s[0]), [("a".into(), 0, 12, vec![3])]);
    }

    #[test]
    fn hostile_manifests_are_refused_or_bounded() {
        for bad in [
            &br#"{"paths":[],"weights":[]}"#[..],
            br#"[1,2,{"paths":[],"weights":[]}]"#,
            br#"{"weightsManifest":[{"paths":["a"],"weights":[{"name":"w","shape":[-1],"dtype":"float32"}]}]}"#,
            br#"{"weightsManifest":{"paths":1,"weights":2}}"#,
            br#"{"weightsManifest":[{"paths":[1],"weights":[]}]}"#,
            br#"{"weightsManifest":[{"paths":["a"],"weights":[]"#,
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        // Sizes that overflow end the group.
        let m = manifest(
            r#"{"name":"a","shape":[4294967296,4294967296],"dtype":"float32"}"#,
            r#""w.bin""#,
        );
        assert!(parse(&m).unwrap()[0].weights.is_empty());
        // Deep nesting, where it is read and where it is skipped:
        // serde_json's recursion limit, an error (not a stack overflow).
        for at in ["weightsManifest", "modelTopology"] {
            let deep = format!(
                r#"{{"{at}":{}{}}}"#,
                "[".repeat(100_000),
                "]".repeat(100_000)
            );
            assert!(parse(deep.as_bytes()).is_err(), "{at}");
        }
    }

    #[test]
    fn names_and_pieces_are_bounded() {
        let long = "n".repeat(70_000);
        let m = manifest(
            &format!(r#"{{"name":"{long}","shape":[1000],"dtype":"float32"}}"#),
            r#""a.bin""#,
        );
        let g = parse(&m).unwrap();
        assert_eq!(g[0].weights[0].name.len(), MAX_NAME);
        // One weight over 4000 one-byte shards: a piece in each, each named.
        let s = shard_spans(&g[0], &[1; 4000]);
        assert_eq!(s.iter().map(Vec::len).sum::<usize>(), 4000);
        assert!(s[3999][0].name.ends_with("#3999"));
    }
}
