//! Files in and out of the local commands: what the paths given hold
//! ([`collect`]), where each output goes ([`plan`]), and the checks made
//! on both before any work starts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use brevis_core::Prior;

use crate::progress::Ui;

/// One file found under the paths given.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// The file.
    pub(crate) path: PathBuf,
    /// Its path below the folder argument it was found in (`None`: the
    /// file was named on the command line).
    pub(crate) below: Option<PathBuf>,
    /// Not an archive: a file found in a folder given to `decompress`
    /// ([`Want::Restore`]), copied as it is (compress stores a file so
    /// when its archive would be no smaller).
    pub(crate) copy: bool,
}

/// What [`collect`] found.
#[derive(Default)]
pub(crate) struct Found {
    pub(crate) files: Vec<Input>,
    /// Inputs left out, and why (`X.brv is already a Brevis archive`).
    pub(crate) skipped: Vec<String>,
    /// Whether any argument was a folder.
    pub(crate) any_folder: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Files to compress: `.brv` files are skipped.
    Sources,
    /// Archives: `*.brv` in folders; a file named on the command line
    /// whatever its name.
    Archives,
    /// What `decompress` restores: [`Want::Archives`], and the other files
    /// in folders, to copy as they are ([`Input::copy`]) unless `NAME.brv`
    /// is beside `NAME` (the archive restores it).
    Restore,
}

/// The files under `paths`: files as named, folders walked in name order
/// (hidden entries skipped; symlinks to files followed, symlinks to
/// folders not). Everything taken must be a regular file, and a dangling
/// symlink is an error, all found before anything is written.
pub(crate) fn collect(paths: &[PathBuf], want: Want) -> Result<Found> {
    let mut found = Found::default();
    for p in paths {
        let meta = stat(p)?;
        if meta.is_dir() {
            found.any_folder = true;
            let before = found.files.len();
            let mut archives = 0;
            walk(p, p, want, &mut found, &mut archives)?;
            if want == Want::Restore {
                keep_copies(p, &mut found, before);
            }
            let why = format!("{archives} .brv file(s), already Brevis archives");
            if found.files.len() == before {
                found.skipped.push(format!(
                    "{} holds no {}{}",
                    p.display(),
                    match want {
                        Want::Sources => "files to compress",
                        Want::Archives | Want::Restore => ".brv archives",
                    },
                    if archives > 0 {
                        format!(" (only {why})")
                    } else {
                        String::new()
                    }
                ));
            } else if archives > 0 {
                found.skipped.push(format!("in {}: {why}", p.display()));
            }
        } else {
            check_regular(p, &meta)?;
            if want == Want::Sources && is_brv(p) {
                found
                    .skipped
                    .push(format!("{} is already a Brevis archive", p.display()));
            } else {
                found.files.push(Input {
                    path: p.clone(),
                    below: None,
                    copy: false,
                });
            }
        }
    }
    // One file named twice (`a` and `./a`, a hard link, a folder and a
    // file in it) is taken once: twice would code it twice, or write its
    // output and then refuse to overwrite it half-way.
    let mut seen: std::collections::HashMap<(u64, u64), PathBuf> = Default::default();
    let mut unique = Vec::with_capacity(found.files.len());
    for f in std::mem::take(&mut found.files) {
        use std::os::unix::fs::MetadataExt;
        let m = stat(&f.path)?;
        match seen.entry((m.dev(), m.ino())) {
            std::collections::hash_map::Entry::Occupied(first) => found.skipped.push(format!(
                "{} is {} again",
                f.path.display(),
                first.get().display()
            )),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(f.path.clone());
                unique.push(f);
            }
        }
    }
    found.files = unique;
    Ok(found)
}

fn walk(
    root: &Path,
    dir: &Path,
    want: Want,
    found: &mut Found,
    archives: &mut usize,
) -> Result<()> {
    let listing = || format!("listing {}", dir.display());
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).with_context(listing)? {
        entries.push(e.with_context(listing)?.path());
    }
    entries.sort();
    for e in entries {
        if e.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        let own =
            std::fs::symlink_metadata(&e).with_context(|| format!("reading {}", e.display()))?;
        let meta = if own.file_type().is_symlink() {
            let m = stat(&e)?;
            if m.is_dir() {
                // Not followed: a link to a parent would loop, and a link
                // elsewhere would pull in files from outside the folder.
                found.skipped.push(format!(
                    "{} is a symlink to a folder (not followed)",
                    e.display()
                ));
                continue;
            }
            m
        } else {
            own
        };
        if meta.is_dir() {
            walk(root, &e, want, found, archives)?;
            continue;
        }
        match want {
            Want::Sources if is_brv(&e) => {
                *archives += 1;
                continue;
            }
            Want::Archives if !is_brv(&e) => continue,
            _ => {}
        }
        check_regular(&e, &meta)?;
        let below = e.strip_prefix(root).map(Path::to_path_buf).ok();
        let copy = want == Want::Restore && !is_brv(&e);
        found.files.push(Input {
            path: e,
            below,
            copy,
        });
    }
    Ok(())
}

/// Of the files [`walk`] found in `folder` (`found.files[from..]`), drop
/// the copies with their own `NAME.brv` beside them (both would restore to
/// `NAME`; the archive is the one asked for, and compress without `-o`
/// leaves the input beside its archive). A folder of small files may hold
/// no archive at all: its files are copied all the same.
fn keep_copies(folder: &Path, found: &mut Found, from: usize) {
    let archives: std::collections::HashSet<PathBuf> = found.files[from..]
        .iter()
        .filter(|i| !i.copy)
        .map(|i| i.path.clone())
        .collect();
    let with_archive = |i: &Input| {
        let mut a = i.path.clone().into_os_string();
        a.push(".brv");
        archives.contains(Path::new(&a))
    };
    let before = found.files.len();
    let mut kept = found.files.split_off(from);
    kept.retain(|i| !i.copy || !with_archive(i));
    found.files.extend(kept);
    let dropped = before - found.files.len();
    if dropped > 0 {
        found.skipped.push(format!(
            "in {}: {dropped} file(s) with their own .brv archive beside them (the archive restores them)",
            folder.display()
        ));
    }
}

/// `metadata` (following symlinks), with errors that say what is wrong.
pub(crate) fn stat(p: &Path) -> Result<std::fs::Metadata> {
    let e = match std::fs::metadata(p) {
        Ok(m) => return Ok(m),
        Err(e) => e,
    };
    if e.kind() == std::io::ErrorKind::NotFound {
        if let Ok(target) = std::fs::read_link(p) {
            bail!(
                "{}: dangling symlink (its target {} does not exist)",
                p.display(),
                target.display()
            );
        }
        bail!("{}: no such file or folder", p.display());
    }
    Err(anyhow::Error::new(e).context(p.display().to_string()))
}

/// Only regular files are read: the codec reads a file by position up to
/// the length `stat` gives, which a pipe or a device does not have, and
/// which a /proc or /sys file gets wrong (an archive of an empty file).
pub(crate) fn check_regular(p: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::io::Read as _;
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if !meta.is_file() {
        let what = if t.is_dir() {
            "a folder"
        } else if t.is_fifo() {
            "a pipe"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        bail!(
            "{} is not a regular file ({what}); only regular files can be read (save it to a file first)",
            p.display()
        );
    }
    if meta.len() == 0 {
        let mut one = [0u8; 1];
        let n = std::fs::File::open(p)
            .and_then(|mut f| f.read(&mut one))
            .with_context(|| format!("reading {}", p.display()))?;
        if n > 0 {
            bail!(
                "{} is not a regular file: its size says 0 bytes but it has content (a /proc or /sys file?); save it to a file first",
                p.display()
            );
        }
    }
    Ok(())
}

pub(crate) fn is_brv(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "brv")
}

/// Most files of a folder looked at for a describing file beside an input.
const MAX_SIBLINGS: usize = 4096;

/// The descriptions of the inputs that other files describe (TF.js
/// shards, ONNX external data), found among the inputs and the files
/// beside them: a shard compressed without its `model.json` on the
/// command line still finds it in its folder (and the shards before it).
/// A folder of more than [`MAX_SIBLINGS`] files is not looked through.
pub(crate) fn sidecars(inputs: &[&Path]) -> brevis_core::Sidecars {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    let mut seen: std::collections::HashSet<PathBuf> =
        inputs.iter().filter_map(|p| canon(p)).collect();
    let mut all: Vec<PathBuf> = inputs.iter().map(|p| p.to_path_buf()).collect();
    let mut folders: Vec<PathBuf> = inputs
        .iter()
        .map(|p| match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect();
    folders.sort();
    folders.dedup();
    for dir in folders {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let beside: Vec<PathBuf> = entries
            .take(MAX_SIBLINGS + 1)
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        if beside.len() > MAX_SIBLINGS {
            continue;
        }
        for p in beside {
            let hidden = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if !hidden && p.is_file() && canon(&p).is_some_and(|c| seen.insert(c)) {
                all.push(p);
            }
        }
    }
    brevis_core::Sidecars::find(&all)
}

/// `p`'s file name as the file system has it (not necessarily UTF-8: an
/// output is named after its input byte for byte).
pub(crate) fn file_name(p: &Path) -> Result<OsString> {
    Ok(p.file_name()
        .with_context(|| format!("{}: no file name", p.display()))?
        .to_owned())
}

/// Where each output goes: beside its input (no `-o`); into the folder
/// `-o` when several inputs are given, a folder is among them, `-o` is a
/// folder or ends in `/` (a file found in a folder keeps its path below
/// it); else the file `-o`.
///
/// The folder `-o` and the subfolders below it are created when the
/// outputs are written ([`make_parents`]); a missing folder in front of a
/// file `-o` is an error.
fn plan(
    inputs: &[Input],
    output: Option<&Path>,
    any_folder: bool,
    name: impl Fn(&Input) -> Result<OsString>,
) -> Result<Plan> {
    let Some(o) = output else {
        let outs = inputs
            .iter()
            .map(|i| Ok(i.path.with_file_name(name(i)?)))
            .collect::<Result<_>>()?;
        return Ok(Plan { outs, folder: None });
    };
    let into_folder = any_folder
        || inputs.len() > 1
        || o.is_dir()
        || o.as_os_str().to_string_lossy().ends_with('/');
    if !into_folder {
        return Ok(Plan {
            outs: vec![o.to_path_buf()],
            folder: None,
        });
    }
    if std::fs::symlink_metadata(o).is_ok() && !o.is_dir() {
        bail!(
            "{}: -o must be a folder here (a folder or several inputs were given), but it is not",
            o.display()
        );
    }
    let outs = inputs
        .iter()
        .map(|i| {
            let n = name(i)?;
            Ok(match i.below.as_deref().and_then(Path::parent) {
                Some(sub) => o.join(sub).join(n),
                None => o.join(n),
            })
        })
        .collect::<Result<_>>()?;
    Ok(Plan {
        outs,
        folder: Some(o.to_path_buf()),
    })
}

/// Drop the copies ([`Input::copy`]) whose output is the file itself
/// (decompress with no `-o`, or `-o` the folder given): already in place.
fn drop_in_place(inputs: &mut Vec<Input>, outs: &mut Vec<PathBuf>) {
    let pairs: Vec<(Input, PathBuf)> = std::mem::take(inputs)
        .into_iter()
        .zip(std::mem::take(outs))
        .filter(|(i, o)| !(i.copy && input_at(o, std::slice::from_ref(i)).is_some()))
        .collect();
    (*inputs, *outs) = pairs.into_iter().unzip();
}

/// Where the outputs go.
pub(crate) struct Plan {
    /// One per input.
    pub(crate) outs: Vec<PathBuf>,
    /// The `-o` folder they are in, if they are.
    pub(crate) folder: Option<PathBuf>,
}

/// The input that `o` is (same device and inode), if any.
pub(crate) fn input_at<'a>(o: &Path, inputs: &'a [Input]) -> Option<&'a Path> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(o).ok()?;
    inputs
        .iter()
        .map(|i| i.path.as_path())
        .find(|i| std::fs::metadata(i).is_ok_and(|im| im.dev() == m.dev() && im.ino() == m.ino()))
}

/// Refuse an output that is one of the inputs, that exists without
/// `--force`, or that exists and is not a regular file.
pub(crate) fn check_output(o: &Path, inputs: &[Input], force: bool) -> Result<()> {
    let Ok(own) = std::fs::symlink_metadata(o) else {
        return Ok(());
    };
    if let Some(i) = input_at(o, inputs) {
        bail!(
            "{} is the same file as the input {}; refusing to write over an input",
            o.display(),
            i.display()
        );
    }
    if !force {
        bail!("{} already exists (use --force to overwrite)", o.display());
    }
    if !own.file_type().is_symlink() && !own.is_file() {
        bail!(
            "{} exists and is not a regular file; refusing to replace it",
            o.display()
        );
    }
    Ok(())
}

/// Every check on the outputs, before anything is written: two inputs
/// sharing an output, then [`check_output`] for each.
fn check_outputs(inputs: &[Input], outs: &[PathBuf], force: bool) -> Result<()> {
    let mut seen: std::collections::HashMap<&Path, &Path> = std::collections::HashMap::new();
    for (o, i) in outs.iter().zip(inputs) {
        if let Some(first) = seen.insert(o, &i.path) {
            bail!(
                "{} and {} would both be written to {}; give them separate -o folders",
                first.display(),
                i.path.display(),
                o.display()
            );
        }
    }
    for o in outs {
        check_output(o, inputs, force)?;
    }
    Ok(())
}

/// Refuse an output file whose folder is missing or is no folder, before
/// any work (the folders of a file `-o` are not created: a typo there
/// would otherwise cost a whole run, then fail).
pub(crate) fn check_parent(o: &Path) -> Result<()> {
    let Some(parent) = o.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bail!(
            "cannot write {}: {} is not a folder",
            o.display(),
            parent.display()
        ),
        Err(_) => bail!(
            "cannot write {}: the folder {} does not exist (create it first)",
            o.display(),
            parent.display()
        ),
    }
}

/// Refuse an output folder that cannot be created: the nearest of its
/// ancestors that exists must be a folder.
fn check_creatable(folder: &Path) -> Result<()> {
    let Some(existing) = folder
        .ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .find(|a| std::fs::symlink_metadata(a).is_ok())
    else {
        return Ok(());
    };
    if !existing.is_dir() {
        bail!(
            "cannot create the folder {}: {} is not a folder",
            folder.display(),
            existing.display()
        );
    }
    Ok(())
}

/// Create the `-o` folder and the subfolders the outputs go into.
pub(crate) fn make_parents(plan: &Plan) -> Result<()> {
    let Some(folder) = &plan.folder else {
        return Ok(());
    };
    std::fs::create_dir_all(folder).with_context(|| format!("creating {}", folder.display()))?;
    for o in &plan.outs {
        if let Some(d) = o.parent().filter(|d| d != folder) {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
    }
    Ok(())
}

/// `e` about `path`, naming it once: the core's errors mostly start with
/// the path already. Else the context is `PATH`, or `DOING PATH`.
pub(crate) fn about<E>(doing: &str, path: &Path, e: E) -> anyhow::Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    let shown = path.display().to_string();
    if e.to_string().contains(&shown) {
        anyhow::Error::new(e)
    } else if doing.is_empty() {
        anyhow::Error::new(e).context(shown)
    } else {
        anyhow::Error::new(e).context(format!("{doing} {shown}"))
    }
}

/// Threads to decode `archive` with: never more than its regions (the
/// unit of work), so `-T 1000` on a small archive starts a few threads.
pub(crate) fn workers_for(archive: &Path, threads: usize) -> usize {
    if threads <= 1 {
        return threads;
    }
    match brevis_core::Archive::open(archive) {
        Ok(a) => {
            let regions: usize = a.segments().iter().map(|s| s.regions.len()).sum();
            threads.min(regions.max(1))
        }
        Err(_) => threads,
    }
}

/// A prior file from `prior learn`.
pub(crate) fn load_prior(path: &Path) -> Result<Prior> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Prior::from_json(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The inputs under `paths` (what was skipped noted) and where each output
/// goes, checked before anything is written ([`check_outputs`]).
pub(crate) fn inputs_and_outputs(
    paths: &[PathBuf],
    want: Want,
    output: Option<&Path>,
    force: bool,
    ui: &Ui,
    name: impl Fn(&Input) -> Result<OsString>,
) -> Result<(Vec<Input>, Plan)> {
    let mut found = collect(paths, want)?;
    if found.files.is_empty() {
        let what = match want {
            Want::Sources => "files to compress",
            Want::Archives | Want::Restore => "archives to decompress",
        };
        bail!("no {what}: {}", found.skipped.join("; "));
    }
    for s in &found.skipped {
        ui.note(format!("skipped: {s}"));
    }
    let mut plan = plan(&found.files, output, found.any_folder, name)?;
    drop_in_place(&mut found.files, &mut plan.outs);
    match &plan.folder {
        Some(folder) => check_creatable(folder)?,
        None => plan.outs.iter().try_for_each(|o| check_parent(o))?,
    }
    check_outputs(&found.files, &plan.outs, force)?;
    Ok((found.files, plan))
}

/// `a` beside `b` ([`brevis_core::ratio`]: 1.0 when `b` is 0).
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    brevis_core::ratio(a, b)
}

/// [`ratio`] for the text output: four decimals, or `n/a` for an empty
/// input (no ratio to speak of; `--json` keeps the number field, 1.0).
pub(crate) fn ratio_text(a: u64, b: u64) -> String {
    if b == 0 {
        "n/a".into()
    } else {
        format!("{:.4}", ratio(a, b))
    }
}

/// The SHA-256 of a file's bytes.
pub(crate) fn sha256_file(p: &Path) -> Result<[u8; 32]> {
    use sha2::Digest;
    let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", p.display()))?;
    Ok(h.finalize().into())
}

/// Bytes read and written a call by [`copy_checked`]: few calls for a big
/// file, and a buffer that stays small beside the codec's.
const COPY_CHUNK: usize = 1 << 20;

/// Copy `src` to `dst` as every output is written (a temp file beside
/// `dst`, `src`'s mode, synced, then published; without `force` an
/// existing `dst` is never replaced), checked first: the SHA-256 of the
/// bytes read, of the temp file read back, and `expected` (the digest an
/// archive recorded of `src`) must agree. Returns the length and SHA-256.
pub(crate) fn copy_checked(
    src: &Path,
    dst: &Path,
    force: bool,
    expected: Option<[u8; 32]>,
) -> Result<(u64, [u8; 32])> {
    use sha2::Digest;
    let tmp = brevis_core::TempFile::beside(dst).map_err(|e| about("writing", dst, e))?;
    tmp.set_mode_from(src);
    let mut from =
        std::fs::File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let mut to = tmp.file().map_err(|e| about("writing", dst, e))?;
    let mut read = sha2::Sha256::new();
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut len = 0u64;
    loop {
        use std::io::{Read as _, Write as _};
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(about("reading", src, e)),
        };
        read.update(&buf[..n]);
        to.write_all(&buf[..n])
            .map_err(|e| about("writing", dst, e))?;
        len += n as u64;
    }
    drop(to);
    let read: [u8; 32] = read.finalize().into();
    let written = sha256_file(tmp.path())?;
    if written != read || expected.is_some_and(|x| x != read) {
        bail!(
            "copying {} to {}: the SHA-256 of the copy does not match (the input changed while it was read?); nothing written",
            src.display(),
            dst.display()
        );
    }
    persist(tmp, dst, force)?;
    Ok((len, read))
}

/// Write `bytes` to `dst` as compress and decompress do: a temp file in
/// its folder (unnamed where the system allows), synced, then published;
/// without `force` an existing `dst` is never replaced.
pub(crate) fn write_atomic(dst: &Path, bytes: &[u8], force: bool) -> Result<()> {
    use std::io::Write as _;
    let tmp = brevis_core::TempFile::beside(dst).map_err(|e| about("writing", dst, e))?;
    tmp.file()
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| about("writing", dst, e))?;
    persist(tmp, dst, force)
}

/// Publish `tmp` as `dst` (without `force`, never over an existing file).
fn persist(tmp: brevis_core::TempFile, dst: &Path, force: bool) -> Result<()> {
    tmp.persist(dst, force).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{} already exists (use --force to overwrite)",
                dst.display()
            )
        } else {
            about("writing", dst, e)
        }
    })
}
