//! Hub flows end to end against the in-process `brevis-hub serve` (issue 4).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_hub::client::Expect;
use brevis_hub::server::{self, ServerOptions, Store};
use brevis_hub::{HubClient, HubError, MirrorOptions, PullOptions, RetryPolicy};
use sha2::Digest;

pub(crate) fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// The small real checkpoint the hub tests mirror.
pub(crate) fn seed_dir() -> PathBuf {
    let d = testdata().join("hub-seed");
    if d.is_dir() {
        d
    } else {
        testdata().join("silero-vad")
    }
}

pub(crate) fn any_addr() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy::default()
        .max_retries(3)
        .base_delay(std::time::Duration::from_millis(10))
}

pub(crate) fn client(url: &str, token: Option<&str>) -> HubClient {
    HubClient::new(url, token.map(String::from))
        .unwrap()
        .with_retry(fast_retry())
}

pub(crate) fn sha_file(p: &Path) -> String {
    hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap()))
}

/// Start a server over `root`, seeding `repo` from `dir` first.
pub(crate) async fn serve(
    root: &Path,
    seeds: &[(&str, &Path)],
    opts: impl FnOnce(ServerOptions) -> ServerOptions,
) -> server::RunningServer {
    let store = Store::open(root).unwrap();
    for (repo, dir) in seeds {
        store.seed(&repo.parse().unwrap(), dir).unwrap();
    }
    server::start(opts(ServerOptions::new(root)), any_addr())
        .await
        .unwrap()
}

/// A server over `root` holding `org/model`, the seed checkpoint.
async fn serve_seed(root: &Path) -> server::RunningServer {
    serve(root, &[("org/model", &seed_dir())], |o| o).await
}

/// A small safetensors file with one f32 tensor of `n` values.
fn write_safetensors(path: &Path, n: usize, seed: u32) {
    let header = format!(
        "{{\"w\":{{\"dtype\":\"F32\",\"shape\":[{n}],\"data_offsets\":[0,{}]}}}}",
        n * 4
    );
    let mut h = header.into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let v = ((x % 2000) as f32 - 1000.0) / 3000.0 + (i % 7) as f32 * 1e-3;
        out.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, out).unwrap();
}

/// Options mirroring `src` into `dest` (work folder under `tmp`) with a
/// uniform prior given: nothing is learned, so no shard is read before the
/// first is compressed.
fn mirror_with_uniform_prior(tmp: &Path, src: &str, dest: &str) -> MirrorOptions {
    let prior = tmp.join("prior.json");
    std::fs::write(&prior, brevis_core::Prior::uniform().to_json()).unwrap();
    let mut opts = MirrorOptions::new(src, tmp.join("work")).dest(dest);
    opts.prior = Some(prior);
    opts
}

/// Every regular file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(
                    p.strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/"),
                );
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_pull_verify_real_model() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = seed_dir();
    // Source and destination on two servers; small tree pages and multipart
    // uploads on purpose.
    let src_srv = serve(&tmp.path().join("src"), &[("org/model", &seed)], |o| {
        o.tree_page_size(3)
    })
    .await;
    let dst_srv = serve(&tmp.path().join("dst"), &[], |o| {
        o.multipart(100_000, 64 * 1024)
    })
    .await;
    let src = client(&src_srv.url(), None);
    let dst = client(&dst_srv.url(), None);

    let opts = MirrorOptions::new("org/model", tmp.path().join("work"));
    let rep = brevis_hub::mirror(&src, &dst, &opts).await.unwrap();
    assert_eq!(rep.dest_repo, "org/model-brevis");
    assert!(!rep.up_to_date);
    assert!(rep.lfs_objects_sent >= 1);
    let want = files_under(&seed);
    let got: Vec<String> = rep.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(got, want);
    assert!(
        rep.files
            .iter()
            .any(|f| f.archive.ends_with(".safetensors.brv"))
    );
    for f in &rep.files {
        assert_eq!(f.sha256, sha_file(&seed.join(&f.path)), "{}", f.path);
    }
    eprintln!(
        "source {} bytes, mirror {} bytes, ratio {:.4}",
        rep.source_bytes,
        rep.mirror_bytes,
        rep.ratio()
    );

    // Mirror tree: archives, manifest, prior, model card; the source README moved aside.
    let tree = dst.list_files("org/model-brevis", "main").await.unwrap();
    let names: Vec<&str> = tree.iter().map(|f| f.path.as_str()).collect();
    for n in ["brevis.manifest.json", "brevis.prior.json", "README.md"] {
        assert!(names.contains(&n), "{n} missing in {names:?}");
    }

    // A second run is a no-op.
    let again = brevis_hub::mirror(&src, &dst, &opts).await.unwrap();
    assert!(again.up_to_date);
    assert_eq!(again.uploaded_bytes, 0);
    assert_eq!(again.downloaded_bytes, 0);

    // Pull into a fresh HF cache under the source's name and commit.
    let cache = tmp.path().join("hf/hub");
    let mut popts = PullOptions::new("org/model-brevis", &cache, tmp.path().join("pullwork"));
    // The source is on the other Hub (on dst it is only the mirror's word).
    popts.source = Some(src.clone());
    let pr = brevis_hub::pull(&dst, &popts).await.unwrap();
    assert!(pr.source_checked);
    let commit = src.repo_info("org/model", "main").await.unwrap().sha;
    assert_eq!(pr.source_commit, commit);
    let repo_dir = cache.join("models--org--model");
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        commit
    );
    for f in &want {
        let p = repo_dir.join("snapshots").join(&commit).join(f);
        assert!(
            std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{f}"
        );
        assert_eq!(sha_file(&p), sha_file(&seed.join(f)), "{f}");
    }
    assert!(
        files_under(&repo_dir)
            .iter()
            .all(|p| !p.ends_with(".incomplete"))
    );

    // Pull again: everything reused, nothing downloaded.
    let pr2 = brevis_hub::pull(&dst, &popts).await.unwrap();
    assert_eq!(pr2.reused, want.len());
    assert_eq!(pr2.downloaded_bytes, 0);

    // --local-dir writes a plain folder.
    let mut lopts = popts.clone();
    lopts.local_dir = Some(tmp.path().join("plain"));
    brevis_hub::pull(&dst, &lopts).await.unwrap();
    assert_eq!(files_under(&tmp.path().join("plain")), want);

    // Remote verify passes.
    let v = verify_main(&dst, "org/model-brevis", &tmp.path().join("vwork"))
        .await
        .unwrap();
    assert!(v.ok, "{v:?}");

    // The destination serves the source repo decoded on the fly.
    let st = tmp.path().join("decoded.safetensors");
    let shard = want.iter().find(|f| f.ends_with(".safetensors")).unwrap();
    let info = dst.repo_info("org/model", "main").await.unwrap();
    assert_eq!(info.sha, commit);
    let meta = dst.file_metadata("org/model", "main", shard).await.unwrap();
    assert_eq!(meta.etag, sha_file(&seed.join(shard)));
    dst.download_file(
        "org/model",
        "main",
        shard,
        &st,
        &Expect {
            sha256: Some(meta.etag.clone()),
            size: Some(meta.size),
            git_oid: None,
        },
        &brevis_core::NoProgress,
    )
    .await
    .unwrap();
    assert_eq!(sha_file(&st), sha_file(&seed.join(shard)));

    // A local mirror folder with one corrupted archive is a mismatch.
    let local = tmp.path().join("localmirror");
    std::fs::create_dir_all(&local).unwrap();
    for f in &tree {
        dst.download_file(
            "org/model-brevis",
            "main",
            &f.path,
            &local.join(&f.path),
            &Expect::default(),
            &brevis_core::NoProgress,
        )
        .await
        .unwrap();
    }
    let ok = brevis_hub::verify_local(&local, 0).unwrap();
    assert!(ok.ok);
    let archive = local.join(format!("{shard}.brv"));
    let mut bytes = std::fs::read(&archive).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&archive, bytes).unwrap();
    let bad = brevis_hub::verify_local(&local, 0).unwrap();
    assert!(!bad.ok);
    assert!(bad.files.iter().any(|f| f.status != "ok"));

    src_srv.shutdown().await;
    dst_srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_resumes_after_dropped_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = seed_dir();
    let srv = serve(&tmp.path().join("store"), &[("org/model", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let files = c.list_files("org/model", "main").await.unwrap();
    let f = files
        .iter()
        .find(|f| f.lfs_sha256.is_some())
        .unwrap()
        .clone();
    assert!(f.size > 150_000);
    let expect = Expect {
        size: Some(f.size),
        sha256: f.lfs_sha256.clone(),
        git_oid: None,
    };
    let get = async |path: &str, dst: &Path, expect: &Expect| {
        c.download_file(
            "org/model",
            "main",
            path,
            dst,
            expect,
            &brevis_core::NoProgress,
        )
        .await
    };

    // The server cuts the first response after 100 000 bytes.
    *srv.faults().cut_downloads.lock().unwrap() = Some((100_000, 1));
    let dst = tmp.path().join("a").join(&f.path);
    let st = get(&f.path, &dst, &expect).await.unwrap();
    assert_eq!(sha_file(&dst), f.lfs_sha256.clone().unwrap());
    // Resumed with Range, not restarted: exactly the file's bytes went over the wire.
    assert_eq!(st.bytes_on_wire, f.size);
    // Hashed as it arrived, across the cut: the file's SHA-256, and no
    // blob id where none was asked for.
    let h = st.hashes.clone().unwrap();
    assert_eq!(
        (h.size, h.sha256_hex(), h.git_oid),
        (f.size, sha_file(&dst), None)
    );

    // Bytes that are not the expected ones, hashed as they arrive, are
    // refused and nothing is left.
    let wrong = tmp.path().join("w").join(&f.path);
    let e = get(
        &f.path,
        &wrong,
        &Expect {
            sha256: Some("0".repeat(64)),
            ..expect.clone()
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            HubError::Integrity {
                what: "SHA-256",
                ..
            }
        ),
        "{e}"
    );
    assert!(!wrong.exists() && !brevis_hub::client::incomplete_path(&wrong).exists());

    // A regular file is checked by its blob id, hashed as it arrives too.
    let r = files.iter().find(|f| f.lfs_sha256.is_none()).unwrap();
    let regular = tmp.path().join("r").join(&r.path);
    let st = get(
        &r.path,
        &regular,
        &Expect {
            size: Some(r.size),
            sha256: None,
            git_oid: Some(r.oid.clone()),
        },
    )
    .await
    .unwrap();
    assert_eq!(st.hashes.unwrap().git_oid.as_deref(), Some(r.oid.as_str()));
    let e = get(
        &r.path,
        &tmp.path().join("r2").join(&r.path),
        &Expect {
            size: Some(r.size),
            sha256: None,
            git_oid: Some("0".repeat(40)),
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            HubError::Integrity {
                what: "git blob id",
                ..
            }
        ),
        "{e}"
    );

    // A partial file left by an earlier run is resumed too.
    let dst2 = tmp.path().join("b").join(&f.path);
    std::fs::create_dir_all(dst2.parent().unwrap()).unwrap();
    let full = std::fs::read(&dst).unwrap();
    std::fs::write(brevis_hub::client::incomplete_path(&dst2), &full[..54_321]).unwrap();
    let st2 = get(&f.path, &dst2, &expect).await.unwrap();
    assert_eq!(st2.resumed_from, 54_321);
    assert_eq!(st2.bytes_on_wire, f.size - 54_321);
    assert_eq!(std::fs::read(&dst2).unwrap(), full);

    // A partial file that is not a prefix fails the hash check and is removed.
    let dst3 = tmp.path().join("c").join(&f.path);
    std::fs::create_dir_all(dst3.parent().unwrap()).unwrap();
    std::fs::write(brevis_hub::client::incomplete_path(&dst3), vec![0u8; 1000]).unwrap();
    let e = get(&f.path, &dst3, &expect).await.unwrap_err();
    assert!(matches!(e, HubError::Integrity { .. }), "{e}");
    assert!(!dst3.exists());
    assert!(!brevis_hub::client::incomplete_path(&dst3).exists());
    srv.shutdown().await;
}

/// Each proven archive's LFS object is sent while the next file is
/// compressed: a mirror that fails on its last shard has already sent the
/// archives before it (uncommitted; a re-run finds them present).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_sends_each_archive_while_the_next_is_compressed() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    for i in 1..=2 {
        write_safetensors(
            &seed.join(format!("model-0000{i}-of-00003.safetensors")),
            4000 + 1000 * i,
            i as u32,
        );
    }
    // The last shard claims to be safetensors, but its header is cut.
    let last = seed.join("model-00003-of-00003.safetensors");
    let mut cut = 64u64.to_le_bytes().to_vec();
    cut.extend_from_slice(b"{\"w\":");
    std::fs::write(&last, &cut).unwrap();
    let root = tmp.path().join("store");
    let srv = serve(&root, &[("org/sharded", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let opts = mirror_with_uniform_prior(tmp.path(), "org/sharded", "me/sharded-brevis");
    let e = brevis_hub::mirror(&c, &c, &opts).await.unwrap_err();
    assert!(e.to_string().contains("model-00003"), "{e}");

    // The two archives proven before it are in the server's store, and in
    // no commit.
    let work = std::fs::read_dir(tmp.path().join("work"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("mirror-")
        })
        .unwrap();
    let store = Store::open(&root).unwrap();
    for i in 1..=2 {
        let a = work
            .join("out")
            .join(format!("model-0000{i}-of-00003.safetensors.brv"));
        let h = brevis_hub::hashing::hash_file(&a, false).unwrap();
        assert!(
            store
                .object_path(&h.sha256_hex().parse().unwrap())
                .is_file(),
            "{}",
            a.display()
        );
    }
    let tree = c.list_files("me/sharded-brevis", "main").await.unwrap();
    assert!(tree.iter().all(|f| !f.path.ends_with(".brv")), "{tree:?}");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_mirror_uploads_only_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    for i in 1..=3 {
        write_safetensors(
            &seed.join(format!("model-0000{i}-of-00003.safetensors")),
            4000 + 1000 * i,
            i as u32,
        );
    }
    std::fs::write(seed.join("config.json"), b"{\"model_type\": \"test\"}\n").unwrap();
    let srv = serve(&tmp.path().join("store"), &[("org/sharded", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let opts = MirrorOptions::new("org/sharded", tmp.path().join("work")).dest("me/sharded-brevis");

    // Only one LFS object gets through: the run fails.
    *srv.faults().lfs_put_budget.lock().unwrap() = Some(1);
    let e = brevis_hub::mirror(&c, &c, &opts).await.unwrap_err();
    eprintln!("interrupted as planned: {e}");
    assert!(c.repo_info("me/sharded-brevis", "main").await.is_ok());

    // The re-run sends only the objects the server lacks.
    *srv.faults().lfs_put_budget.lock().unwrap() = None;
    let rep = brevis_hub::mirror(&c, &c, &opts).await.unwrap();
    assert_eq!(rep.lfs_objects_present, 1, "{rep:?}");
    assert_eq!(rep.lfs_objects_sent, 2, "{rep:?}");
    // The sources downloaded by the first run were kept and reused.
    assert_eq!(rep.downloaded_bytes, 0, "{rep:?}");
    let total_lfs: u64 = c
        .list_files("me/sharded-brevis", "main")
        .await
        .unwrap()
        .iter()
        .filter(|f| f.lfs_sha256.is_some())
        .map(|f| f.size)
        .sum();
    assert!(rep.uploaded_bytes < total_lfs + 10_000);

    // And then it is a no-op.
    let again = brevis_hub::mirror(&c, &c, &opts).await.unwrap();
    assert!(again.up_to_date);
    assert_eq!(again.uploaded_bytes, 0);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = seed_dir();
    let srv = serve(&tmp.path().join("store"), &[("org/model", &seed)], |o| {
        o.token("hf_good").read_token("hf_read")
    })
    .await;
    let bad = client(&srv.url(), Some("hf_wrong_secret"));
    let e = bad.repo_info("org/model", "main").await.unwrap_err();
    assert!(
        matches!(e, HubError::Unauthorized { status: 401, .. }),
        "{e}"
    );
    assert!(!e.to_string().contains("hf_wrong_secret"));

    // A read token reads but may not write.
    let ro = client(&srv.url(), Some("hf_read"));
    assert!(ro.repo_info("org/model", "main").await.is_ok());
    let e = ro.create_repo("org/other", None, false).await.unwrap_err();
    assert!(
        matches!(e, HubError::Unauthorized { status: 403, .. }),
        "{e}"
    );
    // Anonymous writes are refused; the good token writes.
    let anon = client(&srv.url(), None);
    assert!(anon.create_repo("org/other", None, false).await.is_err());
    let good = client(&srv.url(), Some("hf_good"));
    good.create_repo("org/other", None, false).await.unwrap();
    let e = good
        .create_repo("org/other", None, false)
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::RepoExists { .. }), "{e}");

    // The CLI exits 2 with a clear message (when the binary is built).
    if let Some(bin) = cli_binary() {
        let out = cli(&bin, &tmp.path().join("hfhome"))
            .args(["pull", "org/model", "--endpoint", &srv.url(), "--cache-dir"])
            .arg(tmp.path().join("cache"))
            .env("HF_TOKEN", "hf_wrong_secret")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refused the token"), "{err}");
        assert!(!err.contains("hf_wrong_secret"), "{err}");
    }
    srv.shutdown().await;
}

/// The CLI `bin` with HF_HOME `home`, and no token, endpoint, HF cache or
/// work folder taken from the environment of the test run.
pub(crate) fn cli(bin: &Path, home: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env("HF_HOME", home);
    for var in [
        "HF_TOKEN",
        "HF_ENDPOINT",
        "HF_HUB_CACHE",
        "BREVIS_TO_TOKEN",
        "BREVIS_WORK_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// `target/<profile>/brevis-hub` next to this test binary, if it was built.
pub(crate) fn cli_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?;
    let bin = dir.join(format!("brevis-hub{}", std::env::consts::EXE_SUFFIX));
    if bin.is_file() {
        Some(bin)
    } else {
        eprintln!("skipping the CLI check: {} is not built", bin.display());
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_repo_revision_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = seed_dir();
    let srv = serve(&tmp.path().join("store"), &[("org/model", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let e = c.repo_info("org/nope", "main").await.unwrap_err();
    assert!(matches!(e, HubError::RepoNotFound { .. }), "{e}");
    let e = c
        .repo_info("org/model", "no-such-branch")
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::RevisionNotFound { .. }), "{e}");
    let e = c
        .file_metadata("org/model", "main", "nope.bin")
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::EntryNotFound { .. }), "{e}");
    let e = brevis_hub::mirror(
        &c,
        &c,
        &MirrorOptions::new("org/nope", tmp.path().join("w")),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, HubError::RepoNotFound { .. }), "{e}");
    let e = brevis_hub::pull(
        &c,
        &PullOptions::new(
            "org/nope-brevis",
            tmp.path().join("c"),
            tmp.path().join("w"),
        ),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, HubError::RepoNotFound { .. }), "{e}");
    // A repo that is not a mirror.
    let e = brevis_hub::pull(
        &c,
        &PullOptions::new("org/model", tmp.path().join("c"), tmp.path().join("w")),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, HubError::Manifest { .. }), "{e}");
    // Bad repo ids never reach the network.
    assert!(matches!(
        c.repo_info("../etc", "main").await.unwrap_err(),
        HubError::Invalid { .. }
    ));
    if let Some(bin) = cli_binary() {
        let out = cli(&bin, &tmp.path().join("hfhome"))
            .args(["mirror", "org/nope", "--endpoint", &srv.url()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    }
    srv.shutdown().await;
}

/// A server whose tree listing holds hostile paths.
async fn hostile_server(bad_path: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind(any_addr()).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let sha = "a".repeat(40);
                let body = if req.contains("/revision/") {
                    format!(
                        "{{\"id\":\"evil/model\",\"sha\":\"{sha}\",\"siblings\":[{{\"rfilename\":\"{bad_path}\"}}]}}"
                    )
                } else if req.contains("/tree/") {
                    format!(
                        "[{{\"type\":\"file\",\"oid\":\"{}\",\"size\":5,\"path\":\"{bad_path}\"}}]",
                        "b".repeat(40)
                    )
                } else {
                    "hello".to_string()
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-repo-commit: {sha}\r\netag: \"x\"\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_paths_are_refused() {
    for bad in ["../../x", "/tmp/brevis-evil-x", "a/../../x", "a\\\\..\\\\x"] {
        let tmp = tempfile::tempdir().unwrap();
        let url = hostile_server(bad).await;
        let c = client(&url, None);
        let e = c.list_files("evil/model", "main").await.unwrap_err();
        assert!(matches!(e, HubError::Invalid { .. }), "{bad}: {e}");
        let work = tmp.path().join("deep/work");
        let e = brevis_hub::mirror(&c, &c, &MirrorOptions::new("evil/model", &work))
            .await
            .unwrap_err();
        assert!(matches!(e, HubError::Invalid { .. }), "{bad}: {e}");
        // Nothing written outside the work folder (nor inside, beyond folders).
        let outside: Vec<String> = files_under(tmp.path());
        assert!(outside.is_empty(), "{bad}: {outside:?}");
        assert!(!Path::new("/tmp/brevis-evil-x").exists());
        // Downloading such a path directly is refused before any request.
        let e = c
            .download_file(
                "evil/model",
                "main",
                bad,
                &tmp.path().join("f"),
                &Expect::default(),
                &brevis_core::NoProgress,
            )
            .await
            .unwrap_err();
        assert!(matches!(e, HubError::Invalid { .. }), "{bad}: {e}");
    }
    // A manifest naming a path outside the target is refused as a whole.
    let m = serde_json::json!({
        "manifest_version": 1, "tool": "x", "format_version": 1,
        "source": {"repo": "org/m", "revision": "main", "commit": "c".repeat(40)},
        "files": [{"path": "../../etc/x", "size": 1, "sha256": "d".repeat(64), "git_oid": "e".repeat(40),
                   "lfs": false, "encoding": "identity", "archive": "x", "archive_size": 1}]
    });
    let e = brevis_hub::Manifest::from_json(m.to_string().as_bytes(), "t").unwrap_err();
    assert!(matches!(e, HubError::Invalid { .. }), "{e}");
}

/// Mirror the seed checkpoint `org/model` -> `org/model-brevis` on one
/// in-process server; returns the server, a client and the source commit.
/// A server holding `seeds`, and `org/model` mirrored there (work folder
/// `tmp/w`).
async fn mirrored_seeds(tmp: &Path, seeds: &[(&str, &Path)]) -> (server::RunningServer, HubClient) {
    let srv = serve(&tmp.join("store"), seeds, |o| o).await;
    let c = client(&srv.url(), None);
    brevis_hub::mirror(&c, &c, &MirrorOptions::new("org/model", tmp.join("w")))
        .await
        .unwrap();
    (srv, c)
}

async fn mirrored(tmp: &Path) -> (server::RunningServer, HubClient, String) {
    let srv = serve_seed(&tmp.join("store")).await;
    let c = client(&srv.url(), None);
    brevis_hub::mirror(&c, &c, &MirrorOptions::new("org/model", tmp.join("work")))
        .await
        .unwrap();
    let commit = c.repo_info("org/model", "main").await.unwrap().sha;
    (srv, c, commit)
}

/// Remove the source repo `org/model` from the store: `serve` then answers
/// for it decoded from its mirror, so there is no source to check a mirror
/// against, and pull checks it against its manifest alone.
pub(crate) fn forget_source(tmp: &Path) {
    std::fs::remove_dir_all(tmp.join("store/models/org/model")).unwrap();
}

/// Options to pull `org/model-brevis` into the HF cache `cache` (work
/// folder `tmp/pw`).
fn pull_opts(cache: &Path, tmp: &Path) -> PullOptions {
    PullOptions::new("org/model-brevis", cache, tmp.join("pw"))
}

/// Verify mirror `repo` at `main` (work folder `work`, all threads).
async fn verify_main(
    c: &HubClient,
    repo: &str,
    work: &Path,
) -> brevis_hub::Result<brevis_hub::VerifyReport> {
    brevis_hub::verify_mirror(c, repo, "main", work, 0, Arc::new(brevis_core::NoProgress)).await
}

/// `org/model-brevis`'s archive (its path in the repo) and the store
/// object under `store` that holds its bytes.
async fn mirror_archive_object(c: &HubClient, store: &Path) -> (String, PathBuf) {
    let tree = c.list_files("org/model-brevis", "main").await.unwrap();
    let archive = tree
        .iter()
        .find(|f| f.path.ends_with(".safetensors.brv"))
        .unwrap();
    let obj = Store::open(store)
        .unwrap()
        .object_path(&archive.lfs_sha256.as_deref().unwrap().parse().unwrap());
    (archive.path.clone(), obj)
}

/// Replace `org/model-brevis`'s manifest with `edit` applied to it.
async fn tamper_manifest(c: &HubClient, tmp: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    edit_manifest(c, "org/model-brevis", tmp, edit).await
}

/// Replace mirror `repo`'s manifest with `edit` applied to it.
async fn edit_manifest(
    c: &HubClient,
    repo: &str,
    tmp: &Path,
    edit: impl FnOnce(&mut serde_json::Value),
) {
    let p = tmp.join("tampered-manifest.json");
    c.download_file(
        repo,
        "main",
        "brevis.manifest.json",
        &p,
        &Expect::default(),
        &brevis_core::NoProgress,
    )
    .await
    .unwrap();
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    edit(&mut m);
    let bytes = serde_json::to_vec_pretty(&m).unwrap();
    commit_file(c, repo, "main", "brevis.manifest.json", &bytes, tmp).await;
}

/// Commit `bytes` as `path` on `branch` of `repo` (staged under `tmp`).
async fn commit_file(
    c: &HubClient,
    repo: &str,
    branch: &str,
    path: &str,
    bytes: &[u8],
    tmp: &Path,
) {
    let p = tmp.join("committed-file");
    std::fs::write(&p, bytes).unwrap();
    c.upload_files(
        repo,
        branch,
        &format!("{path} on {branch}"),
        &[brevis_hub::UploadFile {
            path_in_repo: path.into(),
            local: p,
            hashes: brevis_hub::hashing::hash_bytes(bytes),
        }],
        &[],
        Arc::new(brevis_core::NoProgress),
    )
    .await
    .unwrap();
}

fn entry<'a>(m: &'a mut serde_json::Value, path: &str) -> &'a mut serde_json::Value {
    m["files"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["path"] == path)
        .unwrap()
}

/// Every file of the seed checkpoint is in `dir`, byte for byte.
fn assert_holds_the_seed(dir: &Path) {
    for f in files_under(&seed_dir()) {
        assert_eq!(
            sha_file(&dir.join(&f)),
            sha_file(&seed_dir().join(&f)),
            "{f}"
        );
    }
}

/// Names that only a temp or half-done file has.
fn temp_leftovers(dir: &Path) -> Vec<String> {
    if !dir.exists() {
        return Vec::new();
    }
    files_under(dir)
        .into_iter()
        .filter(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            name.ends_with(".tmp") || name.contains(".incomplete") || name.contains("brevis-link")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_refuses_a_git_oid_that_is_not_the_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    // (What the source holds would refuse it first: see
    // pull_checks_a_mirror_against_its_source.)
    forget_source(tmp.path());
    // Swap config.json's git_oid for LICENSE's: the bytes of config.json
    // would be filed as LICENSE's blob.
    tamper_manifest(&c, tmp.path(), |m| {
        let lic = entry(m, "LICENSE")["git_oid"].clone();
        entry(m, "config.json")["git_oid"] = lic;
    })
    .await;
    let cache = tmp.path().join("hf/hub");
    let mut opts = pull_opts(&cache, tmp.path());
    opts.trust_mirror = true;
    let e = brevis_hub::pull(&c, &opts).await.unwrap_err();
    assert!(
        matches!(
            e,
            HubError::Integrity {
                what: "git blob id",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("config.json"), "{e}");
    let repo_dir = cache.join("models--org--model");
    // Nothing linked, and no blob holds bytes other than its name says.
    assert!(!repo_dir.join("snapshots").join(&commit).exists());
    for b in files_under(&repo_dir.join("blobs")) {
        let p = repo_dir.join("blobs").join(&b);
        let bytes = std::fs::read(&p).unwrap();
        let h = brevis_hub::hashing::hash_bytes(&bytes);
        assert!(
            h.git_oid.as_deref() == Some(b.as_str()) || b == h.sha256_hex(),
            "{b} holds other bytes"
        );
    }
    assert!(temp_leftovers(&repo_dir).is_empty());

    // A random git_oid is refused too, in a plain folder as well.
    tamper_manifest(&c, tmp.path(), |m| {
        entry(m, "config.json")["git_oid"] = "0123456789".repeat(4).into();
    })
    .await;
    let mut lopts = opts.clone();
    lopts.local_dir = Some(tmp.path().join("plain"));
    let e = brevis_hub::pull(&c, &lopts).await.unwrap_err();
    assert!(
        matches!(
            e,
            HubError::Integrity {
                what: "git blob id",
                ..
            }
        ),
        "{e}"
    );
    assert!(!tmp.path().join("plain/config.json").exists());
    assert!(temp_leftovers(&tmp.path().join("plain")).is_empty());
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_and_verify_name_what_differs() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _) = mirrored(tmp.path()).await;
    forget_source(tmp.path());
    // A wrong size is called a size mismatch (not two equal SHA-256s).
    tamper_manifest(&c, tmp.path(), |m| {
        let e = entry(m, "config.json");
        e["size"] = (e["size"].as_u64().unwrap() + 1).into();
    })
    .await;
    let mut opts = PullOptions::new(
        "org/model-brevis",
        tmp.path().join("hf/hub"),
        tmp.path().join("pw"),
    );
    opts.trust_mirror = true;
    let e = brevis_hub::pull(&c, &opts).await.unwrap_err();
    assert!(matches!(e, HubError::Integrity { what: "size", .. }), "{e}");
    assert!(e.to_string().contains("size mismatch"), "{e}");
    // A wrong hash: verify names the hash, not the (equal) sizes.
    tamper_manifest(&c, tmp.path(), |m| {
        let e = entry(m, "config.json");
        e["size"] = (e["size"].as_u64().unwrap() - 1).into();
        e["sha256"] = "ab".repeat(32).into();
    })
    .await;
    let v = verify_main(&c, "org/model-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(!v.ok);
    let row = v.files.iter().find(|f| f.path == "config.json").unwrap();
    assert_eq!(row.status, "mismatch");
    let detail = row.detail.as_deref().unwrap();
    assert!(detail.starts_with("SHA-256"), "{detail}");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_paths_are_refused() {
    // A manifest naming .git/config (any case) is refused as a whole, so
    // neither layout of pull writes it.
    for bad in [".git/config", "sub/.GIT/hooks/pre-commit"] {
        let m = serde_json::json!({
            "manifest_version": 1, "tool": "x", "format_version": 1,
            "source": {"repo": "org/m", "revision": "main", "commit": "c".repeat(40)},
            "files": [{"path": bad, "size": 1, "sha256": "d".repeat(64), "git_oid": "e".repeat(40),
                       "lfs": false, "encoding": "identity", "archive": "x", "archive_size": 1}]
        });
        let e = brevis_hub::Manifest::from_json(m.to_string().as_bytes(), "t").unwrap_err();
        assert!(matches!(e, HubError::Invalid { .. }), "{bad}: {e}");
    }
    // A source listing such a path is refused by mirror.
    let tmp = tempfile::tempdir().unwrap();
    let url = hostile_server(".git/config").await;
    let c = client(&url, None);
    let e = brevis_hub::mirror(&c, &c, &MirrorOptions::new("evil/model", tmp.path()))
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::Invalid { .. }), "{e}");
    // serve's commit endpoint refuses it (sent raw, past the client's check).
    let srv = serve(&tmp.path().join("store"), &[], |o| o).await;
    let c = client(&srv.url(), None);
    c.create_repo("org/x", None, true).await.unwrap();
    let body = |path: &str| {
        format!(
            "{}\n{}\n",
            serde_json::json!({"key": "header", "value": {"summary": "x"}}),
            serde_json::json!({"key": "file", "value": {"path": path, "content": "eA==", "encoding": "base64"}})
        )
    };
    let url = srv.url();
    let commit = "/api/models/org/x/commit/main";
    assert_eq!(raw_post(&url, commit, &body("ok.txt")).await, 200);
    assert_eq!(raw_post(&url, commit, &body(".git/config")).await, 400);
    assert_eq!(raw_post(&url, commit, &body("a/.Git/config")).await, 400);
    assert!(
        c.list_files("org/x", "main")
            .await
            .unwrap_or_default()
            .iter()
            .all(|f| f.path != ".git/config")
    );
    srv.shutdown().await;
}

/// POST `body` as NDJSON with a raw HTTP/1.1 request; the status code.
async fn raw_post(url: &str, path: &str, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_sends_each_token_only_to_its_endpoint() {
    let Some(bin) = cli_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // Each server refuses any token but its own (401), so a token sent to
    // the wrong endpoint fails the run.
    let a = serve(&tmp.path().join("a"), &[("org/model", &seed_dir())], |o| {
        o.token("hf_source")
    })
    .await;
    let b = serve(&tmp.path().join("b"), &[], |o| o.token("hf_dest")).await;
    let run = |extra: &[&str]| {
        cli(&bin, &tmp.path().join("hfhome"))
            .args(["mirror", "org/model", "--to", "org/model-brevis"])
            .args(["--endpoint", &a.url(), "--to-endpoint", &b.url()])
            .args(extra)
            .output()
            .unwrap()
    };
    // --token is for the source only: the destination gets no token and
    // refuses the anonymous write (before the fix it got hf_source: 401).
    let out = run(&["--token", "hf_source"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("hf_source") && !err.contains("hf_dest"),
        "{err}"
    );
    // The refusal says no token was sent, and points at the destination's
    // token, not at HF_TOKEN; before anything was downloaded.
    assert!(
        err.contains("none was sent") && err.contains("--to-token / BREVIS_TO_TOKEN"),
        "{err}"
    );
    assert!(!err.contains("downloading"), "{err}");
    // A wrong --to-token: the same hint.
    let out = run(&["--token", "hf_source", "--to-token", "hf_wrong"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("check --to-token / BREVIS_TO_TOKEN"), "{err}");
    // Each its own token: both servers accept.
    let out = run(&["--token", "hf_source", "--to-token", "hf_dest"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cb = client(&b.url(), Some("hf_dest"));
    assert!(cb.repo_info("org/model-brevis", "main").await.is_ok());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_mirror_paths_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    write_safetensors(&seed.join("model.safetensors"), 3000, 1);
    std::fs::write(seed.join("model.safetensors.brv"), b"not an archive").unwrap();
    let srv = serve(&tmp.path().join("store"), &[("org/clash", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let e = brevis_hub::mirror(
        &c,
        &c,
        &MirrorOptions::new("org/clash", tmp.path().join("w")),
    )
    .await
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HubError::Invalid { .. }), "{msg}");
    assert!(
        msg.contains("model.safetensors ") && msg.contains("model.safetensors.brv"),
        "{msg}"
    );
    // Nothing was uploaded.
    assert!(matches!(
        c.repo_info("org/clash-brevis", "main").await.unwrap_err(),
        HubError::RepoNotFound { .. }
    ));
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_does_not_replace_a_repo_that_is_not_a_mirror() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine\n").unwrap();
    let srv = serve(
        &tmp.path().join("store"),
        &[("org/model", &seed_dir()), ("org/other", &other)],
        |o| o,
    )
    .await;
    let c = client(&srv.url(), None);
    let opts = MirrorOptions::new("org/model", tmp.path().join("w")).dest("org/other");
    let e = brevis_hub::mirror(&c, &c, &opts).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, HubError::DestinationTaken { .. })
            && msg.contains("not a Brevis mirror")
            && msg.contains("notes.txt"),
        "{msg}"
    );
    let files = c.list_files("org/other", "main").await.unwrap();
    assert!(files.iter().any(|f| f.path == "notes.txt"));
    // With force it is replaced.
    let mut forced = opts.clone();
    forced.force = true;
    brevis_hub::mirror(&c, &c, &forced).await.unwrap();
    let files = c.list_files("org/other", "main").await.unwrap();
    assert!(files.iter().all(|f| f.path != "notes.txt"));
    assert!(files.iter().any(|f| f.path == "brevis.manifest.json"));
    srv.shutdown().await;
}

/// Rewrites every `config.json` under `root` when a download unit ends:
/// a file that changes in the work folder after its download was checked.
struct RewriteAfterDownload {
    root: PathBuf,
    label: std::sync::Mutex<String>,
}

impl brevis_core::ProgressSink for RewriteAfterDownload {
    fn start(&self, label: &str, _total: u64) {
        *self.label.lock().unwrap() = label.to_string();
    }
    fn finish(&self) {
        if self.label.lock().unwrap().starts_with("download") {
            for f in files_under(&self.root) {
                if f.ends_with("src/config.json") {
                    std::fs::write(self.root.join(f), b"{\"not\": \"the source\"}").unwrap();
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_refuses_a_file_changed_after_its_download_was_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = seed_dir();
    let srv = serve(&tmp.path().join("store"), &[("org/model", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let work = tmp.path().join("work");
    let sink = Arc::new(RewriteAfterDownload {
        root: work.clone(),
        label: Default::default(),
    });
    let e = brevis_hub::mirror(
        &c,
        &c,
        &MirrorOptions::new("org/model", &work).progress(sink),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, HubError::Integrity { file, what: "SHA-256", .. } if file == "config.json"),
        "{e}"
    );
    // Nothing was published (the destination was made, empty, before the
    // download: a missing permission fails before any work).
    assert!(
        c.list_files("org/model-brevis", "main")
            .await
            .unwrap()
            .is_empty()
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_archive_in_the_work_folder_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve_seed(&tmp.path().join("store")).await;
    let c = client(&srv.url(), None);
    let work = tmp.path().join("work");
    let mut opts = MirrorOptions::new("org/model", &work);
    opts.keep_work = true;
    brevis_hub::mirror(&c, &c, &opts).await.unwrap();
    // Flip a byte in the kept archive.
    let brv: Vec<PathBuf> = files_under(&work)
        .into_iter()
        .filter(|p| p.ends_with(".brv"))
        .map(|p| work.join(p))
        .collect();
    assert!(!brv.is_empty());
    // And in a kept source download (it is fetched again).
    let src_copy: Vec<PathBuf> = files_under(&work)
        .into_iter()
        .filter(|p| p.ends_with("/src/config.json"))
        .map(|p| work.join(p))
        .collect();
    assert_eq!(src_copy.len(), 1);
    for p in brv.iter().chain(&src_copy) {
        let mut b = std::fs::read(p).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x10;
        std::fs::write(p, b).unwrap();
    }
    // A mirror to another repo reuses the work folder: it rebuilds the
    // archive instead of failing with a checksum error.
    let again = opts.clone().dest("org/model-again");
    let rep = brevis_hub::mirror(&c, &c, &again).await.unwrap();
    assert!(!rep.up_to_date);
    let v = verify_main(&c, "org/model-again", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(v.ok, "{v:?}");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pulls_of_one_mirror_both_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    let cache = tmp.path().join("hf/hub");
    let opts = pull_opts(&cache, tmp.path());
    // Two with one work folder (they take turns), a third with its own
    // work folder (as with another HF_HOME) into the same cache.
    let mut o3 = opts.clone();
    o3.work_dir = tmp.path().join("pw-other");
    let (c1, c2, c3, o1, o2) = (c.clone(), c.clone(), c.clone(), opts.clone(), opts.clone());
    let t1 = tokio::spawn(async move { brevis_hub::pull(&c1, &o1).await });
    let t2 = tokio::spawn(async move { brevis_hub::pull(&c2, &o2).await });
    let t3 = tokio::spawn(async move { brevis_hub::pull(&c3, &o3).await });
    let (r1, r2, r3) = (t1.await.unwrap(), t2.await.unwrap(), t3.await.unwrap());
    r1.unwrap();
    r2.unwrap();
    r3.unwrap();
    let snap = cache.join("models--org--model/snapshots").join(&commit);
    assert_holds_the_seed(&snap);
    assert!(temp_leftovers(&cache).is_empty());
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_given_up_on() {
    // Accepts connections, reads the request, never answers.
    let l = tokio::net::TcpListener::bind(any_addr()).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = said.clone();
    let c = client(&url, None)
        .with_stall_timeout(std::time::Duration::from_millis(300))
        .with_notes(Arc::new(move |m: &str| s2.lock().unwrap().push(m.into())));
    let started = std::time::Instant::now();
    let e = c.repo_info("org/model", "main").await.unwrap_err();
    let took = started.elapsed();
    // The wait is reported as it happens: one line per stalled attempt retried.
    let said = said.lock().unwrap().clone();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].contains("no answer from") && said[0].contains("1 of 3"),
        "{said:?}"
    );
    assert!(matches!(e, HubError::Stalled { attempts: 3, .. }), "{e}");
    assert!(e.to_string().contains("sent nothing"), "{e}");
    // Three stalled attempts, not the retry policy's seven slow ones.
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_verify_reports_a_tampered_store_object() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _) = mirrored(tmp.path()).await;
    let (archive, obj) = mirror_archive_object(&c, &tmp.path().join("store")).await;
    let mut b = std::fs::read(&obj).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x01;
    std::fs::write(&obj, b).unwrap();
    let v = verify_main(&c, "org/model-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(!v.ok);
    let bad: Vec<_> = v.files.iter().filter(|f| f.status != "ok").collect();
    assert_eq!(bad.len(), 1, "{v:?}");
    assert_eq!(bad[0].status, "mismatch");
    assert_eq!(bad[0].archive, archive);
    assert!(v.files.len() > 1);

    // The CLI: exit 1, a row per file in --json, several repo ids at once,
    // --endpoint and --revision accepted; -q prints only the bad rows.
    if let Some(bin) = cli_binary() {
        let run = |args: &[&str]| {
            cli(&bin, &tmp.path().join("hfhome"))
                .args(args)
                .output()
                .unwrap()
        };
        let url = srv.url();
        let out = run(&[
            "verify",
            "org/model-brevis",
            "--endpoint",
            &url,
            "--revision",
            "main",
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(1));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["ok"], false);
        assert_eq!(j["files"].as_array().unwrap().len(), v.files.len());
        // Two repo ids, one of them missing: both reported, exit 2.
        let out = run(&[
            "verify",
            "org/model-brevis",
            "org/nope-brevis",
            "--endpoint",
            &url,
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(2));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let m = j["mirrors"].as_array().unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0]["files"].as_array().unwrap().len(), v.files.len());
        assert!(m[1]["error"].as_str().unwrap().contains("not found"));
        // -q: only the mismatch row.
        let out = run(&["-q", "verify", "org/model-brevis", "--endpoint", &url]);
        assert_eq!(out.status.code(), Some(1));
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("mismatch"), "{text}");
    }
    // A stored file that cannot be fetched at all (the server answers 500
    // for it): still a row per file, that one `error` (the CLI then exits 2).
    std::fs::remove_file(&obj).unwrap();
    let v = verify_main(&c, "org/model-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(!v.ok);
    let errs: Vec<_> = v.files.iter().filter(|f| f.status == "error").collect();
    assert_eq!(errs.len(), 1, "{v:?}");
    assert_eq!(errs[0].archive, archive);
    assert!(v.files.iter().filter(|f| f.status == "ok").count() == v.files.len() - 1);
    srv.shutdown().await;
}

/// A stored file the Hub does not hold is `missing`, whatever the work
/// folder holds under its name: here a manifest names another stored
/// file's partial download, left (empty) by an interrupted verify, as the
/// stored file of an empty source file. Checked as files arrive, verify
/// read that partial and called the row ok (from the review of ef56eb2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_calls_a_stored_file_the_hub_lacks_missing_whatever_the_work_folder_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    for f in ["model.safetensors", "config.json"] {
        std::fs::copy(seed_dir().join(f), seed.join(f)).unwrap();
    }
    std::fs::write(seed.join("empty.txt"), b"").unwrap();
    let (srv, c) = mirrored_seeds(tmp.path(), &[("org/model", &seed)]).await;
    let partial = "model.safetensors.brv.incomplete";
    tamper_manifest(&c, tmp.path(), |m| {
        entry(m, "empty.txt")["archive"] = partial.into();
    })
    .await;
    let sha = c.repo_info("org/model-brevis", "main").await.unwrap().sha;
    let work = tmp.path().join("vw");
    let left = work.join(format!("verify-org--model-brevis-{}", &sha[..12]));
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join(partial), b"").unwrap();
    let v = verify_main(&c, "org/model-brevis", &work).await.unwrap();
    let row = v.files.iter().find(|e| e.path == "empty.txt").unwrap();
    assert_eq!(row.status, "missing", "{v:?}");
    assert!(!v.ok);
    assert!(
        v.files
            .iter()
            .filter(|e| e.path != "empty.txt")
            .all(|e| e.status == "ok"),
        "{v:?}"
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_pull_and_mirror_print_nothing() {
    let Some(bin) = cli_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve_seed(&tmp.path().join("store")).await;
    let run = |args: &[&str]| {
        cli(&bin, &tmp.path().join("hfhome"))
            .args(args)
            .args(["--endpoint", &srv.url()])
            .output()
            .unwrap()
    };
    for args in [
        vec!["-q", "mirror", "org/model"],
        vec!["-q", "pull", "org/model-brevis"],
    ] {
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    srv.shutdown().await;
}

/// `org/evil-brevis`: the mirror of another checkpoint (the seed with its
/// own config.json), its manifest rewritten to claim `org/model` at
/// `commit` (every hash its own bytes').
async fn evil_mirror(c: &HubClient, tmp: &Path, commit: &str) {
    let other = tmp.join("other-seed");
    for f in files_under(&seed_dir()) {
        let to = other.join(&f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(seed_dir().join(&f), to).unwrap();
    }
    std::fs::write(other.join("config.json"), b"{\"evil\": true}\n").unwrap();
    Store::open(&tmp.join("store"))
        .unwrap()
        .seed(&"org/evil".parse().unwrap(), &other)
        .unwrap();
    let mut mo = MirrorOptions::new("org/evil", tmp.join("work"));
    mo.dest = Some("org/evil-brevis".into());
    brevis_hub::mirror(c, c, &mo).await.unwrap();
    edit_manifest(c, "org/evil-brevis", tmp, |m| {
        m["source"]["repo"] = "org/model".into();
        m["source"]["commit"] = commit.into();
    })
    .await;
}

/// Stored files are restored as they arrive, while the others download: a
/// download that fails there fails the pull with nothing linked in the
/// snapshot, keeps the work folder, and the next pull resumes it and reuses
/// what was already restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_failing_while_others_restore_leaves_a_resumable_pull() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    let cache = tmp.path().join("hf/hub");
    let opts = pull_opts(&cache, tmp.path());
    // Every answer is cut after 5000 bytes: the small files arrive (and are
    // restored), the archive never does.
    *srv.faults().cut_downloads.lock().unwrap() = Some((5000, 1_000_000));
    let e = brevis_hub::pull(&c, &opts).await.unwrap_err();
    assert!(!matches!(e, HubError::Integrity { .. }), "{e}");
    let repo_dir = cache.join("models--org--model");
    assert!(!repo_dir.join("snapshots").join(&commit).exists());
    assert!(!repo_dir.join("refs").join("main").exists());
    assert!(temp_leftovers(&repo_dir).is_empty());
    assert!(
        std::fs::read_dir(tmp.path().join("pw")).unwrap().count() > 0,
        "the work folder is kept"
    );

    *srv.faults().cut_downloads.lock().unwrap() = None;
    let r = brevis_hub::pull(&c, &opts).await.unwrap();
    assert!(
        r.reused > 0 && r.reused < r.files,
        "{} of {}",
        r.reused,
        r.files
    );
    assert_holds_the_seed(&repo_dir.join("snapshots").join(&commit));
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_snapshot_is_not_rewritten_with_other_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    let cache = tmp.path().join("hf/hub");
    let opts = pull_opts(&cache, tmp.path());
    brevis_hub::pull(&c, &opts).await.unwrap();
    let snap = cache.join("models--org--model/snapshots").join(&commit);
    let before = sha_file(&snap.join("config.json"));

    // A self-consistent mirror claiming the same commit with another
    // config.json: its bytes would replace the cached file.
    evil_mirror(&c, tmp.path(), &commit).await;
    let evil = PullOptions::new("org/evil-brevis", &cache, tmp.path().join("pw"));
    // The source itself says otherwise.
    let e = brevis_hub::pull(&c, &evil).await.unwrap_err();
    assert!(
        e.to_string().contains("does not restore that commit"),
        "{e}"
    );
    assert_eq!(sha_file(&snap.join("config.json")), before);
    // Where the source cannot be read (and the mirror is trusted), the
    // cached snapshot says otherwise.
    forget_source(tmp.path());
    let mut evil = evil;
    evil.trust_mirror = true;
    let e = brevis_hub::pull(&c, &evil).await.unwrap_err();
    assert!(e.to_string().contains("already holds"), "{e}");
    assert_eq!(sha_file(&snap.join("config.json")), before);
    srv.shutdown().await;
}

/// A self-consistent mirror that names another repo's commit was trusted
/// where that commit was not cached: its bytes were filed under the other
/// repo's name. pull now checks the manifest against the source repo where
/// the endpoint serves it, and says so where it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_checks_a_mirror_against_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    let rep = brevis_hub::pull(&c, &pull_opts(&tmp.path().join("hf1"), tmp.path()))
        .await
        .unwrap();
    assert!(rep.source_checked);
    evil_mirror(&c, tmp.path(), &commit).await;
    let cache = tmp.path().join("hf2");
    let evil = PullOptions::new("org/evil-brevis", &cache, tmp.path().join("pw"));
    let e = brevis_hub::pull(&c, &evil).await.unwrap_err();
    assert!(matches!(e, HubError::Manifest { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("config.json") && msg.contains("does not restore"),
        "{msg}"
    );
    // verify says the same of it, on the file's row.
    let v = verify_main(&c, "org/evil-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(!v.ok && v.source_checked);
    let bad: Vec<_> = v.files.iter().filter(|f| f.status != "ok").collect();
    assert_eq!(bad.len(), 1, "{v:?}");
    assert_eq!(bad[0].path, "config.json");
    assert!(
        bad[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("the source org/model@")
    );
    let v = verify_main(&c, "org/model-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(v.ok && v.source_checked, "{v:?}");
    // Nothing written: no snapshot, no blob, no work folder left.
    let left = |d: &Path| {
        if d.exists() {
            files_under(d)
        } else {
            Vec::new()
        }
    };
    assert!(left(&cache).is_empty(), "{:?}", left(&cache));
    assert!(
        left(&tmp.path().join("pw")).is_empty(),
        "{:?}",
        left(&tmp.path().join("pw"))
    );
    // A commit the source (readable here) does not hold: refused too, or
    // the mirror's bytes would be filed, and refs/main moved, under it.
    let fake = "0123456789abcdef".repeat(3)[..40].to_string();
    edit_manifest(&c, "org/evil-brevis", tmp.path(), |m| {
        m["source"]["commit"] = fake.clone().into();
    })
    .await;
    let e = brevis_hub::pull(&c, &evil).await.unwrap_err();
    assert!(matches!(e, HubError::Manifest { .. }), "{e}");
    assert!(
        e.to_string().contains(&format!("has no commit {fake}")),
        "{e}"
    );
    assert!(left(&cache).is_empty(), "{:?}", left(&cache));
    // verify: every file a mismatch (exit 1), none restores that commit.
    let v = verify_main(&c, "org/evil-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(!v.ok && v.source_checked);
    assert!(
        v.files
            .iter()
            .all(|f| f.status == "mismatch"
                && f.detail.as_deref().unwrap().contains("has no commit")),
        "{v:?}"
    );
    assert!(left(&tmp.path().join("vw")).is_empty());
    // A source that cannot be read: here the endpoint answers for
    // org/model decoded from its mirror (that is the mirror's word again,
    // not a check). Filing the files in the cache as org/model would rest
    // on the mirror's word alone: refused, with nothing written, unless
    // the puller trusts the mirror.
    forget_source(tmp.path());
    let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (s2, s3) = (said.clone(), said.clone());
    let mut opts = pull_opts(&tmp.path().join("hf3"), tmp.path());
    opts.notes = Arc::new(move |m: &str| s2.lock().unwrap().push(m.into()));
    let err = brevis_hub::pull(&c, &opts).await.unwrap_err();
    assert!(
        matches!(&err, HubError::SourceUnchecked { source_repo, .. } if source_repo == "org/model"),
        "{err}"
    );
    // A library error names no command-line flag; the binary adds the hint.
    assert!(!err.to_string().contains("--"), "{err}");
    assert!(!tmp.path().join("hf3/models--org--model").exists());
    assert!(left(&tmp.path().join("pw")).is_empty());
    if let Some(bin) = cli_binary() {
        let pull = |cache: &str, trust: bool| {
            let mut cmd = cli(&bin, &tmp.path().join("hfhome"));
            cmd.args([
                "pull",
                "org/model-brevis",
                "--json",
                "--endpoint",
                &srv.url(),
            ])
            .arg("--cache-dir")
            .arg(tmp.path().join(cache));
            if trust {
                cmd.arg("--trust-mirror");
            }
            cmd.output().unwrap()
        };
        let out = pull("cli-cache", false);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cannot be read at") && err.contains("--trust-mirror"),
            "{err}"
        );
        assert!(!tmp.path().join("cli-cache/models--org--model").exists());
        let out = pull("cli-cache", true);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["source_checked"], false);
        assert_holds_the_seed(Path::new(v["path"].as_str().unwrap()));
        // verify passes such a mirror on its manifest, unless the source
        // must vouch (a CI gate).
        let verify = |require: bool| {
            let mut cmd = cli(&bin, &tmp.path().join("hfhome"));
            cmd.args([
                "verify",
                "org/model-brevis",
                "--json",
                "--endpoint",
                &srv.url(),
            ]);
            if require {
                cmd.arg("--require-source");
            }
            cmd.output().unwrap()
        };
        for (require, code) in [(false, 0), (true, 1)] {
            let out = verify(require);
            assert_eq!(
                out.status.code(),
                Some(code),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["source_checked"], false);
            assert_eq!(v["ok"], !require);
            assert!(
                v["source_unread"].as_str().unwrap().contains("decoded"),
                "{v}"
            );
        }
        // It is for mirrors on a Hub: with an archive it is a usage error.
        let file = tmp.path().join("plain.bin");
        std::fs::write(&file, b"not a mirror").unwrap();
        let out = cli(&bin, &tmp.path().join("hfhome"))
            .args(["compress", "-q"])
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let out = cli(&bin, &tmp.path().join("hfhome"))
            .args(["verify", "--require-source"])
            .arg(tmp.path().join("plain.bin.brv"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--require-source is for mirrors"));
    }
    // Into a plain folder nothing is filed under the source's name: the
    // pull goes on, said.
    let mut plain = pull_opts(&tmp.path().join("hf3"), tmp.path());
    plain.local_dir = Some(tmp.path().join("plain-unread"));
    let rep = brevis_hub::pull(&c, &plain).await.unwrap();
    assert!(!rep.source_checked);
    assert_holds_the_seed(&tmp.path().join("plain-unread"));
    assert!(!tmp.path().join("hf3/models--org--model").exists());
    // Trusted, the pull goes on, and says what it could not check.
    opts.trust_mirror = true;
    let rep = brevis_hub::pull(&c, &opts).await.unwrap();
    assert!(!rep.source_checked);
    let v = verify_main(&c, "org/model-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(v.ok && !v.source_checked, "{v:?}");
    let said = said.lock().unwrap().clone();
    assert!(
        said.iter()
            .any(|m| m.contains("cannot be read") && m.contains("manifest only")),
        "{said:?}"
    );
    let refs = tmp.path().join("hf3/models--org--model/refs/main");
    assert_eq!(std::fs::read_to_string(&refs).unwrap(), commit);
    // Unchecked, it does not move a ref the cache has to another commit
    // (offline loads of org/model keep what they had); the snapshot is
    // there by its commit id.
    let other = "ab".repeat(20);
    std::fs::write(&refs, &other).unwrap();
    std::fs::remove_dir_all(tmp.path().join("hf3/models--org--model/snapshots")).unwrap();
    let rep = brevis_hub::pull(&c, &opts).await.unwrap();
    assert!(!rep.source_checked);
    assert_eq!(std::fs::read_to_string(&refs).unwrap(), other);
    assert_holds_the_seed(&rep.path);
    assert!(rep.path.ends_with(&commit));
    let said = s3.lock().unwrap().clone();
    assert!(said.iter().any(|m| m.contains("stays at")), "{said:?}");
    srv.shutdown().await;
}

/// Any mirror could set refs: an older one (the source has moved on) sent
/// `refs/main` back, and a manifest naming a revision the source does not
/// have made a ref of it. A ref is set only where the source's revision is
/// at the mirror's commit; the snapshot is there by its commit id anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_sets_a_ref_only_where_the_source_is_at_its_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, c1) = mirrored(tmp.path()).await;
    commit_file(&c, "org/model", "main", "notes.txt", b"later\n", tmp.path()).await;
    let c2 = c.repo_info("org/model", "main").await.unwrap().sha;
    assert_ne!(c1, c2);
    let refs = |cache: &Path, name: &str| {
        std::fs::read_to_string(cache.join("models--org--model/refs").join(name)).ok()
    };
    // The mirror (of c1) into an empty cache: c1 restored, no ref.
    let fresh = tmp.path().join("hf1");
    let rep = brevis_hub::pull(&c, &pull_opts(&fresh, tmp.path()))
        .await
        .unwrap();
    assert!(rep.source_checked && rep.path.ends_with(&c1));
    assert_holds_the_seed(&rep.path);
    assert_eq!(refs(&fresh, "main"), None);
    // A cache whose main is c2 keeps it.
    let held = tmp.path().join("hf2");
    std::fs::create_dir_all(held.join("models--org--model/refs")).unwrap();
    std::fs::write(held.join("models--org--model/refs/main"), &c2).unwrap();
    brevis_hub::pull(&c, &pull_opts(&held, tmp.path()))
        .await
        .unwrap();
    assert_eq!(refs(&held, "main").as_deref(), Some(c2.as_str()));
    // A revision the source does not have makes no ref.
    edit_manifest(&c, "org/model-brevis", tmp.path(), |m| {
        m["source"]["revision"] = "v9".into();
    })
    .await;
    let other = tmp.path().join("hf3");
    brevis_hub::pull(&c, &pull_opts(&other, tmp.path()))
        .await
        .unwrap();
    assert_eq!(refs(&other, "v9"), None);
    srv.shutdown().await;
}

/// A mirror kept on another Hub than its source: on the mirror's Hub alone
/// the source is only the mirror's own word, so pull and verify check it
/// against the source's Hub (`--source-endpoint`), and refs follow that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_on_another_hub_is_checked_against_the_source_hub() {
    let tmp = tempfile::tempdir().unwrap();
    let src_srv = serve_seed(&tmp.path().join("src")).await;
    let dst_srv = serve(&tmp.path().join("dst"), &[], |o| o).await;
    let (src, dst) = (client(&src_srv.url(), None), client(&dst_srv.url(), None));
    let opts = MirrorOptions::new("org/model", tmp.path().join("work"));
    brevis_hub::mirror(&src, &dst, &opts).await.unwrap();
    let commit = src.repo_info("org/model", "main").await.unwrap().sha;
    let alone = brevis_hub::pull(&dst, &pull_opts(&tmp.path().join("hf1"), tmp.path())).await;
    assert!(
        matches!(alone, Err(HubError::SourceUnchecked { .. })),
        "{alone:?}"
    );
    assert!(!tmp.path().join("hf1").exists());
    let mut o = pull_opts(&tmp.path().join("hf2"), tmp.path());
    o.source = Some(src.clone());
    let rep = brevis_hub::pull(&dst, &o).await.unwrap();
    assert!(rep.source_checked);
    assert_holds_the_seed(&rep.path);
    let main = tmp.path().join("hf2/models--org--model/refs/main");
    assert_eq!(std::fs::read_to_string(&main).unwrap(), commit);
    let v = brevis_hub::verify_mirror_against(
        &dst,
        &src,
        "org/model-brevis",
        "main",
        &tmp.path().join("vw"),
        0,
        Arc::new(brevis_core::NoProgress),
    )
    .await
    .unwrap();
    assert!(v.ok && v.source_checked, "{v:?}");
    // The source moves on at its Hub: the cache's ref stays, the mirror's
    // commit is there by its id.
    commit_file(
        &src,
        "org/model",
        "main",
        "notes.txt",
        b"later\n",
        tmp.path(),
    )
    .await;
    std::fs::remove_dir_all(tmp.path().join("hf2/models--org--model/snapshots")).unwrap();
    std::fs::write(&main, "ab".repeat(20)).unwrap();
    let rep = brevis_hub::pull(&dst, &o).await.unwrap();
    assert!(rep.source_checked && rep.path.ends_with(&commit));
    assert_eq!(std::fs::read_to_string(&main).unwrap(), "ab".repeat(20));
    src_srv.shutdown().await;
    dst_srv.shutdown().await;
}

/// serve answers for a source decoded from its mirror; a second mirror of
/// the same source (a filtered copy, or anyone's claim to it) took that
/// place from the first. The first keeps it while it mirrors the source,
/// and such answers say which mirror they come from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_mirror_does_not_take_over_a_decoded_source() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    let mut copy = MirrorOptions::new("org/model", tmp.path().join("work")).dest("org/copy-brevis");
    copy.include = vec!["*.json".into()];
    brevis_hub::mirror(&c, &c, &copy).await.unwrap();
    let store = Store::open(&tmp.path().join("store")).unwrap();
    assert_eq!(
        store
            .mirror_of(&"org/model".parse().unwrap())
            .as_ref()
            .map(|r| r.as_str()),
        Some("org/model-brevis")
    );
    // A stored source is no mirror's word.
    assert_eq!(
        c.repo_info("org/model", "main").await.unwrap().decoded_from,
        None
    );
    forget_source(tmp.path());
    let info = c.repo_info("org/model", "main").await.unwrap();
    assert_eq!(info.decoded_from.as_deref(), Some("org/model-brevis"));
    assert_eq!(info.sha, commit);
    // Every file, not the copy's few.
    assert_eq!(info.siblings.len(), files_under(&seed_dir()).len());
    // A mirror naming a stored repo in another case does not stand for it.
    edit_manifest(&c, "org/copy-brevis", tmp.path(), |m| {
        m["source"]["repo"] = "ORG/Copy".into();
    })
    .await;
    assert!(c.repo_info("ORG/Copy", "main").await.is_ok());
    edit_manifest(&c, "org/copy-brevis", tmp.path(), |m| {
        m["source"]["repo"] = "ORG/model-Brevis".into();
    })
    .await;
    let e = c.repo_info("ORG/model-Brevis", "main").await.unwrap_err();
    assert!(matches!(e, HubError::RepoNotFound { .. }), "{e}");
    srv.shutdown().await;
}

/// A regular file in a cached snapshot (a copy, where there are no
/// symlinks) was silently replaced whatever its bytes: pull refuses one
/// with other bytes, naming it, and keeps one with the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regular_file_in_a_cached_snapshot_is_never_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    let cache = tmp.path().join("hf/hub");
    let snap = cache.join("models--org--model/snapshots").join(&commit);
    std::fs::create_dir_all(&snap).unwrap();
    let opts = pull_opts(&cache, tmp.path());
    let config = snap.join("config.json");
    let good = std::fs::read(seed_dir().join("config.json")).unwrap();
    // Other bytes: of another size, then of the same size.
    let mut same_size = good.clone();
    same_size[0] ^= 0x20;
    for foreign in [b"{\"foreign\": true}\n".to_vec(), same_size] {
        std::fs::write(&config, &foreign).unwrap();
        let e = brevis_hub::pull(&c, &opts).await.unwrap_err().to_string();
        assert!(e.contains("already holds"), "{e}");
        assert!(e.contains(&config.display().to_string()), "{e}");
        assert_eq!(std::fs::read(&config).unwrap(), foreign);
        assert!(
            !std::fs::symlink_metadata(&config)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    if let Some(bin) = cli_binary() {
        let out = cli(&bin, &tmp.path().join("hfhome"))
            .args(["pull", "org/model-brevis", "--endpoint", &srv.url()])
            .arg("--cache-dir")
            .arg(&cache)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&config.display().to_string()), "{err}");
    }
    // The same bytes: kept as they are (not replaced by a link), the rest linked.
    std::fs::write(&config, &good).unwrap();
    let before = std::fs::metadata(&config).unwrap();
    let pr = brevis_hub::pull(&c, &opts).await.unwrap();
    assert!(pr.reused >= 1);
    let after = std::fs::symlink_metadata(&config).unwrap();
    assert!(after.file_type().is_file());
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(after.ino(), before.ino());
    }
    assert_holds_the_seed(&snap);
    srv.shutdown().await;
}

/// Set `p`'s own modification time (a link's, not its target's) an hour back.
#[cfg(unix)]
fn age(p: &Path) {
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    let ts = rustix::fs::Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: 0,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        p,
        &rustix::fs::Timestamps {
            last_access: ts,
            last_modification: ts,
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_temp_files_of_dead_runs_are_removed() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _) = mirrored(tmp.path()).await;
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    // What a killed run of an earlier version left an hour ago (pid 2^22+1
    // is above Linux's pid_max: never alive), and a temp of a live process
    // (ours).
    let dead = plain.join(".model.safetensors.incomplete.4194305.0.tmp");
    let live = plain.join(format!(".config.json.{}.0.tmp", std::process::id()));
    std::fs::write(&dead, vec![0u8; 1000]).unwrap();
    age(&dead);
    std::fs::write(&live, b"x").unwrap();
    age(&live);
    // Being written now by a process this one cannot see (another PID
    // namespace sharing the folder): kept.
    let unseen = plain.join(".model.safetensors.4194306.0.tmp");
    std::fs::write(&unseen, b"x").unwrap();
    // A user's file that only looks like one, for a name pull does not write.
    let theirs = plain.join(".notes.txt.4194305.0.tmp");
    std::fs::write(&theirs, b"mine").unwrap();
    age(&theirs);
    let mut opts = PullOptions::new(
        "org/model-brevis",
        tmp.path().join("hf/hub"),
        tmp.path().join("pw"),
    );
    opts.local_dir = Some(plain.clone());
    brevis_hub::pull(&c, &opts).await.unwrap();
    assert!(!dead.exists());
    assert!(live.exists());
    assert!(unseen.exists());
    assert!(theirs.exists());

    // In the HF cache: a snapshot link a killed run made but never renamed.
    #[cfg(unix)]
    {
        let cache = tmp.path().join("hf/hub");
        let commit = c.repo_info("org/model", "main").await.unwrap().sha;
        let snap = cache.join("models--org--model/snapshots").join(&commit);
        std::fs::create_dir_all(&snap).unwrap();
        let link = snap.join(".config.json.brevis-link-4194305");
        std::os::unix::fs::symlink("../../blobs/nothing", &link).unwrap();
        age(&link);
        opts.local_dir = None;
        brevis_hub::pull(&c, &opts).await.unwrap();
        assert!(std::fs::symlink_metadata(&link).is_err());
        assert!(temp_leftovers(&cache).is_empty());
    }
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_globs_and_an_empty_endpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let c = client("http://127.0.0.1:9", None);
    let mut opts = PullOptions::new("org/m-brevis", tmp.path().join("c"), tmp.path().join("w"));
    opts.include = vec!["[".into()];
    let e = brevis_hub::pull(&c, &opts).await.unwrap_err();
    assert!(matches!(e, HubError::Invalid { what: "glob", .. }), "{e}");
    let mut mo = MirrorOptions::new("org/m", tmp.path().join("w"));
    mo.exclude = vec!["model[0-9".into()];
    let e = brevis_hub::mirror(&c, &c, &mo).await.unwrap_err();
    assert!(matches!(e, HubError::Invalid { what: "glob", .. }), "{e}");
    // HF_ENDPOINT= (empty) means the default endpoint, as for huggingface_hub.
    if let Some(bin) = cli_binary() {
        let out = cli(&bin, &tmp.path().join("hfhome"))
            .args(["mirror", "org/model", "--dry-run", "--include", "["])
            .env("HF_ENDPOINT", "")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid glob"), "{err}");
        assert!(!err.contains("invalid endpoint"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_closes_connections_that_never_finish_their_headers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(
        &tmp.path().join("store"),
        &[("org/model", &seed_dir())],
        |o| o.header_read_timeout(std::time::Duration::from_millis(300)),
    )
    .await;
    let host = srv.addr();
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    s.write_all(b"GET /api/models/org/model HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    // The server closes it (EOF, or a 408 then EOF) well before 10 s.
    let mut buf = Vec::new();
    let r = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    assert!(r.is_ok(), "connection still open");
    // Complete requests still work.
    let c = client(&srv.url(), None);
    assert!(c.repo_info("org/model", "main").await.is_ok());
    srv.shutdown().await;
}

/// A server that answers every request `500`, with `extra` headers;
/// returns its URL and how many requests it has answered.
async fn always_500(extra: &'static str) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind(any_addr()).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let h = h.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let body = "{\"error\": \"no\"}";
                    let resp = format!(
                        "HTTP/1.1 500 Internal Server Error\r\n{extra}content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (url, hits)
}

/// A 500 is retried (and each retry said), unless it is serve's damaged
/// store object (`x-error-code: StoreDamaged`): a pull of one failed only
/// after ~15 s of retries. Another code on a 500 may be transient.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_is_retried_unless_it_is_a_damaged_store() {
    use std::sync::atomic::Ordering;
    for (extra, requests, notes) in [
        ("", 4, 3),
        ("x-error-code: Busy\r\n", 4, 3),
        (
            "x-error-code: StoreDamaged\r\nx-error-message: gone\r\n",
            1,
            0,
        ),
    ] {
        let (url, hits) = always_500(extra).await;
        let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let s2 = said.clone();
        let c = client(&url, None)
            .with_notes(Arc::new(move |m: &str| s2.lock().unwrap().push(m.into())));
        let e = c.repo_info("org/model", "main").await.unwrap_err();
        assert!(matches!(e, HubError::Http { status: 500, .. }), "{e}");
        assert_eq!(hits.load(Ordering::SeqCst), requests, "{extra:?}");
        let said = said.lock().unwrap().clone();
        assert_eq!(said.len(), notes, "{said:?}");
        assert!(
            said.iter()
                .all(|m| m.contains("answered 500") && m.contains("trying again")),
            "{said:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_whose_body_stalls_is_given_up_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Headers at once, 10 of 1000 bytes, then nothing (connection held);
    // every other request (a resume) is not answered at all.
    let l = tokio::net::TcpListener::bind(any_addr()).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        let mut n = 0;
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            if n % 2 == 0 {
                let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\netag: \"x\"\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&[b'a'; 10]).await;
            }
            n += 1;
            held.push(s);
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = said.clone();
    let c = client(&url, None)
        .with_stall_timeout(std::time::Duration::from_millis(300))
        .with_notes(Arc::new(move |m: &str| s2.lock().unwrap().push(m.into())));
    let started = std::time::Instant::now();
    let e = c
        .download_file(
            "org/model",
            "main",
            "f.bin",
            &tmp.path().join("f.bin"),
            &Expect {
                size: Some(1000),
                ..Expect::default()
            },
            &brevis_core::NoProgress,
        )
        .await
        .unwrap_err();
    // Three stalls in all, header or body (body, resume, body), not three
    // of each: two retries announced, then the error.
    assert!(matches!(e, HubError::Stalled { attempts: 3, .. }), "{e}");
    let said = said.lock().unwrap().clone();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(!tmp.path().join("f.bin").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_and_pull_a_branch() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve_seed(&tmp.path().join("store")).await;
    let c = client(&srv.url(), None);
    let url = srv.url();
    // huggingface_hub's create_branch: POST .../branch/{name}.
    assert_eq!(
        raw_post(&url, "/api/models/org/model/branch/dev", "{}").await,
        200
    );
    assert_eq!(
        raw_post(&url, "/api/models/org/model/branch/dev", "{}").await,
        409
    );
    assert_eq!(
        raw_post(
            &url,
            "/api/models/org/model/branch/x",
            "{\"startingPoint\": \"nope\"}"
        )
        .await,
        404
    );
    let main = c.repo_info("org/model", "main").await.unwrap().sha;
    assert_eq!(c.repo_info("org/model", "dev").await.unwrap().sha, main);
    // A commit on dev only.
    commit_file(
        &c,
        "org/model",
        "dev",
        "extra.txt",
        b"only on dev\n",
        tmp.path(),
    )
    .await;
    let dev = c.repo_info("org/model", "dev").await.unwrap().sha;
    assert_ne!(dev, main);
    assert_eq!(c.repo_info("org/model", "main").await.unwrap().sha, main);

    let opts = MirrorOptions::new("org/model", tmp.path().join("w")).revision("dev");
    let rep = brevis_hub::mirror(&c, &c, &opts).await.unwrap();
    assert_eq!(rep.source_commit, dev);
    assert!(rep.files.iter().any(|f| f.path == "extra.txt"));
    let cache = tmp.path().join("hf/hub");
    let pr = brevis_hub::pull(&c, &pull_opts(&cache, tmp.path()))
        .await
        .unwrap();
    assert_eq!(pr.source_commit, dev);
    let repo_dir = cache.join("models--org--model");
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/dev")).unwrap(),
        dev
    );
    assert_eq!(
        std::fs::read(repo_dir.join("snapshots").join(&dev).join("extra.txt")).unwrap(),
        b"only on dev\n"
    );
    srv.shutdown().await;
}

/// A pull at a commit id moves no ref (as `huggingface_hub`): pulling an
/// older mirror commit sent the cache's `refs/main` back to its source commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_at_an_older_mirror_commit_leaves_refs_main_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, old_src) = mirrored(tmp.path()).await;
    let old_mirror = c.repo_info("org/model-brevis", "main").await.unwrap().sha;
    // The source moves on and is mirrored again.
    commit_file(&c, "org/model", "main", "extra.txt", b"newer\n", tmp.path()).await;
    let again = MirrorOptions::new("org/model", tmp.path().join("work"));
    let new_src = brevis_hub::mirror(&c, &c, &again)
        .await
        .unwrap()
        .source_commit;
    assert_ne!(new_src, old_src);
    let cache = tmp.path().join("hf/hub");
    let refs = cache.join("models--org--model/refs");
    let opts = pull_opts(&cache, tmp.path());
    brevis_hub::pull(&c, &opts).await.unwrap();
    assert_eq!(std::fs::read_to_string(refs.join("main")).unwrap(), new_src);
    // The older mirror commit, by its id: its snapshot is restored, no ref moves.
    let mut at_old = opts.clone();
    at_old.revision = old_mirror.clone();
    let pr = brevis_hub::pull(&c, &at_old).await.unwrap();
    assert_eq!(pr.source_commit, old_src);
    let snap = cache.join("models--org--model/snapshots").join(&old_src);
    assert_holds_the_seed(&snap);
    assert_eq!(std::fs::read_to_string(refs.join("main")).unwrap(), new_src);
    assert_eq!(files_under(&refs), ["main"]);
    // Into a fresh cache too: no ref at all.
    let fresh = tmp.path().join("fresh/hub");
    at_old.cache_dir = fresh.clone();
    brevis_hub::pull(&c, &at_old).await.unwrap();
    assert!(!fresh.join("models--org--model/refs").exists());
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_does_not_replace_the_mirror_of_another_source_or_branch() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    write_safetensors(&victim.join("model.safetensors"), 2000, 7);
    let (srv, c) = mirrored_seeds(
        tmp.path(),
        &[("org/model", &seed_dir()), ("org/victim", &victim)],
    )
    .await;
    let manifest_source = |c: HubClient| async move {
        let p = tempfile::NamedTempFile::new().unwrap();
        c.download_file(
            "org/model-brevis",
            "main",
            "brevis.manifest.json",
            p.path(),
            &Expect::default(),
            &brevis_core::NoProgress,
        )
        .await
        .unwrap();
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(p.path()).unwrap()).unwrap();
        (
            m["source"]["repo"].as_str().unwrap().to_string(),
            m["source"]["revision"].as_str().unwrap().to_string(),
        )
    };
    let before = c.repo_info("org/model-brevis", "main").await.unwrap().sha;

    // Another source repo: refused, naming both; the mirror is untouched.
    let other = MirrorOptions::new("org/victim", tmp.path().join("w")).dest("org/model-brevis");
    let e = brevis_hub::mirror(&c, &c, &other).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, HubError::DestinationTaken { .. })
            && msg.contains("org/model ")
            && msg.contains("org/victim")
            && !msg.contains("--force"),
        "{msg}"
    );
    // Another branch of the same source: refused, naming both branches.
    assert_eq!(
        raw_post(&srv.url(), "/api/models/org/model/branch/dev", "{}").await,
        200
    );
    let dev = MirrorOptions::new("org/model", tmp.path().join("w"))
        .revision("dev")
        .dest("org/model-brevis");
    let e = brevis_hub::mirror(&c, &c, &dev).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("revision main") && msg.contains("revision dev"),
        "{msg}"
    );
    assert_eq!(
        c.repo_info("org/model-brevis", "main").await.unwrap().sha,
        before
    );
    assert_eq!(
        manifest_source(c.clone()).await,
        ("org/model".to_string(), "main".to_string())
    );

    // The same source and branch at a newer commit updates it without --force.
    commit_file(&c, "org/model", "main", "extra.txt", b"newer\n", tmp.path()).await;
    let same = MirrorOptions::new("org/model", tmp.path().join("w"));
    let rep = brevis_hub::mirror(&c, &c, &same).await.unwrap();
    assert!(!rep.up_to_date);
    assert!(rep.files.iter().any(|f| f.path == "extra.txt"));

    // --force replaces it.
    let mut forced = other.clone();
    forced.force = true;
    brevis_hub::mirror(&c, &c, &forced).await.unwrap();
    assert_eq!(
        manifest_source(c.clone()).await,
        ("org/victim".to_string(), "main".to_string())
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_filters_that_match_nothing_fail_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _) = mirrored(tmp.path()).await;
    let cache = tmp.path().join("hf/hub");
    for include in ["nomatch*", ""] {
        let mut opts = pull_opts(&cache, tmp.path());
        opts.include = vec![include.to_string()];
        let e = brevis_hub::pull(&c, &opts).await.unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("--include {include:?}")),
            "{include:?}: {msg}"
        );
        assert!(!cache.exists(), "{:?}", files_under(&cache));
    }
    // Every file left out by --exclude: the same.
    let mut opts = pull_opts(&cache, tmp.path());
    opts.exclude = vec!["*".to_string()];
    let msg = brevis_hub::pull(&c, &opts).await.unwrap_err().to_string();
    assert!(msg.contains("--exclude \"*\""), "{msg}");
    assert!(!cache.exists());
    if let Some(bin) = cli_binary() {
        let out = cli(&bin, &tmp.path().join("hfhome"))
            .args(["pull", "org/model-brevis", "--include", "nomatch*"])
            .args(["--endpoint", &srv.url(), "--cache-dir"])
            .arg(&cache)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("nomatch*"), "{err}");
        assert!(!cache.exists());
    }
    srv.shutdown().await;
}

/// GET `path` with a raw HTTP/1.1 request: the status line and headers
/// (lowercased), and the body.
async fn raw_get(url: &str, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_ascii_lowercase(), body.to_string())
}

/// GET `path` with a raw HTTP/1.1 request: the status line and headers.
async fn raw_get_head(url: &str, path: &str) -> String {
    raw_get(url, path).await.0
}

/// GET `/api/models/{repo}/refs` (with `query`): the status code and the JSON.
async fn get_refs(url: &str, repo: &str, query: &str) -> (u16, serde_json::Value) {
    let (head, body) = raw_get(url, &format!("/api/models/{repo}/refs{query}")).await;
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(&body).unwrap_or_default())
}

/// `serve` had no refs endpoint (`huggingface_hub`'s `list_repo_refs`):
/// every branch with its commit, for stored repos and for a source served
/// decoded from its mirror.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_lists_a_repos_refs() {
    let tmp = tempfile::tempdir().unwrap();
    let src_srv = serve_seed(&tmp.path().join("src")).await;
    let dst_srv = serve(&tmp.path().join("dst"), &[], |o| o).await;
    let (src_url, dst_url) = (src_srv.url(), dst_srv.url());
    let (src, dst) = (client(&src_url, None), client(&dst_url, None));
    // Branch names may hold '/'.
    for b in ["dev", "feat/x"] {
        let path = format!("/api/models/org/model/branch/{b}");
        assert_eq!(raw_post(&src_url, &path, "{}").await, 200);
    }
    commit_file(&src, "org/model", "dev", "extra.txt", b"dev\n", tmp.path()).await;
    let main = src.repo_info("org/model", "main").await.unwrap().sha;
    let dev = src.repo_info("org/model", "dev").await.unwrap().sha;
    let branch = |name: &str, oid: &str| serde_json::json!({"name": name, "ref": format!("refs/heads/{name}"), "targetCommit": oid});
    let (status, refs) = get_refs(&src_url, "org/model", "").await;
    assert_eq!(status, 200);
    assert_eq!(
        refs,
        serde_json::json!({
            "branches": [branch("dev", &dev), branch("feat/x", &main), branch("main", &main)],
            "tags": [],
            "converts": [],
        })
    );
    let (_, with_prs) = get_refs(&src_url, "org/model", "?include_prs=1").await;
    assert_eq!(with_prs["pullRequests"], serde_json::json!([]));
    // The mirror of dev, and its source served decoded: main and dev, at
    // the source commit.
    let opts = MirrorOptions::new("org/model", tmp.path().join("work")).revision("dev");
    let rep = brevis_hub::mirror(&src, &dst, &opts).await.unwrap();
    let (_, mirror_refs) = get_refs(&dst_url, "org/model-brevis", "").await;
    assert_eq!(
        mirror_refs["branches"],
        serde_json::json!([branch("main", &rep.dest_commit.unwrap())])
    );
    let (status, decoded) = get_refs(&dst_url, "org/model", "").await;
    assert_eq!(status, 200);
    assert_eq!(
        decoded["branches"],
        serde_json::json!([branch("dev", &dev), branch("main", &dev)])
    );
    assert_eq!(dst.repo_info("org/model", "dev").await.unwrap().sha, dev);
    let (status, _) = get_refs(&dst_url, "org/nope", "").await;
    assert_eq!(status, 404);
    src_srv.shutdown().await;
    dst_srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_500_for_a_store_object_missing_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, _, _) = mirrored(tmp.path()).await;
    let url = srv.url();
    let store = Store::open(&tmp.path().join("store")).unwrap();
    // A small file of the source and an archive of the mirror.
    let sha = sha_file(&seed_dir().join("config.json"));
    std::fs::remove_file(store.object_path(&sha.parse().unwrap())).unwrap();
    let (archive, obj) =
        mirror_archive_object(&client(&url, None), &tmp.path().join("store")).await;
    std::fs::remove_file(obj).unwrap();
    for (repo, path) in [
        ("org/model", "config.json"),
        ("org/model-brevis", archive.as_str()),
    ] {
        // No 200 with a length and then an empty body: a 500 up front,
        // naming the missing object.
        let head = raw_get_head(&url, &format!("/{repo}/resolve/main/{path}")).await;
        assert!(head.starts_with("http/1.1 500"), "{path}: {head}");
        assert!(head.contains("missing from the store"), "{path}: {head}");
        assert!(
            head.contains("x-error-code: storedamaged"),
            "{path}: {head}"
        );
        // The client says why (not "error decoding response body").
        let c = client(&url, None);
        let e = c
            .download_file(
                repo,
                "main",
                path,
                &tmp.path().join("dl.bin"),
                &Expect::default(),
                &brevis_core::NoProgress,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(e, HubError::Http { status: 500, .. }),
            "{path}: {e}"
        );
        assert!(e.to_string().contains("missing from the store"), "{e}");
    }
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_verify_of_several_mirrors_names_the_mirror_on_each_row() {
    let Some(bin) = cli_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _) = mirrored(tmp.path()).await;
    let copy = MirrorOptions::new("org/model", tmp.path().join("work")).dest("org/copy-brevis");
    brevis_hub::mirror(&c, &c, &copy).await.unwrap();
    // Both mirrors store the archive as one object: damage it.
    let (archive, obj) = mirror_archive_object(&c, &tmp.path().join("store")).await;
    let mut b = std::fs::read(&obj).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x01;
    std::fs::write(&obj, b).unwrap();
    let out = cli(&bin, &tmp.path().join("hfhome"))
        .args(["-q", "verify", "org/model-brevis", "org/copy-brevis"])
        .args(["--endpoint", &srv.url()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].starts_with("org/model-brevis: mismatch"), "{text}");
    assert!(rows[1].starts_with("org/copy-brevis: mismatch"), "{text}");
    assert!(rows.iter().all(|r| r.contains(&archive)), "{text}");
    srv.shutdown().await;
}

/// pull and verify worked only in `$HF_HOME/brevis`: with --work-dir or
/// BREVIS_WORK_DIR they (and mirror) leave HF_HOME alone, so it may be
/// read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_and_verify_take_a_work_dir() {
    let Some(bin) = cli_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (srv, _, commit) = mirrored(tmp.path()).await;
    let cache = tmp.path().join("cache");
    let run = |home: &Path, env_work: Option<&Path>, args: &[&str]| {
        let mut cmd = cli(&bin, home);
        cmd.args(args).args(["--endpoint", &srv.url()]);
        if let Some(w) = env_work {
            cmd.env("BREVIS_WORK_DIR", w);
        }
        cmd.output().unwrap()
    };
    let ok = |out: &std::process::Output, what: &str| {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let home = tmp.path().join("hfhome");
    let wd = tmp.path().join("wd");
    let cache_arg = cache.to_str().unwrap();
    let wd_arg = wd.to_str().unwrap();
    let pull = ["pull", "org/model-brevis", "--cache-dir", cache_arg];
    let out = run(&home, None, &[&pull[..], &["--work-dir", wd_arg]].concat());
    ok(&out, "pull --work-dir");
    let snap = cache.join("models--org--model/snapshots").join(&commit);
    assert_eq!(
        sha_file(&snap.join("config.json")),
        sha_file(&seed_dir().join("config.json"))
    );
    let out = run(&home, Some(&wd), &["verify", "org/model-brevis"]);
    ok(&out, "verify with BREVIS_WORK_DIR");
    let out = run(&home, Some(&wd), &["mirror", "org/model"]);
    ok(&out, "mirror with BREVIS_WORK_DIR");
    assert!(wd.is_dir());
    assert!(!home.exists(), "{:?}", files_under(&home));
    // An HF_HOME where nothing can be created (a file, even for root): the
    // default work folder fails with a clear error; a work folder elsewhere works.
    let file_home = tmp.path().join("home-is-a-file");
    std::fs::write(&file_home, b"").unwrap();
    let out = run(&file_home, None, &pull);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("home-is-a-file"), "{err}");
    ok(
        &run(&file_home, Some(&wd), &pull),
        "pull with BREVIS_WORK_DIR",
    );
    ok(
        &run(
            &file_home,
            None,
            &["verify", "org/model-brevis", "--work-dir", wd_arg],
        ),
        "verify --work-dir",
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_pull_and_verify_leave_no_lock_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _) = mirrored(tmp.path()).await;
    let cache = tmp.path().join("hf/hub");
    let opts = pull_opts(&cache, tmp.path());
    brevis_hub::pull(&c, &opts).await.unwrap();
    // A second pull (all reused) and a verify.
    brevis_hub::pull(&c, &opts).await.unwrap();
    let v = verify_main(&c, "org/model-brevis", &tmp.path().join("vw"))
        .await
        .unwrap();
    assert!(v.ok);
    for dir in ["work", "pw", "vw"] {
        let left = files_under(&tmp.path().join(dir));
        assert!(left.is_empty(), "{dir}: {left:?}");
    }
    srv.shutdown().await;
}

/// A trusted pull of a mirror whose readable source disagrees is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_a_mirror_does_not_override_what_its_source_says() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, commit) = mirrored(tmp.path()).await;
    evil_mirror(&c, tmp.path(), &commit).await;
    let cache = tmp.path().join("hf");
    let mut evil = PullOptions::new("org/evil-brevis", &cache, tmp.path().join("pw"));
    evil.trust_mirror = true;
    let e = brevis_hub::pull(&c, &evil).await.unwrap_err();
    assert!(matches!(e, HubError::Manifest { .. }), "{e}");
    assert!(!cache.exists());
    srv.shutdown().await;
}

/// The refusal leaves the cache folder itself untouched (not even created).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_unchecked_pull_creates_nothing_in_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _commit) = mirrored(tmp.path()).await;
    forget_source(tmp.path());
    let cache = tmp.path().join("hf");
    let e = brevis_hub::pull(&c, &pull_opts(&cache, tmp.path()))
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::SourceUnchecked { .. }), "{e}");
    assert!(!cache.exists(), "cache folder created");
    assert!(
        !tmp.path()
            .join("pw")
            .join("pull-org--model-brevis")
            .exists()
    );
    srv.shutdown().await;
}

/// A proxy in front of serve that removes the source from the store as the
/// source's tree listing goes by: the revision was the real source's, the
/// tree listing is the decoded view (marked x-brevis-decoded-from). That
/// listing is the mirror's word: the source is unread, and the pull refused
/// (it was counted as checked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_answered_decoded_mid_check_is_unread() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tmp = tempfile::tempdir().unwrap();
    let (srv, c, _commit) = mirrored(tmp.path()).await;
    let upstream: SocketAddr = srv.url().trim_start_matches("http://").parse().unwrap();
    let lis = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = lis.local_addr().unwrap();
    let root = tmp.path().to_path_buf();
    let seen_decoded = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sd = seen_decoded.clone();
    tokio::spawn(async move {
        loop {
            let (mut a, _) = lis.accept().await.unwrap();
            let root = root.clone();
            let sd = sd.clone();
            tokio::spawn(async move {
                let b = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let (mut ar, mut aw) = a.split();
                let (mut br, mut bw) = tokio::io::split(b);
                let up = async {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = ar.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        let s = String::from_utf8_lossy(&buf[..n]);
                        if s.contains("GET /api/models/org/model/tree/") {
                            let p = root.join("store/models/org/model");
                            if p.exists() {
                                std::fs::remove_dir_all(p).unwrap();
                            }
                        }
                        if bw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                let down = async {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = br.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        if String::from_utf8_lossy(&buf[..n]).contains("x-brevis-decoded-from") {
                            sd.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        if aw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                tokio::join!(up, down);
            });
        }
    });
    let pc = client(&format!("http://{addr}"), None);
    let cache = tmp.path().join("hf");
    let rep = brevis_hub::pull(&pc, &pull_opts(&cache, tmp.path())).await;
    assert!(seen_decoded.load(std::sync::atomic::Ordering::SeqCst));
    assert!(
        matches!(&rep, Err(HubError::SourceUnchecked { why, .. }) if why.contains("decoded")),
        "{rep:?}"
    );
    assert!(!cache.exists());
    drop(c);
    srv.shutdown().await;
}

/// A TCP proxy in front of `upstream` that holds each LFS PUT for `hold`
/// before passing it on and records the most PUTs in flight at once.
async fn put_counting_proxy(
    upstream: SocketAddr,
    hold: std::time::Duration,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind(any_addr()).await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let now = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let max2 = max.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = l.accept().await {
            let (now, max) = (now.clone(), max.clone());
            tokio::spawn(async move {
                let server = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                // Per connection: 0 = waiting for a request, 1 = a request
                // in flight, 2 = a PUT in flight.
                let state = Arc::new(std::sync::Mutex::new(0u8));
                let st2 = state.clone();
                let now2 = now.clone();
                let up = tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let hold_it = {
                            let mut s = st2.lock().unwrap();
                            if *s == 0 {
                                if buf[..n].starts_with(b"PUT ") {
                                    *s = 2;
                                    let c = now2.fetch_add(1, Ordering::SeqCst) + 1;
                                    max.fetch_max(c, Ordering::SeqCst);
                                    true
                                } else {
                                    *s = 1;
                                    false
                                }
                            } else {
                                false
                            }
                        };
                        if hold_it {
                            tokio::time::sleep(hold).await;
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                });
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    {
                        let mut s = state.lock().unwrap();
                        if *s == 2 {
                            now.fetch_sub(1, Ordering::SeqCst);
                        }
                        *s = 0;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    (url, max2)
}

/// `--jobs` ("files to transfer at once") bounds the LFS objects a mirror
/// sends at once, also those sent while the next file is compressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_sends_no_more_objects_at_once_than_its_jobs() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    for i in 1..=6 {
        write_safetensors(
            &seed.join(format!("model-0000{i}-of-00006.safetensors")),
            2000 + 100 * i,
            i as u32,
        );
    }
    let srv = serve(&tmp.path().join("store"), &[("org/sharded", &seed)], |o| o).await;
    let (url, max_puts) =
        put_counting_proxy(srv.addr(), std::time::Duration::from_millis(500)).await;
    let c = client(&url, None).with_concurrency(1);
    let opts = mirror_with_uniform_prior(tmp.path(), "org/sharded", "me/sharded-brevis");
    let rep = brevis_hub::mirror(&c, &c, &opts).await.unwrap();
    assert_eq!(rep.lfs_objects_sent, 6, "{rep:?}");
    let max = max_puts.load(std::sync::atomic::Ordering::SeqCst);
    assert!(max <= 1, "{max} LFS PUTs at once with --jobs 1");
    srv.shutdown().await;
}

/// Two source files whose archives are the same object: the destination
/// had no LFS object before the run, so none is reported "already there".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_reports_no_object_present_on_a_fresh_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    write_safetensors(&seed.join("a.safetensors"), 3000, 7);
    write_safetensors(&seed.join("b.safetensors"), 3000, 7);
    let srv = serve(&tmp.path().join("store"), &[("org/dup", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let opts = mirror_with_uniform_prior(tmp.path(), "org/dup", "me/dup-brevis");
    let rep = brevis_hub::mirror(&c, &c, &opts).await.unwrap();
    assert_eq!(rep.lfs_objects_present, 0, "{rep:?}");
    srv.shutdown().await;
}

/// DELETE with a raw HTTP/1.1 request (`token`: sent as a bearer): the
/// status code.
async fn raw_delete(url: &str, path: &str, token: Option<&str>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("DELETE {path} HTTP/1.1\r\nhost: {host}\r\n{auth}connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `huggingface_hub`'s `delete_branch` (the scaled mirror's commit step
/// deletes its work branch): the branch goes and nothing else; `main`,
/// names that climb out, and writers without the token are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_deletes_a_branch_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(&tmp.path().join("s"), &[("org/model", &seed_dir())], |o| {
        o.token("hf_writer")
    })
    .await;
    let url = srv.url();
    let c = client(&url, Some("hf_writer"));
    for b in ["dev", "feat/x", "feat/y"] {
        c.ensure_branch("org/model", b, "main").await.unwrap();
    }
    let main = c.repo_info("org/model", "main").await.unwrap().sha;
    let names = |refs: serde_json::Value| -> Vec<String> {
        refs["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap().to_string())
            .collect()
    };
    // No token, a wrong token: refused, nothing deleted.
    let path = "/api/models/org/model/branch/dev";
    assert_eq!(raw_delete(&url, path, None).await, 401);
    assert_eq!(raw_delete(&url, path, Some("hf_other")).await, 401);
    // Names that are no branch, or climb out of the store.
    for (p, want) in [
        ("/api/models/org/model/branch/main", 403),
        ("/api/models/org/model/branch/..%2F..%2F..%2Fx", 400),
        ("/api/models/org/model/branch/refs%2Fheads%2Fdev", 400),
        ("/api/models/org/model/branch/feat", 404),
        ("/api/models/org/model/branch/nope", 404),
        ("/api/models/org/nope/branch/dev", 404),
        ("/api/models/org/model/branch/%2E%2E", 400),
    ] {
        assert_eq!(raw_delete(&url, p, Some("hf_writer")).await, want, "{p}");
    }
    let (_, refs) = get_refs(&url, "org/model", "").await;
    assert_eq!(names(refs), ["dev", "feat/x", "feat/y", "main"]);
    // Deleted, and deleted again: not there.
    assert!(c.delete_branch("org/model", "feat/x").await.unwrap());
    assert!(!c.delete_branch("org/model", "feat/x").await.unwrap());
    assert!(c.delete_branch("org/model", "main").await.is_err());
    let (_, refs) = get_refs(&url, "org/model", "").await;
    assert_eq!(names(refs), ["dev", "feat/y", "main"]);
    assert!(c.delete_branch("org/model", "feat/y").await.unwrap());
    assert!(c.delete_branch("org/model", "dev").await.unwrap());
    let (_, refs) = get_refs(&url, "org/model", "").await;
    assert_eq!(names(refs), ["main"]);
    // main is where it was; a name freed is a branch again.
    assert_eq!(c.repo_info("org/model", "main").await.unwrap().sha, main);
    c.ensure_branch("org/model", "feat", "main").await.unwrap();
    assert!(c.delete_branch("org/model", "feat").await.unwrap());
    srv.shutdown().await;
}
