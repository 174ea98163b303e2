//! Hub flows end to end against the in-process `brevis-hub serve` (issue 4).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_hub::client::Expect;
use brevis_hub::server::{self, ServerOptions, Store};
use brevis_hub::{HubClient, HubError, MirrorOptions, PullOptions, RetryPolicy};
use sha2::Digest;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// The small real checkpoint the hub tests mirror.
fn seed_dir() -> PathBuf {
    let d = testdata().join("hub-seed");
    if d.is_dir() {
        d
    } else {
        testdata().join("silero-vad")
    }
}

fn any_addr() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy::default()
        .max_retries(3)
        .base_delay(std::time::Duration::from_millis(10))
}

fn client(url: &str, token: Option<&str>) -> HubClient {
    HubClient::new(url, token.map(String::from))
        .unwrap()
        .with_retry(fast_retry())
}

fn sha_file(p: &Path) -> String {
    hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap()))
}

/// Start a server over `root`, seeding `repo` from `dir` first.
async fn serve(
    root: &Path,
    seeds: &[(&str, &Path)],
    opts: impl FnOnce(ServerOptions) -> ServerOptions,
) -> server::RunningServer {
    let store = Store::open(root).unwrap();
    for (repo, dir) in seeds {
        store.seed(repo, dir).unwrap();
    }
    server::start(opts(ServerOptions::new(root)), any_addr())
        .await
        .unwrap()
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
    let popts = PullOptions::new("org/model-brevis", &cache, tmp.path().join("pullwork"));
    let pr = brevis_hub::pull(&dst, &popts).await.unwrap();
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
    let v = brevis_hub::verify_mirror(
        &dst,
        "org/model-brevis",
        "main",
        &tmp.path().join("vwork"),
        0,
        Arc::new(brevis_core::NoProgress),
    )
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

    // The server cuts the first response after 100 000 bytes.
    *srv.faults().cut_downloads.lock().unwrap() = Some((100_000, 1));
    let dst = tmp.path().join("a").join(&f.path);
    let st = c
        .download_file(
            "org/model",
            "main",
            &f.path,
            &dst,
            &expect,
            &brevis_core::NoProgress,
        )
        .await
        .unwrap();
    assert_eq!(sha_file(&dst), f.lfs_sha256.clone().unwrap());
    // Resumed with Range, not restarted: exactly the file's bytes went over the wire.
    assert_eq!(st.bytes_on_wire, f.size);

    // A partial file left by an earlier run is resumed too.
    let dst2 = tmp.path().join("b").join(&f.path);
    std::fs::create_dir_all(dst2.parent().unwrap()).unwrap();
    let full = std::fs::read(&dst).unwrap();
    std::fs::write(brevis_hub::client::incomplete_path(&dst2), &full[..54_321]).unwrap();
    let st2 = c
        .download_file(
            "org/model",
            "main",
            &f.path,
            &dst2,
            &expect,
            &brevis_core::NoProgress,
        )
        .await
        .unwrap();
    assert_eq!(st2.resumed_from, 54_321);
    assert_eq!(st2.bytes_on_wire, f.size - 54_321);
    assert_eq!(std::fs::read(&dst2).unwrap(), full);

    // A partial file that is not a prefix fails the hash check and is removed.
    let dst3 = tmp.path().join("c").join(&f.path);
    std::fs::create_dir_all(dst3.parent().unwrap()).unwrap();
    std::fs::write(brevis_hub::client::incomplete_path(&dst3), vec![0u8; 1000]).unwrap();
    let e = c
        .download_file(
            "org/model",
            "main",
            &f.path,
            &dst3,
            &expect,
            &brevis_core::NoProgress,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::Integrity { .. }), "{e}");
    assert!(!dst3.exists());
    assert!(!brevis_hub::client::incomplete_path(&dst3).exists());
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
    let e = ro.create_repo("org/other", false, false).await.unwrap_err();
    assert!(
        matches!(e, HubError::Unauthorized { status: 403, .. }),
        "{e}"
    );
    // Anonymous writes are refused; the good token writes.
    let anon = client(&srv.url(), None);
    assert!(anon.create_repo("org/other", false, false).await.is_err());
    let good = client(&srv.url(), Some("hf_good"));
    good.create_repo("org/other", false, false).await.unwrap();
    let e = good
        .create_repo("org/other", false, false)
        .await
        .unwrap_err();
    assert!(matches!(e, HubError::RepoExists { .. }), "{e}");

    // The CLI exits 2 with a clear message (when the binary is built).
    if let Some(bin) = cli_binary() {
        let out = std::process::Command::new(bin)
            .args(["pull", "org/model", "--endpoint", &srv.url(), "--cache-dir"])
            .arg(tmp.path().join("cache"))
            .env("HF_TOKEN", "hf_wrong_secret")
            .env("HF_HOME", tmp.path().join("hfhome"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refused the token"), "{err}");
        assert!(!err.contains("hf_wrong_secret"), "{err}");
    }
    srv.shutdown().await;
}

/// `target/<profile>/brevis-hub` next to this test binary, if it was built.
fn cli_binary() -> Option<PathBuf> {
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
        let out = std::process::Command::new(bin)
            .args(["mirror", "org/nope", "--endpoint", &srv.url()])
            .env("HF_HOME", tmp.path().join("hfhome"))
            .env_remove("HF_TOKEN")
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
