//! A mirror at scale: a plan of work units, many workers each taking its
//! share, and one commit.
//!
//! The destination Hub is the only store the machines share. The plan
//! step learns each repo's prior (from the same files a one-machine
//! `mirror` learns from, see `learning_set`) and puts it on the plan's
//! work branch of the mirror ([`MirrorPlan::work_branch`]); each worker
//! commits each unit's archives and its result there as it proves them
//! (LFS objects are content-addressed: a unit sent twice costs nothing);
//! the commit step checks every result, makes the mirror's `main` from
//! them, with the same files and bytes a one-machine `mirror` of the same
//! sources makes, and deletes the work branch. Each plan has its own
//! branch, so two plans never mix and deleting one loses no other's work.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::cache::write_atomic;
use crate::client::{Expect, HubClient, RepoFile, UploadFile};
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, hash_file};
use crate::manifest::{Encoding, FileEntry};
use crate::paths::{check_repo_id, check_repo_path, check_revision};

use super::archive::{Coding, store};
use super::download::fetch_manifest;
use super::mirror::{
    Plan, PriorText, Sent, Work, check_destination, download_sources, own_files, plan, prior,
    sidecars, source_hashes, upload,
};
use super::options::MirrorOptions;
use super::plan::{check_plan, is_describer, learning_set, plan_names};
use super::report::MirrorReport;
use super::work::lock_work;
use super::{blocking, safe_name};

/// The plan file's version.
pub const PLAN_VERSION: u32 = 1;

/// The start of the name of the branch of a mirror repo a plan's runs
/// work on (`brevis-work-<plan id>`, see [`MirrorPlan::work_branch`]).
pub const WORK_BRANCH_PREFIX: &str = "brevis-work-";

/// The folder of the work branch each plan's files are under.
const WORK_PREFIX: &str = "brevis.work";

/// Largest plan file read.
const MAX_PLAN_BYTES: u64 = 256 << 20;

/// Largest file read back from a work branch (a unit's result, a prior).
const MAX_WORK_FILE_BYTES: u64 = 64 << 20;

/// Largest worker's marker read back.
const MAX_MARKER_BYTES: u64 = 64 << 10;

/// Source repos planned at once.
const PLAN_REPOS_AT_ONCE: usize = 3;

/// How long a worker keeps trying a commit while other workers' commits
/// keep moving the work branch under it (each commit on a branch waits
/// for the one before: 64 workers beginning at once queue up).
const COMMIT_PATIENCE: Duration = Duration::from_secs(600);

/// Longest wait between two tries of a commit.
const COMMIT_MAX_WAIT: Duration = Duration::from_secs(5);

/// A mirror of one or many source repos, cut into units of work.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MirrorPlan {
    /// [`PLAN_VERSION`].
    pub plan_version: u32,
    /// The tool that made it.
    pub tool: String,
    /// The plan's id: a hash of everything below (the same sources at the
    /// same commits, options and priors give the same id, and their work
    /// is found again).
    pub id: String,
    /// Codec level of every archive.
    pub level: u8,
    /// Codec search budget, where one was given.
    pub budget: Option<u32>,
    /// The repos.
    pub repos: Vec<PlannedRepo>,
    /// The units, each of one repo.
    pub units: Vec<Unit>,
}

/// One source repo of a plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlannedRepo {
    /// Source repo id.
    pub source: String,
    /// Source revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// The mirror repo.
    pub dest: String,
    /// Replace a destination that is not this source's mirror.
    pub force: bool,
    /// Its files, as `mirror` would store them.
    pub files: Vec<PlannedFile>,
    /// SHA-256 of the prior on the work branch, if there is one.
    pub prior_sha256: Option<String>,
    /// The destination already mirrors this commit: nothing to do.
    pub up_to_date: bool,
    /// The source commit the destination mirrored when the plan was made
    /// (none: no mirror yet). A commit step finding another there leaves
    /// it alone: a newer mirror is not rolled back by an older plan.
    #[serde(default)]
    pub dest_was: Option<String>,
}

/// One source file of a planned repo.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlannedFile {
    /// Path in the source.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Git blob id.
    pub oid: String,
    /// LFS SHA-256, for LFS files.
    pub lfs_sha256: Option<String>,
    /// Path in the mirror.
    pub archive: String,
    /// How it is stored (compressed files are the units' work).
    pub encoding: Encoding,
}

impl PlannedFile {
    /// The source file as a tree listing gives it.
    fn repo_file(&self) -> RepoFile {
        RepoFile {
            path: self.path.clone(),
            size: self.size,
            oid: self.oid.clone(),
            lfs_sha256: self.lfs_sha256.clone(),
        }
    }
}

/// One unit of work: compressed files of one repo.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Unit {
    /// Index of its repo in the plan.
    pub repo: usize,
    /// Indices of its files in the repo's files.
    pub files: Vec<usize>,
    /// Their bytes.
    pub bytes: u64,
}

impl MirrorPlan {
    /// Read and check a plan file: every id, path and index in it is
    /// checked (a plan is input like any other), and its id must be the
    /// hash of what it holds.
    pub fn read(path: &Path) -> Result<MirrorPlan> {
        let name = path.display().to_string();
        let name = name.as_str();
        let len = std::fs::metadata(path)
            .map_err(|e| HubError::io(path, e))?
            .len();
        if len > MAX_PLAN_BYTES {
            return Err(HubError::invalid(
                "plan",
                name,
                format!("is {len} bytes, more than {MAX_PLAN_BYTES}"),
            ));
        }
        let text = std::fs::read(path).map_err(|e| HubError::io(path, e))?;
        let p: MirrorPlan = serde_json::from_slice(&text)
            .map_err(|e| HubError::invalid("plan", name, format!("{e}")))?;
        p.check()
            .map_err(|why| HubError::invalid("plan", name, why))?;
        Ok(p)
    }

    /// Write the plan to `path` (atomically).
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_vec_pretty(self)
            .map_err(|e| HubError::io(path, std::io::Error::other(e)))?;
        text.push(b'\n');
        write_atomic(path, &text)
    }

    /// What is wrong with the plan, if anything.
    fn check(&self) -> std::result::Result<(), String> {
        if self.plan_version != PLAN_VERSION {
            return Err(format!(
                "is version {}; this brevis-hub reads version {PLAN_VERSION}",
                self.plan_version
            ));
        }
        if brevis_core::Level::new(self.level).is_none() {
            return Err(format!("level {} is not 1 to 9", self.level));
        }
        let mut in_unit: Vec<Vec<bool>> = self
            .repos
            .iter()
            .map(|r| vec![false; r.files.len()])
            .collect();
        for r in &self.repos {
            check_repo_id(&r.source).map_err(|e| e.to_string())?;
            check_repo_id(&r.dest).map_err(|e| e.to_string())?;
            check_revision(&r.revision).map_err(|e| e.to_string())?;
            if r.commit.len() != 40 || !r.commit.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "{}: commit {:?} is no commit id",
                    r.source, r.commit
                ));
            }
            if r.dest == r.source {
                return Err(format!("{}: the destination is the source", r.source));
            }
            for f in &r.files {
                check_repo_path(&f.path).map_err(|e| e.to_string())?;
                check_repo_path(&f.archive).map_err(|e| e.to_string())?;
            }
            // Each file placed where `mirror` places it, and no two in one
            // place: a plan cannot name the mirror's own files.
            let files: Vec<RepoFile> = r.files.iter().map(PlannedFile::repo_file).collect();
            let names = plan_names(&files);
            if files
                .iter()
                .zip(&names)
                .zip(&r.files)
                .any(|((_, (a, e)), f)| (a.as_str(), *e) != (f.archive.as_str(), f.encoding))
            {
                return Err(format!(
                    "{}: a file is not placed where mirror places it",
                    r.source
                ));
            }
            let mut paths = HashSet::new();
            if !files.iter().all(|f| paths.insert(f.path.as_str())) {
                return Err(format!("{}: a file is listed twice", r.source));
            }
            check_plan(&r.source, &files, &names).map_err(|e| e.to_string())?;
            if let Some(s) = &r.prior_sha256
                && (s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(format!("{}: prior SHA-256 {s:?} is no SHA-256", r.source));
            }
        }
        for (u, unit) in self.units.iter().enumerate() {
            let files = in_unit
                .get_mut(unit.repo)
                .ok_or(format!("unit {u} names repo {}, which it lacks", unit.repo))?;
            let sizes = unit.files.iter().try_fold(0u64, |sum, &i| {
                let size = self.repos[unit.repo].files.get(i)?.size;
                sum.checked_add(size)
            });
            if sizes != Some(unit.bytes) {
                return Err(format!("unit {u}: its bytes are not its files' sizes"));
            }
            for &i in &unit.files {
                let seen = files
                    .get_mut(i)
                    .ok_or(format!("unit {u} names file {i} of a repo that lacks it"))?;
                if std::mem::replace(seen, true) {
                    return Err(format!("file {i} of repo {} is in two units", unit.repo));
                }
            }
        }
        for (r, seen) in self.repos.iter().zip(&in_unit) {
            for (f, seen) in r.files.iter().zip(seen) {
                if !r.up_to_date && (f.encoding == Encoding::Brv) != *seen {
                    return Err(format!(
                        "{} of {} is {} unit",
                        f.path,
                        r.source,
                        if *seen {
                            "stored as it is, yet in a"
                        } else {
                            "compressed, yet in no"
                        }
                    ));
                }
            }
        }
        if self.id != self.content_id() {
            return Err(format!(
                "its id {} is not the hash of its content and this brevis-hub ({}): it was \
                 edited, or made by another version ({}); make the plan again",
                self.id,
                self.content_id(),
                self.tool
            ));
        }
        Ok(())
    }

    /// The hash of what the plan holds (all but its id and tool).
    /// The hash of what the plan holds, with the tool that reads it (all
    /// but its `id` field): what `id` must be. A plan made by another
    /// build of brevis-hub, whose archives could differ, has another id,
    /// and is refused.
    pub fn content_id(&self) -> String {
        let v = serde_json::json!({
            "tool": concat!("brevis-hub ", env!("CARGO_PKG_VERSION")),
            "format_version": brevis_core::FORMAT_VERSION,
            "plan_version": self.plan_version,
            "level": self.level,
            "budget": self.budget,
            "repos": self.repos,
            "units": self.units,
        });
        let d = sha2::Sha256::digest(v.to_string().as_bytes());
        hex::encode(&d[..8])
    }

    /// The source bytes of every unit.
    pub fn unit_bytes(&self) -> u64 {
        self.units
            .iter()
            .fold(0u64, |sum, u| sum.saturating_add(u.bytes))
    }

    /// Each of `n` workers' units: the largest first to the least loaded
    /// worker (by bytes), each share in plan order. Every worker computes
    /// the same shares from the plan and `n`.
    pub fn shares(&self, n: usize) -> Vec<Vec<usize>> {
        // Workers past the number of units have nothing to do: the shares
        // are those of that many workers (the same whatever larger `n`).
        let busy = n.clamp(1, self.units.len().max(1));
        let mut order: Vec<usize> = (0..self.units.len()).collect();
        order.sort_by_key(|&u| (std::cmp::Reverse(self.units[u].bytes), u));
        let mut load = vec![0u64; busy];
        let mut out = vec![Vec::new(); busy];
        for u in order {
            let w = (0..busy).min_by_key(|&w| (load[w], w)).unwrap_or(0);
            load[w] = load[w].saturating_add(self.units[u].bytes);
            out[w].push(u);
        }
        for s in &mut out {
            s.sort_unstable();
        }
        out
    }

    /// Worker `k`'s share of `n` (see [`MirrorPlan::shares`]).
    pub fn share(&self, k: usize, n: usize) -> Vec<usize> {
        self.shares(n).into_iter().nth(k).unwrap_or_default()
    }

    /// The repo of index `r` as a mirror run's plan.
    fn repo_plan(&self, r: usize) -> Plan {
        let repo = &self.repos[r];
        Plan {
            commit: repo.commit.clone(),
            files: repo.files.iter().map(PlannedFile::repo_file).collect(),
            names: repo
                .files
                .iter()
                .map(|f| (f.archive.clone(), f.encoding))
                .collect(),
            dest: repo.dest.clone(),
        }
    }

    /// `base` set to run the repo of index `r` as this plan says.
    fn repo_opts(&self, base: &MirrorOptions, r: usize) -> MirrorOptions {
        let repo = &self.repos[r];
        let mut o = base.clone();
        o.src = repo.source.clone();
        o.dest = Some(repo.dest.clone());
        o.revision = repo.revision.clone();
        o.force = repo.force || base.force;
        o.level = brevis_core::Level::new(self.level).unwrap_or_default();
        o.budget = self.budget;
        o
    }

    /// The branch of each mirror repo this plan's runs work on; the commit
    /// step deletes it once the mirror is committed.
    pub fn work_branch(&self) -> String {
        format!("{WORK_BRANCH_PREFIX}{}", self.id)
    }

    /// Where on the work branch the plan keeps `what`.
    fn work_path(&self, what: &str) -> String {
        format!("{WORK_PREFIX}/{}/{what}", self.id)
    }
}

/// What a worker records on the work branch for each unit it finished.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UnitResult {
    /// The plan's id.
    plan: String,
    /// The unit.
    unit: usize,
    /// Its files' manifest entries.
    files: Vec<FileEntry>,
    /// SHA-256 of each file's stored form (archive, or the file as it is),
    /// as the worker proved and sent it.
    stored_sha256: Vec<String>,
}

/// What a worker says it is doing (`workers/<k>-of-<n>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Marker {
    /// `k/n`.
    worker: String,
    /// The unit it works on (none: it is done).
    unit: Option<usize>,
    /// Seconds since the Unix epoch when it began the unit.
    since: u64,
}

/// Plan the mirror of `sources` (each at `opts.revision`): resolve each
/// at a commit, list and place its files, check its destination, learn
/// its prior and put it on the destination's work branch, and cut the
/// compressed files into units.
pub async fn make_plan(
    src: &HubClient,
    dst: &HubClient,
    sources: &[String],
    opts: &MirrorOptions,
) -> Result<MirrorPlan> {
    if sources.is_empty() {
        return Err(HubError::invalid("plan", "sources", "no source repo given"));
    }
    if sources.len() > 1 && opts.dest.is_some() {
        return Err(HubError::invalid(
            "plan",
            "--to",
            "names one destination for several sources; leave it out to name each <owner>/<name>-brevis",
        ));
    }
    let mut once = HashSet::new();
    if let Some(s) = sources.iter().find(|s| !once.insert(s.as_str())) {
        return Err(HubError::invalid("plan", s, "is listed twice"));
    }
    // Every source resolved and placed first: two sources with one
    // destination are refused before anything is learned or created.
    let placed: Vec<(MirrorOptions, Plan)> = futures_util::stream::iter(sources)
        .map(|s| async move {
            let mut o = opts.clone();
            o.src = s.to_string();
            let p = plan(src, dst, &o).await?;
            Ok::<_, HubError>((o, p))
        })
        .buffered(PLAN_REPOS_AT_ONCE)
        .try_collect()
        .await?;
    let mut seen = HashSet::new();
    for (o, p) in &placed {
        if !seen.insert(p.dest.as_str()) {
            return Err(HubError::invalid(
                "plan",
                &p.dest,
                format!("is the destination of two sources ({} among them)", o.src),
            ));
        }
    }
    // A few repos at once: one's files download while another's prior is
    // learned.
    let planned: Vec<(PlannedRepo, Option<String>)> = futures_util::stream::iter(placed)
        .map(|(o, p)| plan_repo(dst, src, o, p))
        .buffered(PLAN_REPOS_AT_ONCE)
        .try_collect()
        .await?;
    let (repos, priors): (Vec<PlannedRepo>, Vec<Option<String>>) = planned.into_iter().unzip();
    let units = cut_units(&repos, opts.unit_bytes.max(1));
    let mut plan = MirrorPlan {
        plan_version: PLAN_VERSION,
        tool: concat!("brevis-hub ", env!("CARGO_PKG_VERSION")).into(),
        id: String::new(),
        level: opts.level.get(),
        budget: opts.budget,
        repos,
        units,
    };
    plan.id = plan.content_id();
    // Each destination's work branch, holding its prior.
    for (r, prior) in plan.repos.iter().zip(&priors) {
        if r.up_to_date {
            continue;
        }
        dst.ensure_branch(&r.dest, &plan.work_branch(), "main")
            .await?;
        if let Some(text) = prior {
            let dir = opts.work_dir.join(format!("plan-{}", plan.id));
            let local = dir.join(format!("{}.prior.json", safe_name(&r.dest)));
            write_atomic(&local, text.as_bytes())?;
            let up = UploadFile {
                path_in_repo: plan.work_path("prior.json"),
                hashes: crate::hashing::hash_bytes(text.as_bytes()),
                local,
            };
            let summary = format!("Brevis plan {}: the prior of {}", plan.id, r.source);
            commit_work(dst, &plan, &r.dest, &summary, &[up], opts).await?;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(plan)
}

/// Plan source `o.src`, resolved and placed as `p`: check its destination,
/// and learn its prior (none for a destination already up to date).
async fn plan_repo(
    dst: &HubClient,
    src: &HubClient,
    o: MirrorOptions,
    p: Plan,
) -> Result<(PlannedRepo, Option<String>)> {
    let s = o.src.as_str();
    let work_name = format!("plan-{}-{}", safe_name(s), p.short());
    let _lock = lock_work(&o.work_dir, &work_name, &o.notes).await?;
    let work = Work::new(o.work_dir.join(&work_name))?;
    let up_to_date = check_destination(dst, &o, &p, &work.dir).await?.is_some();
    let dest_was = mirrored_commit(dst, &p.dest, &work).await?;
    let prior_json = if up_to_date {
        None
    } else {
        dst.ensure_writable(&p.dest, o.private).await?;
        learn(src, &o, &p, &work).await?
    };
    if !o.keep_work {
        work.remove();
    }
    let repo = PlannedRepo {
        source: s.to_string(),
        revision: o.revision.clone(),
        commit: p.commit.clone(),
        dest: p.dest.clone(),
        force: o.force,
        files: p
            .files
            .iter()
            .zip(&p.names)
            .map(|(f, (archive, encoding))| PlannedFile {
                path: f.path.clone(),
                size: f.size,
                oid: f.oid.clone(),
                lfs_sha256: f.lfs_sha256.clone(),
                archive: archive.clone(),
                encoding: *encoding,
            })
            .collect(),
        prior_sha256: prior_json
            .as_ref()
            .map(|t| hex::encode(sha2::Sha256::digest(t.as_bytes()))),
        up_to_date,
        dest_was,
    };
    Ok((repo, prior_json))
}

/// The prior of the repo of `p`: `opts.prior`, else learned from the files
/// a one-machine mirror learns from (fetched into `work`, with every
/// describing file).
async fn learn(
    src: &HubClient,
    opts: &MirrorOptions,
    p: &Plan,
    work: &Work,
) -> Result<Option<String>> {
    if opts.prior.is_some() {
        let none = brevis_core::Sidecars::default();
        return Ok(prior(opts, &p.files, &work.src, &none).await?.json);
    }
    let mut need: Vec<usize> = learning_set(&p.files);
    need.extend((0..p.files.len()).filter(|&i| is_describer(&p.files[i])));
    need.sort_unstable();
    need.dedup();
    // A prior learned by an earlier plan of the same files is kept in the
    // work folder (learning is deterministic): a plan of many repos that
    // failed half-way learns only what it had not.
    let key: Vec<(&str, &str, u64)> = need
        .iter()
        .map(|&i| {
            (
                p.files[i].path.as_str(),
                p.files[i].oid.as_str(),
                p.files[i].size,
            )
        })
        .collect();
    let key = serde_json::json!([env!("CARGO_PKG_VERSION"), p.commit, key]).to_string();
    let kept = opts.work_dir.join("priors").join(format!(
        "{}.json",
        hex::encode(&sha2::Sha256::digest(key.as_bytes())[..16])
    ));
    if let Ok(text) = std::fs::read_to_string(&kept)
        && brevis_core::Prior::from_json(&text).is_ok()
    {
        return Ok(Some(text));
    }
    let (checked, _) = download_sources(src, opts, p, work, &need).await?;
    source_hashes(opts, p, work, &need, checked).await?;
    let sc = sidecars(&p.files, &work.src).await?;
    let json = prior(opts, &p.files, &work.src, &sc).await?.json;
    if let Some(text) = &json {
        write_atomic(&kept, text.as_bytes())?;
    }
    Ok(json)
}

/// Each repo's compressed files in units: a file of `unit_bytes` or more
/// alone, smaller ones together in path order up to about that much.
fn cut_units(repos: &[PlannedRepo], unit_bytes: u64) -> Vec<Unit> {
    let mut units = Vec::new();
    for (r, repo) in repos.iter().enumerate() {
        if repo.up_to_date {
            continue;
        }
        let mut files: Vec<usize> = (0..repo.files.len())
            .filter(|&i| repo.files[i].encoding == Encoding::Brv)
            .collect();
        files.sort_by(|&a, &b| repo.files[a].path.cmp(&repo.files[b].path));
        let mut group = Unit {
            repo: r,
            files: Vec::new(),
            bytes: 0,
        };
        for i in files {
            let size = repo.files[i].size;
            if size >= unit_bytes {
                units.push(Unit {
                    repo: r,
                    files: vec![i],
                    bytes: size,
                });
                continue;
            }
            group.files.push(i);
            group.bytes += size;
            if group.bytes >= unit_bytes {
                let next = Unit {
                    repo: r,
                    files: Vec::new(),
                    bytes: 0,
                };
                units.push(std::mem::replace(&mut group, next));
            }
        }
        if !group.files.is_empty() {
            units.push(group);
        }
    }
    units
}

/// Commit `files` to the work branch of `repo`, again while other workers'
/// commits move the branch under this one (412: its parent is no longer
/// the head), after a short random wait.
async fn commit_work(
    dst: &HubClient,
    plan: &MirrorPlan,
    repo: &str,
    summary: &str,
    files: &[UploadFile],
    opts: &MirrorOptions,
) -> Result<u64> {
    let began = std::time::Instant::now();
    let mut tries = 0u32;
    loop {
        match dst
            .upload_files(
                repo,
                &plan.work_branch(),
                summary,
                files,
                &[],
                Arc::new(brevis_core::NoProgress),
            )
            .await
        {
            // 412: another worker's commit moved the branch first. A commit
            // whose answer was lost while the branch moved is reported as a
            // protocol error: sending it again is safe here (its files are
            // this worker's own and content-addressed).
            Err(HubError::Http { status: 412, .. } | HubError::Protocol { what: "commit", .. })
                if began.elapsed() < COMMIT_PATIENCE =>
            {
                tries += 1;
                // Up to 100 ms, 200 ms, 400 ms ... (at most COMMIT_MAX_WAIT),
                // drawn at random so that the workers spread out.
                let cap = (100u64 << tries.min(10)).min(COMMIT_MAX_WAIT.as_millis() as u64);
                let ms = 20 + u64::from(rand_u32()) % cap;
                (opts.notes)(&format!(
                    "{repo}: {} moved under this commit: trying again in {ms} ms",
                    plan.work_branch()
                ));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            r => return r.map(|st| st.lfs_bytes_sent + st.inline_bytes_sent),
        }
    }
}

/// A little randomness for waits (no two workers wait alike).
fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let x = t.subsec_nanos() ^ std::process::id().rotate_left(16);
    x.wrapping_mul(2_654_435_761)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What a worker did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerReport {
    /// `k/n`.
    pub worker: String,
    /// Units of its share.
    pub units: usize,
    /// Of those, found done (by an earlier run or another worker).
    pub units_done_before: usize,
    /// Of those, compressed, proven and committed by this run.
    pub units_built: usize,
    /// Source bytes of the units it built.
    pub source_bytes: u64,
    /// Bytes of what it stored for them.
    pub mirror_bytes: u64,
    /// Bytes downloaded.
    pub downloaded_bytes: u64,
    /// Bytes uploaded (archives, results, its markers).
    pub uploaded_bytes: u64,
}

/// Run worker `k` of `n` of `plan`: each unit of its share that the work
/// branch does not hold yet is downloaded, compressed with the repo's
/// prior, proven, and committed to the work branch with its result.
pub async fn run_worker(
    src: &HubClient,
    dst: &HubClient,
    plan: &MirrorPlan,
    k: usize,
    n: usize,
    opts: &MirrorOptions,
) -> Result<WorkerReport> {
    if n == 0 || k >= n {
        return Err(HubError::invalid(
            "worker",
            &format!("{k}/{n}"),
            "is not a worker K/N with K < N",
        ));
    }
    let share = plan.share(k, n);
    let mut report = WorkerReport {
        worker: format!("{k}/{n}"),
        units: share.len(),
        ..WorkerReport::default()
    };
    let mut by_repo: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for u in share {
        by_repo.entry(plan.units[u].repo).or_default().push(u);
    }
    'repos: for (r, units) in by_repo {
        let o = plan.repo_opts(opts, r);
        let p = plan.repo_plan(r);
        let work_name = format!("worker-{}-{}-{k}of{n}", plan.id, r);
        let _lock = lock_work(&o.work_dir, &work_name, &o.notes).await?;
        let work = Work::new(o.work_dir.join(&work_name))?;
        let tree = work_tree(dst, plan, &p.dest).await?;
        if tree.at.is_empty() {
            // No work branch: the commit step made the mirror and deleted
            // it, or the plan step never made it.
            if committed(dst, &o, &p, &work).await? {
                report.units_done_before += units.len();
                continue;
            }
            return Err(HubError::invalid(
                "plan",
                &plan.id,
                format!(
                    "{} has no work branch {}: make the plan again",
                    p.dest,
                    plan.work_branch()
                ),
            ));
        }
        let done = done_in(&tree, &plan.work_path("units/"));
        let todo: Vec<usize> = units
            .iter()
            .copied()
            .filter(|u| !done.contains(u))
            .collect();
        report.units_done_before += units.len() - todo.len();
        if todo.is_empty() {
            (o.notes)(&format!(
                "{}: the {} unit(s) of worker {k}/{n} are done",
                p.dest,
                units.len()
            ));
            work.remove();
            continue;
        }
        let prior_json = read_prior(dst, plan, r, &work).await?;
        let describers: Vec<usize> = (0..p.files.len())
            .filter(|&i| is_describer(&p.files[i]))
            .collect();
        let (checked, got) = download_sources(src, &o, &p, &work, &describers).await?;
        report.downloaded_bytes += got;
        source_hashes(&o, &p, &work, &describers, checked).await?;
        let coding = Coding {
            prior: PriorText::parse(prior_json)?.prior,
            sidecars: sidecars(&p.files, &work.src).await?,
        };
        std::fs::create_dir_all(&work.out).map_err(|e| HubError::io(&work.out, e))?;
        let marker = |unit: Option<usize>| -> Result<UploadFile> {
            let m = Marker {
                worker: format!("{k}/{n}"),
                unit,
                since: now_secs(),
            };
            let text = serde_json::to_vec(&m).unwrap_or_default();
            let local = work.dir.join("marker.json");
            write_atomic(&local, &text)?;
            Ok(UploadFile {
                path_in_repo: plan.work_path(&format!("workers/{k}-of-{n}.json")),
                local,
                hashes: crate::hashing::hash_bytes(&text),
            })
        };
        let summary = format!("Brevis plan {}: worker {k}/{n} begins", plan.id);
        match commit_work(dst, plan, &p.dest, &summary, &[marker(Some(todo[0]))?], &o).await {
            Ok(b) => report.uploaded_bytes += b,
            Err(e) => {
                committed_meanwhile(e, dst, &o, &p, &work).await?;
                continue 'repos;
            }
        }
        for (t, &u) in todo.iter().enumerate() {
            let unit = &plan.units[u];
            (o.notes)(&format!(
                "unit {u} ({} file(s), {} bytes) of {}",
                unit.files.len(),
                unit.bytes,
                o.src
            ));
            let (checked, got) = download_sources(src, &o, &p, &work, &unit.files).await?;
            report.downloaded_bytes += got;
            let hashes = source_hashes(&o, &p, &work, &unit.files, checked).await?;
            let mut entries = Vec::new();
            let mut uploads = Vec::new();
            let mut stored_sha256 = Vec::new();
            for (&i, h) in unit.files.iter().zip(&hashes) {
                let (archive, enc) = &p.names[i];
                let (entry, mut up) =
                    store(&o, &coding, &work, &p.files[i], archive, *enc, h).await?;
                up.path_in_repo = plan.work_path(&format!("out/{}", entry.archive));
                stored_sha256.push(up.hashes.sha256_hex());
                report.mirror_bytes += entry.archive_size;
                entries.push(entry);
                uploads.push(up);
            }
            let result = UnitResult {
                plan: plan.id.clone(),
                unit: u,
                files: entries,
                stored_sha256,
            };
            let text = serde_json::to_vec_pretty(&result).unwrap_or_default();
            let local = work.dir.join(format!("unit-{u}.json"));
            write_atomic(&local, &text)?;
            uploads.push(UploadFile {
                path_in_repo: plan.work_path(&format!("units/{u}.json")),
                local,
                hashes: crate::hashing::hash_bytes(&text),
            });
            uploads.push(marker(todo.get(t + 1).copied())?);
            let summary = format!("Brevis plan {}: unit {u} of {}", plan.id, o.src);
            match commit_work(dst, plan, &p.dest, &summary, &uploads, &o).await {
                Ok(b) => report.uploaded_bytes += b,
                Err(e) => {
                    committed_meanwhile(e, dst, &o, &p, &work).await?;
                    continue 'repos;
                }
            }
            (o.notes)(&format!("unit {u} done"));
            report.units_built += 1;
            report.source_bytes += unit.bytes;
            // Its downloads and archives are on the Hub now: the disk a
            // worker needs is one unit's.
            for &i in &unit.files {
                if !is_describer(&p.files[i]) {
                    let _ = std::fs::remove_file(work.src.join(&p.files[i].path));
                }
                let _ = std::fs::remove_file(work.out.join(&p.names[i].0));
            }
        }
        if !o.keep_work {
            work.remove();
        }
    }
    Ok(report)
}

/// `e`, unless it says the work branch is gone because the commit step
/// made the mirror meanwhile (from other workers' results): then this
/// worker's repo is done.
async fn committed_meanwhile(
    e: HubError,
    dst: &HubClient,
    o: &MirrorOptions,
    p: &Plan,
    work: &Work,
) -> Result<()> {
    if matches!(e, HubError::RevisionNotFound { .. }) && committed(dst, o, p, work).await? {
        return Ok(());
    }
    Err(e)
}

/// Whether the mirror of `p` is committed (then this worker's work folder
/// goes: nothing is left to do for the repo).
async fn committed(dst: &HubClient, o: &MirrorOptions, p: &Plan, work: &Work) -> Result<bool> {
    if check_destination(dst, o, p, &work.dir).await?.is_none() {
        return Ok(false);
    }
    (o.notes)(&format!(
        "{}: the mirror is committed: nothing left to do",
        p.dest
    ));
    work.remove();
    Ok(true)
}

/// The units whose results `tree` holds under `prefix` (`<prefix><u>.json`,
/// `u` written as a plain number: `05.json` names no unit).
fn done_in(tree: &WorkTree, prefix: &str) -> HashSet<usize> {
    tree.files
        .iter()
        .filter_map(|f| {
            let stem = f.path.strip_prefix(prefix)?.strip_suffix(".json")?;
            let u: usize = stem.parse().ok()?;
            (u.to_string() == stem).then_some(u)
        })
        .collect()
}

/// The files of the work branch of `dest` (none when it does not exist).
async fn work_tree(dst: &HubClient, plan: &MirrorPlan, dest: &str) -> Result<WorkTree> {
    let at = match dst.repo_info(dest, &plan.work_branch()).await {
        Ok(i) => i.sha,
        Err(HubError::RevisionNotFound { .. } | HubError::RepoNotFound { .. }) => {
            return Ok(WorkTree {
                at: String::new(),
                files: Vec::new(),
            });
        }
        Err(e) => return Err(e),
    };
    let files = dst.list_files(dest, &at).await?;
    Ok(WorkTree { at, files })
}

/// The work branch of a mirror at one commit: what is read from it is read
/// at that commit, whatever workers commit meanwhile.
struct WorkTree {
    /// The commit (empty: no work branch).
    at: String,
    /// Its files.
    files: Vec<RepoFile>,
}

/// The source commit the mirror `dest` holds on `main` (none: no repo, or
/// no Brevis manifest there).
async fn mirrored_commit(dst: &HubClient, dest: &str, work: &Work) -> Result<Option<String>> {
    let head = match dst.repo_info(dest, "main").await {
        Ok(i) => i.sha,
        Err(HubError::RepoNotFound { .. } | HubError::RevisionNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let m = fetch_manifest(dst, dest, &head, &work.dir).await?;
    Ok(m.map(|m| m.source.commit))
}

/// Download `f`, a file of the work tree `tree` of `dest`, into `dir`,
/// checked against the listing, and read it; at most `max` bytes.
async fn read_work_file(
    dst: &HubClient,
    dest: &str,
    tree: &WorkTree,
    f: &RepoFile,
    dir: &Path,
    max: u64,
) -> Result<Vec<u8>> {
    if f.size > max {
        return Err(HubError::invalid(
            "work file",
            &f.path,
            format!("is {} bytes, more than {max}", f.size),
        ));
    }
    let local = dir.join("read").join(&f.path);
    dst.download_file(
        dest,
        &tree.at,
        &f.path,
        &local,
        &Expect::of(f),
        &brevis_core::NoProgress,
    )
    .await?;
    let data = std::fs::read(&local).map_err(|e| HubError::io(&local, e))?;
    let _ = std::fs::remove_file(&local);
    Ok(data)
}

/// The prior the plan put on the work branch for repo `r` (checked against
/// the plan's SHA-256), if it has one.
async fn read_prior(
    dst: &HubClient,
    plan: &MirrorPlan,
    r: usize,
    work: &Work,
) -> Result<Option<String>> {
    let repo = &plan.repos[r];
    let Some(want) = &repo.prior_sha256 else {
        return Ok(None);
    };
    let path = plan.work_path("prior.json");
    let tree = work_tree(dst, plan, &repo.dest).await?;
    let f = tree
        .files
        .iter()
        .find(|f| f.path == path)
        .ok_or_else(|| HubError::EntryNotFound {
            repo: format!("{}@{}", repo.dest, plan.work_branch()),
            file: path.clone(),
        })?;
    let data = read_work_file(dst, &repo.dest, &tree, f, &work.dir, MAX_WORK_FILE_BYTES).await?;
    let got = hex::encode(sha2::Sha256::digest(&data));
    if &got != want {
        return Err(HubError::Integrity {
            repo: repo.dest.clone(),
            file: path,
            what: "SHA-256",
            expected: want.clone(),
            actual: got,
        });
    }
    String::from_utf8(data)
        .map(Some)
        .map_err(|_| HubError::invalid("prior", &repo.dest, "is not UTF-8"))
}

/// Make each planned mirror's commit on `main` from its units' results:
/// every unit must be done and its files on the work branch. Files stored
/// as they are (configs, cards) come from the source. A mirror that is
/// already this commit's is left alone.
pub async fn commit_plan(
    src: &HubClient,
    dst: &HubClient,
    plan: &MirrorPlan,
    opts: &MirrorOptions,
) -> Result<Vec<MirrorReport>> {
    // A few mirrors at once; each that can be committed is, whatever
    // becomes of the others.
    let results: Vec<Result<MirrorReport>> = futures_util::stream::iter(0..plan.repos.len())
        .map(|r| commit_repo(src, dst, plan, r, opts))
        .buffered(PLAN_REPOS_AT_ONCE)
        .collect()
        .await;
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for (r, res) in results.into_iter().enumerate() {
        match res {
            Ok(rep) => out.push(rep),
            Err(e) => failed.push((r, e)),
        }
    }
    // Each failure named; the first returned as it is (its kind and hint).
    let n = failed.len();
    for (r, e) in failed.iter().skip(1) {
        (opts.notes)(&format!("{}: not committed: {e}", plan.repos[*r].dest));
    }
    match failed.into_iter().next() {
        None => Ok(out),
        Some((r, e)) => {
            if n > 1 {
                (opts.notes)(&format!(
                    "{n} of the {} mirrors were not committed (the others were); the first, {}:",
                    plan.repos.len(),
                    plan.repos[r].dest
                ));
            }
            Err(e)
        }
    }
}

/// Commit the planned mirror of repo `r` (see [`commit_plan`]).
async fn commit_repo(
    src: &HubClient,
    dst: &HubClient,
    plan: &MirrorPlan,
    r: usize,
    opts: &MirrorOptions,
) -> Result<MirrorReport> {
    let o = plan.repo_opts(opts, r);
    let p = plan.repo_plan(r);
    let work_name = format!("commit-{}-{r}", plan.id);
    let _lock = lock_work(&o.work_dir, &work_name, &o.notes).await?;
    let work = Work::new(o.work_dir.join(&work_name))?;
    let mut report = p.report(&o);
    if let Some(current) = check_destination(dst, &o, &p, &work.dir).await? {
        report.up_to_date = true;
        report.mirror_bytes = current.mirror_bytes;
        report.files = current.files;
        // Committed before (its branch left behind if that run stopped
        // short of deleting it).
        drop_work_branch(dst, plan, &p.dest, &o).await;
        work.remove();
        return Ok(report);
    }
    let now = mirrored_commit(dst, &p.dest, &work).await?;
    if !o.force && now.is_some() && now != plan.repos[r].dest_was {
        return Err(HubError::DestinationTaken {
            dest: p.dest.clone(),
            reason: format!(
                "mirrors {} at commit {} now, not what it held when plan {} was made; \
                 committing would replace that mirror with this plan's (commit {})",
                o.src,
                now.unwrap_or_default(),
                plan.id,
                p.commit
            ),
        });
    }
    let tree = work_tree(dst, plan, &p.dest).await?;
    let at: HashMap<&str, &RepoFile> = tree.files.iter().map(|f| (f.path.as_str(), f)).collect();
    let units: Vec<usize> = (0..plan.units.len())
        .filter(|&u| plan.units[u].repo == r)
        .collect();
    let missing: Vec<String> = units
        .iter()
        .filter(|&&u| !at.contains_key(plan.work_path(&format!("units/{u}.json")).as_str()))
        .map(|u| u.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(HubError::invalid(
            "plan",
            &plan.id,
            format!(
                "{} of the {} unit(s) of {} are not done (unit {}): run their workers \
                 (see --status)",
                missing.len(),
                units.len(),
                o.src,
                missing.join(", ")
            ),
        ));
    }
    let mut entries: Vec<Option<FileEntry>> = vec![None; p.files.len()];
    let mut objects = Vec::new();
    let mut uploads = Vec::new();
    for &u in &units {
        let f = at[plan.work_path(&format!("units/{u}.json")).as_str()];
        let data = read_work_file(dst, &p.dest, &tree, f, &work.dir, MAX_WORK_FILE_BYTES).await?;
        let res: UnitResult = serde_json::from_slice(&data)
            .map_err(|e| HubError::invalid("unit result", &f.path, format!("{e}")))?;
        let files = &plan.units[u].files;
        if res.plan != plan.id
            || res.unit != u
            || res.files.len() != files.len()
            || res.stored_sha256.len() != files.len()
        {
            return Err(HubError::invalid(
                "unit result",
                &f.path,
                "is not the result of this unit",
            ));
        }
        for ((&i, e), sha) in files.iter().zip(res.files).zip(&res.stored_sha256) {
            check_entry(&p.files[i], &p.names[i].0, &e, &f.path)?;
            let stored = plan.work_path(&format!("out/{}", e.archive));
            let Some(s) = at.get(stored.as_str()) else {
                return Err(HubError::EntryNotFound {
                    repo: format!("{}@{}", p.dest, plan.work_branch()),
                    file: stored,
                });
            };
            let up = stored_file(dst, &p.dest, &tree, s, &e, &work).await?;
            // What is published is what the worker proved: the stored
            // file's SHA-256 as its result says, and a file stored as it is
            // is the source's bytes.
            let got = up.hashes.sha256_hex();
            if got != *sha || (e.encoding == Encoding::Identity && got != e.sha256) {
                return Err(HubError::Integrity {
                    repo: format!("{}@{}", p.dest, plan.work_branch()),
                    file: s.path.clone(),
                    what: "SHA-256",
                    expected: if got != *sha {
                        sha.clone()
                    } else {
                        e.sha256.clone()
                    },
                    actual: got,
                });
            }
            if s.lfs_sha256.is_some() {
                objects.push(up);
            } else {
                uploads.push(up);
            }
            entries[i] = Some(e);
        }
    }
    // The files stored as they are, from the source.
    let rest: Vec<usize> = (0..p.files.len())
        .filter(|&i| entries[i].is_none())
        .collect();
    if let Some(&i) = rest.iter().find(|&&i| p.names[i].1 != Encoding::Identity) {
        // A repo that was up to date when planned has no units: its
        // mirror changed since. Compressing here would not be this plan.
        return Err(HubError::invalid(
            "plan",
            &plan.id,
            format!(
                "{} of {} has no unit's result (its mirror {} changed since the plan was made): \
                 make the plan again",
                p.files[i].path, o.src, p.dest
            ),
        ));
    }
    if !rest.is_empty() {
        let (checked, got) = download_sources(src, &o, &p, &work, &rest).await?;
        report.downloaded_bytes = got;
        let hashes = source_hashes(&o, &p, &work, &rest, checked).await?;
        let coding = Coding {
            prior: None,
            sidecars: brevis_core::Sidecars::default(),
        };
        for (&i, h) in rest.iter().zip(&hashes) {
            let (archive, enc) = &p.names[i];
            let (entry, up) = store(&o, &coding, &work, &p.files[i], archive, *enc, h).await?;
            entries[i] = Some(entry);
            uploads.push(up);
        }
    }
    report.files = entries.into_iter().flatten().collect();
    let prior_json = read_prior(dst, plan, r, &work).await?;
    let (own, mirror_bytes) = own_files(src, &o, &p, &report.files, &prior_json, &work)?;
    uploads.extend(own);
    report.mirror_bytes = mirror_bytes;
    upload(
        dst,
        &o,
        &p,
        &objects,
        &uploads,
        &Sent::default(),
        &mut report,
    )
    .await?;
    drop_work_branch(dst, plan, &p.dest, &o).await;
    if !o.keep_work {
        work.remove();
    }
    Ok(report)
}

/// Delete the plan's work branch of the committed mirror `dest`: its units
/// are on `main` now. A branch that cannot be deleted is left, and said.
async fn drop_work_branch(dst: &HubClient, plan: &MirrorPlan, dest: &str, o: &MirrorOptions) {
    let branch = plan.work_branch();
    if let Err(e) = dst.delete_branch(dest, &branch).await {
        (o.notes)(&format!(
            "{dest}: the mirror is committed; its work branch {branch} is left ({e})"
        ));
    }
}

/// Refuse a unit's entry `e` (read from `at`) that is not of the source
/// file `f` stored at `archive` (or as it is, under its own path).
fn check_entry(f: &RepoFile, archive: &str, e: &FileEntry, at: &str) -> Result<()> {
    let same_source = e.path == f.path
        && e.size == f.size
        && e.git_oid == f.oid
        && f.lfs_sha256.as_ref().is_none_or(|s| *s == e.sha256)
        && e.lfs == f.lfs_sha256.is_some();
    let placed = match e.encoding {
        Encoding::Brv => e.archive == archive,
        Encoding::Identity => e.archive == f.path || e.archive == archive,
    };
    if same_source && placed {
        Ok(())
    } else {
        Err(HubError::invalid(
            "unit result",
            at,
            format!("its entry for {} is not of the planned file", f.path),
        ))
    }
}

/// The stored file `s` of the work branch as an upload of `e.archive`: an
/// LFS file by its object (already on the Hub, never read from disk), a
/// regular one downloaded into `work`.
async fn stored_file(
    dst: &HubClient,
    dest: &str,
    tree: &WorkTree,
    s: &RepoFile,
    e: &FileEntry,
    work: &Work,
) -> Result<UploadFile> {
    if s.size != e.archive_size {
        return Err(HubError::invalid(
            "unit result",
            &s.path,
            format!("is {} bytes; its result says {}", s.size, e.archive_size),
        ));
    }
    if let Some(sha) = &s.lfs_sha256 {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(sha, &mut sha256)
            .map_err(|_| HubError::protocol(dest, "tree", format!("LFS oid {sha:?}")))?;
        return Ok(UploadFile {
            path_in_repo: e.archive.clone(),
            local: work.out.join(&e.archive),
            hashes: FileHashes {
                size: s.size,
                sha256,
                git_oid: None,
            },
        });
    }
    let local = work.out.join(&e.archive);
    dst.download_file(
        dest,
        &tree.at,
        &s.path,
        &local,
        &Expect::of(s),
        &brevis_core::NoProgress,
    )
    .await?;
    let l2 = local.clone();
    let hashes = blocking(move || hash_file(&l2, true)).await?;
    Ok(UploadFile {
        path_in_repo: e.archive.clone(),
        local,
        hashes,
    })
}

/// Where a unit stands.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UnitState {
    /// Its result is on the work branch.
    Done,
    /// A worker said it began it (it may have died since).
    InFlight,
    /// Neither.
    Missing,
}

/// One unit's state.
#[derive(Debug, Clone, Serialize)]
pub struct UnitStatus {
    /// The unit.
    pub unit: usize,
    /// Its source repo.
    pub source: String,
    /// Its bytes.
    pub bytes: u64,
    /// Where it stands.
    pub state: UnitState,
    /// The worker on it (`k/n`), when in flight.
    pub worker: Option<String>,
}

/// Where a plan stands, from what the destination Hub holds.
#[derive(Debug, Clone, Serialize)]
pub struct PlanStatus {
    /// The plan's id.
    pub plan: String,
    /// Each unit.
    pub units: Vec<UnitStatus>,
    /// Mirrors whose `main` already is the planned mirror.
    pub committed: Vec<String>,
    /// Mirrors still to commit.
    pub uncommitted: Vec<String>,
}

/// Read where `plan` stands on the destination Hub.
pub async fn plan_status(
    dst: &HubClient,
    plan: &MirrorPlan,
    opts: &MirrorOptions,
) -> Result<PlanStatus> {
    let mut status = PlanStatus {
        plan: plan.id.clone(),
        units: Vec::new(),
        committed: Vec::new(),
        uncommitted: Vec::new(),
    };
    let dir = opts.work_dir.join(format!("status-{}", plan.id));
    for (r, repo) in plan.repos.iter().enumerate() {
        let o = plan.repo_opts(opts, r);
        let p = plan.repo_plan(r);
        let committed = check_destination(dst, &o, &p, &dir).await?.is_some();
        if committed {
            status.committed.push(repo.dest.clone());
        } else {
            status.uncommitted.push(repo.dest.clone());
        }
        let tree = work_tree(dst, plan, &repo.dest).await?;
        let done = done_in(&tree, &plan.work_path("units/"));
        let mut flying: HashMap<usize, String> = HashMap::new();
        let markers = plan.work_path("workers/");
        for f in tree.files.iter().filter(|f| f.path.starts_with(&markers)) {
            let data = read_work_file(dst, &repo.dest, &tree, f, &dir, MAX_MARKER_BYTES).await?;
            if let Ok(m) = serde_json::from_slice::<Marker>(&data)
                && let Some(u) = m.unit
            {
                flying.insert(u, m.worker);
            }
        }
        for (u, unit) in plan.units.iter().enumerate().filter(|(_, x)| x.repo == r) {
            let (state, worker) = if committed || done.contains(&u) {
                (UnitState::Done, None)
            } else if let Some(w) = flying.get(&u) {
                (UnitState::InFlight, Some(w.clone()))
            } else {
                (UnitState::Missing, None)
            };
            status.units.push(UnitStatus {
                unit: u,
                source: repo.source.clone(),
                bytes: unit.bytes,
                state,
                worker,
            });
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(sizes: &[(&str, u64, Encoding)]) -> PlannedRepo {
        PlannedRepo {
            source: "org/m".into(),
            revision: "main".into(),
            commit: "a".repeat(40),
            dest: "org/m-brevis".into(),
            force: false,
            files: sizes
                .iter()
                .map(|(p, n, e)| PlannedFile {
                    path: (*p).into(),
                    size: *n,
                    oid: "b".repeat(40),
                    lfs_sha256: None,
                    archive: format!("{p}.brv"),
                    encoding: *e,
                })
                .collect(),
            prior_sha256: None,
            up_to_date: false,
            dest_was: None,
        }
    }

    #[test]
    fn units_are_shards_or_small_files_together_in_path_order() {
        let b = Encoding::Brv;
        let r = repo(&[
            ("z.safetensors", 500, b),
            ("a.bin", 30, b),
            ("config.json", 10, Encoding::Identity),
            ("b.bin", 30, b),
            ("c.bin", 50, b),
            ("d.bin", 5, b),
        ]);
        let units = cut_units(std::slice::from_ref(&r), 60);
        let files: Vec<Vec<usize>> = units.iter().map(|u| u.files.clone()).collect();
        // a+b reach 60; z is a unit alone; c (50) and d (5) end below 60.
        assert_eq!(files, [vec![1, 3], vec![0], vec![4, 5]]);
        assert_eq!(units.iter().map(|u| u.bytes).sum::<u64>(), 615);
        let done = PlannedRepo {
            up_to_date: true,
            ..r
        };
        assert!(cut_units(&[done], 60).is_empty());
    }

    #[test]
    fn shares_are_balanced_by_bytes_and_cover_every_unit_once() {
        let unit = |bytes| Unit {
            repo: 0,
            files: vec![],
            bytes,
        };
        let plan = MirrorPlan {
            plan_version: PLAN_VERSION,
            tool: String::new(),
            id: String::new(),
            level: 6,
            budget: None,
            repos: vec![],
            units: [9, 1, 1, 1, 5, 4, 8, 2].into_iter().map(unit).collect(),
        };
        let shares = plan.shares(3);
        let load: Vec<u64> = shares
            .iter()
            .map(|s| s.iter().map(|&u| plan.units[u].bytes).sum())
            .collect();
        assert_eq!(load, [11, 10, 10]);
        let mut all: Vec<usize> = shares.concat();
        all.sort_unstable();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        assert!(shares.iter().all(|s| s.is_sorted()));
        // More workers than units: the rest have nothing to do, and a huge
        // N allocates nothing for them.
        assert_eq!(plan.shares(10).len(), 8);
        assert!(plan.share(9, 10).is_empty() && plan.share(7, usize::MAX).len() == 1);
        assert_eq!(plan.shares(1), [(0..8).collect::<Vec<_>>()]);
    }
}
