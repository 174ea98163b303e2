//! Files whose tensors another file describes: the weight shards a TF.js
//! `model.json` lists, the external data of an ONNX model. Such a file
//! holds no header of its own; [`Sidecars::find`] reads the describing
//! files among a set of files and says, for each described file of the
//! same set, where its tensors are.
//!
//! A name a manifest gives (`group1-shard1of2.bin`, `model.onnx_data`) is
//! never opened: it is only matched against the files given, relative to
//! the manifest's folder, and only when it is a plain relative path (no
//! `..`, no root). What a manifest says is checked like any reader's
//! spans (see [`super::tile`]): a lie costs ratio, never bytes.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::{HEAD_LEN, Reader, Span, onnx, tfjs};
use crate::container::ReadAt;
use crate::dtype::Dtype;

/// The tensors of one file, as another file describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    format: &'static str,
    pub(crate) spans: Vec<Span>,
}

impl Sidecar {
    /// A description of these spans (tests).
    #[cfg(test)]
    pub(crate) fn of(spans: Vec<Span>) -> Sidecar {
        Sidecar {
            format: "test",
            spans,
        }
    }

    /// What the file is, as the file describing it says: `"tfjs-shard"`
    /// (a TF.js weight shard), `"onnx-data"` (an ONNX model's external
    /// data).
    pub fn format(&self) -> &'static str {
        self.format
    }

    /// The number of tensors described.
    pub fn tensors(&self) -> usize {
        self.spans.len()
    }
}

/// The described files among a set of files, each with its [`Sidecar`].
#[derive(Debug, Clone, Default)]
pub struct Sidecars {
    of: HashMap<PathBuf, Arc<Sidecar>>,
}

impl Sidecars {
    /// Read every describing file among `files` (a TF.js manifest, an
    /// ONNX model with external data; any other file is passed over) and
    /// describe the files of `files` they name. A file described twice
    /// keeps the first description; a manifest that cannot be read
    /// describes nothing (its files are then coded as plain bytes).
    pub fn find<P: AsRef<Path>>(files: &[P]) -> Sidecars {
        let given: Vec<&Path> = files.iter().map(AsRef::as_ref).collect();
        let all: Vec<usize> = (0..given.len()).collect();
        Self::find_by(&given, &all, None)
    }

    /// [`Sidecars::find`] that reads only `describers` (which must exist)
    /// as describing files, and matches the names they give against
    /// `files`, each with its size (a file of `files` need not exist yet).
    /// A plan's worker holding some of a repo's files describes each of
    /// them exactly as a run holding all of them, given the same
    /// describers and the same list of files.
    pub fn find_with<P: AsRef<Path>>(describers: &[P], files: &[(P, u64)]) -> Sidecars {
        let mut given: Vec<&Path> = files.iter().map(|(p, _)| p.as_ref()).collect();
        let mut sizes: Vec<Option<u64>> = files.iter().map(|(_, n)| Some(*n)).collect();
        let mut which = Vec::with_capacity(describers.len());
        for d in describers {
            let d = d.as_ref();
            match given.iter().position(|g| *g == d) {
                Some(i) => which.push(i),
                None => {
                    which.push(given.len());
                    given.push(d);
                    sizes.push(None);
                }
            }
        }
        Self::find_by(&given, &which, Some(&sizes))
    }

    /// The described files among `given`, reading `given[i]` for each `i`
    /// of `describers`, in that order; a file's size from `sizes` where
    /// given, else from the file.
    fn find_by(given: &[&Path], describers: &[usize], sizes: Option<&[Option<u64>]>) -> Sidecars {
        // Each file by its canonical folder and its own name, to match
        // names against (a symlink is not followed: a Hugging Face cache's
        // snapshot links each file to a blob named by its hash). A file
        // whose folder does not exist yet (a worker's file not fetched)
        // keeps its path as given.
        let canon: Vec<Option<PathBuf>> = given
            .iter()
            .map(|p| {
                let dir = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
                Some(dir.join(p.file_name()?))
            })
            .collect();
        let index: HashMap<&Path, usize> = canon
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((c.as_deref()?, i)))
            .collect();
        let mut of: HashMap<PathBuf, Arc<Sidecar>> = HashMap::new();
        for &i in describers {
            let path = &given[i];
            let Some(dir) = canon[i].as_deref().and_then(Path::parent) else {
                continue;
            };
            let find = |name: &str| {
                let j = *index.get(join(dir, name)?.as_path())?;
                let len = match sizes.and_then(|s| s[j]) {
                    Some(n) => n,
                    None => std::fs::metadata(given[j]).ok()?.len(),
                };
                (j != i).then_some((j, len))
            };
            for (j, sidecar) in describe(path, &find) {
                of.entry(given[j].to_path_buf())
                    .or_insert_with(|| Arc::new(sidecar));
            }
        }
        Sidecars { of }
    }

    /// The description of `file` (as given to [`Sidecars::find`]).
    pub fn get(&self, file: &Path) -> Option<&Arc<Sidecar>> {
        self.of.get(file)
    }

    /// Whether `file` holds tensors: a format reader knows it from its
    /// first bytes, or another file describes it.
    pub fn has_tensors(&self, file: &Path) -> bool {
        self.get(file).is_some() || matches!(super::detect_container(file), Ok(Some(_)))
    }

    /// The number of files described.
    pub fn len(&self) -> usize {
        self.of.len()
    }

    /// Whether no file is described.
    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }
}

/// The files one file describes, as (index, description), found through
/// `find` (a name to the index and length of a given file).
fn describe(path: &Path, find: &dyn Fn(&str) -> Option<(usize, u64)>) -> Vec<(usize, Sidecar)> {
    let Ok(f) = std::fs::File::open(path) else {
        return vec![];
    };
    let Ok(len) = f.len() else { return vec![] };
    let mut head = vec![0u8; (HEAD_LEN as u64).min(len) as usize];
    if f.read_exact_at(0, &mut head).is_err() {
        return vec![];
    }
    let mut out: HashMap<usize, Vec<Span>> = HashMap::new();
    let format = if onnx::Onnx.detect(&head, len) {
        for (location, mut span) in onnx::external(&f, len).unwrap_or_default() {
            let Some((j, file_len)) = find(&location) else {
                continue;
            };
            if span.len == onnx::TO_END {
                span.len = file_len.saturating_sub(span.offset);
                let word = span.dtype.word_bytes() as u64;
                span.shape = match span.dtype {
                    Dtype::Bytes => vec![],
                    _ => onnx::shape(Some(&span.shape), false, word, span.len),
                };
            }
            out.entry(j).or_default().push(span);
        }
        "onnx-data"
    } else if tfjs::claims(&head, len) {
        for group in tfjs::groups(&f, len).unwrap_or_default() {
            // The shards up to the first not given (the later ones'
            // offsets depend on it) or named twice.
            let mut found: Vec<(usize, u64)> = Vec::new();
            for p in &group.paths {
                match find(p) {
                    Some(f) if !found.iter().any(|g| g.0 == f.0) => found.push(f),
                    _ => break,
                }
            }
            let lens: Vec<u64> = found.iter().map(|f| f.1).collect();
            for ((j, _), spans) in found.iter().zip(tfjs::shard_spans(&group, &lens)) {
                out.entry(*j).or_default().extend(spans);
            }
        }
        "tfjs-shard"
    } else {
        return vec![];
    };
    let mut out: Vec<(usize, Sidecar)> = out
        .into_iter()
        .filter(|(_, spans)| !spans.is_empty())
        .map(|(j, spans)| (j, Sidecar { format, spans }))
        .collect();
    out.sort_by_key(|(j, _)| *j);
    out
}

/// `dir` joined with `name` when `name` is a plain relative path: normal
/// components (and `.`), `/`-separated; `None` otherwise.
fn join(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut out = dir.to_path_buf();
    let mut any = false;
    for c in Path::new(name).components() {
        match c {
            Component::Normal(c) => {
                out.push(c);
                any = true;
            }
            Component::CurDir => {}
            _ => return None,
        }
    }
    any.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_relative_paths() {
        let d = Path::new("/m");
        assert_eq!(join(d, "a.bin"), Some(PathBuf::from("/m/a.bin")));
        assert_eq!(join(d, "./w/a.bin"), Some(PathBuf::from("/m/w/a.bin")));
        for bad in ["", ".", "../a.bin", "w/../../a", "/etc/passwd"] {
            assert_eq!(join(d, bad), None, "{bad}");
        }
    }

    #[test]
    fn a_manifest_describes_only_given_files_in_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::create_dir(p("sub")).unwrap();
        std::fs::write(
            p("model.json"),
            br#"{"weightsManifest":[{"paths":["s1.bin","s2.bin"],
                "weights":[{"name":"a","shape":[3],"dtype":"float32"},
                           {"name":"b","shape":[4],"dtype":"float32"}]},
               {"paths":["../x.bin"],"weights":[{"name":"c","shape":[1],"dtype":"float32"}]}]}"#,
        )
        .unwrap();
        std::fs::write(p("s1.bin"), [0u8; 20]).unwrap();
        std::fs::write(p("s2.bin"), [0u8; 8]).unwrap();
        std::fs::write(p("x.bin"), [0u8; 4]).unwrap();
        std::fs::write(p("sub/model.json"), b"{}").unwrap();

        let all = [p("model.json"), p("s1.bin"), p("s2.bin"), p("x.bin")];
        let s = Sidecars::find(&all);
        assert_eq!(s.len(), 2);
        let s1 = s.get(&p("s1.bin")).unwrap();
        assert_eq!((s1.format(), s1.tensors()), ("tfjs-shard", 2));
        assert_eq!(s.get(&p("s2.bin")).unwrap().spans[0].name, "b#1");

        // Without the first shard, the second cannot be placed.
        let s = Sidecars::find(&[p("model.json"), p("s2.bin")]);
        assert!(s.is_empty());
        // A manifest in another folder names files of its own folder only:
        // not `s1.bin` beside it, not `../x.bin` above it.
        std::fs::write(
            p("sub/model.json"),
            br#"{"weightsManifest":[{"paths":["s1.bin"],"weights":[{"name":"a","shape":[3],"dtype":"float32"}]},
                {"paths":["../x.bin"],"weights":[{"name":"c","shape":[1],"dtype":"float32"}]}]}"#,
        )
        .unwrap();
        let s = Sidecars::find(&[p("s1.bin"), p("x.bin"), p("sub/model.json")]);
        assert!(s.is_empty());
        // A shard named twice is placed once.
        std::fs::write(
            p("twice.json"),
            br#"{"weightsManifest":[{"paths":["s1.bin","s1.bin"],
                "weights":[{"name":"a","shape":[4],"dtype":"float32"},
                           {"name":"b","shape":[4],"dtype":"float32"}]}]}"#,
        )
        .unwrap();
        let s = Sidecars::find(&[p("twice.json"), p("s1.bin")]);
        assert_eq!(s.get(&p("s1.bin")).unwrap().tensors(), 1);
    }

    #[test]
    fn files_known_by_size_are_described_as_files_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(
            p("model.json"),
            br#"{"weightsManifest":[{"paths":["s1.bin","s2.bin"],
                "weights":[{"name":"a","shape":[3],"dtype":"float32"},
                           {"name":"b","shape":[4],"dtype":"float32"}]}]}"#,
        )
        .unwrap();
        std::fs::write(p("s1.bin"), [0u8; 20]).unwrap();
        std::fs::write(p("s2.bin"), [0u8; 8]).unwrap();
        let on_disk = Sidecars::find(&[p("model.json"), p("s1.bin"), p("s2.bin")]);
        // A worker holding only the manifest and the second shard: the
        // first is known by its size, in a folder that need not exist.
        std::fs::remove_file(p("s1.bin")).unwrap();
        let sized = [(p("model.json"), 0), (p("s1.bin"), 20), (p("s2.bin"), 8)];
        let s = Sidecars::find_with(&[p("model.json")], &sized);
        assert_eq!(s.get(&p("s2.bin")), on_disk.get(&p("s2.bin")));
        assert_eq!(s.get(&p("s1.bin")), on_disk.get(&p("s1.bin")));
        // Only the describers given are read: none, nothing described.
        assert!(Sidecars::find_with::<PathBuf>(&[], &sized).is_empty());
        let elsewhere = [(p("gone/s1.bin"), 20)];
        assert!(Sidecars::find_with(&[p("model.json")], &elsewhere).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn shards_linked_into_a_snapshot_are_described() {
        // The Hugging Face cache: snapshots/REV/NAME -> ../../blobs/HASH.
        let dir = tempfile::tempdir().unwrap();
        let (blobs, snap) = (dir.path().join("blobs"), dir.path().join("snap"));
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(
            blobs.join("h1"),
            br#"{"weightsManifest":[{"paths":["w.bin"],"weights":[{"name":"a","shape":[2],"dtype":"float32"}]}]}"#,
        )
        .unwrap();
        std::fs::write(blobs.join("h2"), [0u8; 8]).unwrap();
        std::os::unix::fs::symlink(blobs.join("h1"), snap.join("model.json")).unwrap();
        std::os::unix::fs::symlink(blobs.join("h2"), snap.join("w.bin")).unwrap();
        let s = Sidecars::find(&[snap.join("model.json"), snap.join("w.bin")]);
        assert_eq!(s.get(&snap.join("w.bin")).map(|s| s.tensors()), Some(1));
    }
}
