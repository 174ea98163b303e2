//! What the real Hub asks of a client beyond `serve` (issue 28): rate
//! limits that pause every request, errors that fail at once, commits that
//! are not sent twice blindly and are split, ranged downloads in parallel
//! chunks that resume, empty files as regular files, the token `hf auth
//! login` stores, and the destination checked before any work.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use brevis_hub::client::{ChunkPlan, Expect, UploadFile};
use brevis_hub::{HubClient, HubError, MirrorOptions};

use crate::hub::{cli, cli_binary, client, seed_dir, serve, sha_file};

/// A 429 without `Retry-After` waits for its `RateLimit` `t` (plus a
/// margin), for every request of the client; past the client's bound it
/// fails and says how to wait longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_pauses_every_request_for_its_window() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(
        &tmp.path().join("store"),
        &[("org/model", &seed_dir())],
        |o| o,
    )
    .await;
    let c = client(&srv.url(), None);
    *srv.faults().rate_limit.lock().unwrap() = Some((2, 1));
    let t = Instant::now();
    // Two calls at once: both get 429 with t=1, both wait the one window.
    let (a, b) = tokio::join!(
        c.repo_info("org/model", "main"),
        c.list_files("org/model", "main")
    );
    a.unwrap();
    b.unwrap();
    let took = t.elapsed();
    assert!(took >= Duration::from_secs(2), "waited only {took:?}");
    // A window longer than the client may wait: fails, saying so.
    *srv.faults().rate_limit.lock().unwrap() = Some((1, 300));
    let short = client(&srv.url(), None).with_max_rate_limit_wait(Duration::from_secs(5));
    let e = short.repo_info("org/model", "main").await.unwrap_err();
    assert!(matches!(e, HubError::RateLimited { .. }), "{e}");
    assert!(e.to_string().contains("BREVIS_RATE_LIMIT_WAIT"), "{e}");
    srv.shutdown().await;
}

/// Errors that will not heal fail at once: nothing listening at the
/// endpoint, a host name that does not resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_endpoints_fail_at_once() {
    for endpoint in ["http://127.0.0.1:1", "http://no-such-host.invalid"] {
        let c = HubClient::new(endpoint, None).unwrap();
        let t = Instant::now();
        let e = c.repo_info("org/model", "main").await.unwrap_err();
        assert!(matches!(e, HubError::Unreachable { .. }), "{endpoint}: {e}");
        // Not the retries' 16 s (generous: a slow resolver).
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{endpoint}: {:?}",
            t.elapsed()
        );
    }
}

fn upload(dir: &Path, name: &str, data: &[u8]) -> UploadFile {
    let local = dir.join(name.replace('/', "_"));
    std::fs::write(&local, data).unwrap();
    UploadFile {
        path_in_repo: name.into(),
        hashes: brevis_hub::hashing::hash_file(&local, true).unwrap(),
        local,
    }
}

/// Commits of many files are split (at most 100 changes each, the last
/// files in the last commit), and a commit whose answer is lost (a gateway
/// timeout after it landed) is found, not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_split_and_never_sent_twice_blindly() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(&tmp.path().join("store"), &[], |o| o).await;
    let c = client(&srv.url(), None);
    c.create_repo("org/many", None, false).await.unwrap();
    let files: Vec<UploadFile> = (0..230)
        .map(|i| {
            upload(
                tmp.path(),
                &format!("f/{i:03}.txt"),
                format!("file {i}").as_bytes(),
            )
        })
        .chain([upload(tmp.path(), "empty.bin", b"")])
        .collect();
    srv.faults().lose_commit_answers.store(1, Ordering::SeqCst);
    let st = c
        .upload_files(
            "org/many",
            "main",
            "many",
            &files,
            &[],
            Arc::new(brevis_core::NoProgress),
        )
        .await
        .unwrap();
    let tree = c.list_files("org/many", "main").await.unwrap();
    assert_eq!(tree.len(), 231);
    // The empty file is a regular file, as on the Hub.
    let empty = tree.iter().find(|f| f.path == "empty.bin").unwrap();
    assert!(empty.lfs_sha256.is_none());
    // Three commits after the initial one, not four (the lost answer's
    // commit was found, not made again).
    let commits = std::fs::read_dir(tmp.path().join("store/models/org/many/commits"))
        .unwrap()
        .count();
    assert_eq!(commits, 1 + 3);
    let head = c.repo_info("org/many", "main").await.unwrap().sha;
    assert_eq!(st.commit.unwrap().oid, head);
    srv.shutdown().await;
}

/// A file larger than a chunk comes in parallel `Range` chunks, resumes
/// each chunk after dropped connections, and is hashed in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_come_in_ranged_chunks_that_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(
        &tmp.path().join("store"),
        &[("org/model", &seed_dir())],
        |o| o,
    )
    .await;
    let src = seed_dir().join("model.safetensors");
    let size = std::fs::metadata(&src).unwrap().len();
    let want = sha_file(&src);
    let c = client(&srv.url(), None).with_chunks(ChunkPlan {
        chunk_size: 64 << 10,
        connections: 4,
    });
    let expect = Expect {
        size: Some(size),
        sha256: Some(want.clone()),
        git_oid: None,
    };
    // Every download is cut after 40 kB, eight times: chunks resume.
    *srv.faults().cut_downloads.lock().unwrap() = Some((40_000, 8));
    let dst = tmp.path().join("out/model.safetensors");
    let st = c
        .download_file(
            "org/model",
            "main",
            "model.safetensors",
            &dst,
            &expect,
            &brevis_core::NoProgress,
        )
        .await
        .unwrap();
    assert_eq!(sha_file(&dst), want);
    assert_eq!(st.hashes.unwrap().sha256_hex(), want);
    assert!(!brevis_hub::client::incomplete_path(&dst).exists());
    // A killed run (a partial file and its chunk record) resumes: only the
    // missing chunk is fetched.
    std::fs::remove_file(&dst).unwrap();
    let part = brevis_hub::client::incomplete_path(&dst);
    let mut data = std::fs::read(&src).unwrap();
    for b in &mut data[(128 << 10)..(192 << 10)] {
        *b = 0;
    }
    std::fs::write(&part, &data).unwrap();
    let chunks = size.div_ceil(64 << 10) as usize;
    let mut done: Vec<u64> = (0..chunks)
        .map(|i| (64u64 << 10).min(size - i as u64 * (64 << 10)))
        .collect();
    done[2] = 0;
    let mut rec = part.as_os_str().to_owned();
    rec.push(".chunks");
    std::fs::write(
        &rec,
        serde_json::json!({"size": size, "chunk": 64 << 10, "done": done}).to_string(),
    )
    .unwrap();
    let st = c
        .download_file(
            "org/model",
            "main",
            "model.safetensors",
            &dst,
            &expect,
            &brevis_core::NoProgress,
        )
        .await
        .unwrap();
    assert_eq!(st.bytes_on_wire, 64 << 10);
    assert_eq!(sha_file(&dst), want);
    assert!(!Path::new(&rec).exists());
    srv.shutdown().await;
}

/// A mirror to a destination this token may not write fails before any
/// download, in seconds, saying what to do; the token `hf auth login`
/// stores (`$HF_HOME/token`, or `HF_TOKEN_PATH`) is used when no other is
/// given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_destination_is_checked_first_and_the_stored_token_is_used() {
    let Some(bin) = cli_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(
        &tmp.path().join("store"),
        &[("org/model", &seed_dir())],
        |o| o.token("hf_write").read_token("hf_read"),
    )
    .await;
    let home = tmp.path().join("hfhome");
    std::fs::create_dir_all(&home).unwrap();
    let run = |token_file: Option<&str>| {
        match token_file {
            Some(t) => std::fs::write(home.join("token"), format!("{t}\n")).unwrap(),
            None => {
                let _ = std::fs::remove_file(home.join("token"));
            }
        }
        let t = Instant::now();
        let out = cli(&bin, &home)
            .args([
                "mirror",
                "org/model",
                "--to",
                "org/model-brevis",
                "--endpoint",
            ])
            .arg(srv.url())
            .output()
            .unwrap();
        (out, t.elapsed())
    };
    for (token, want) in [
        (None, "none was sent"),
        (Some("hf_read"), "refused the token"),
    ] {
        let (out, took) = run(token);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
        assert!(
            err.contains("into org/model-brevis"),
            "destination stated: {err}"
        );
        assert!(!err.contains("downloading"), "{err}");
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
    let (out, _) = run(Some("hf_write"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // HF_TOKEN_PATH names another file.
    let other = tmp.path().join("elsewhere-token");
    std::fs::write(&other, "hf_write").unwrap();
    let _ = std::fs::remove_file(home.join("token"));
    let out = cli(&bin, &home)
        .env("HF_TOKEN_PATH", &other)
        .args([
            "mirror",
            "org/model",
            "--to",
            "org/model-brevis",
            "--endpoint",
        ])
        .arg(srv.url())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    srv.shutdown().await;
}

/// Without `--to`, a mirror goes to `<namespace>/<name>-brevis` where the
/// namespace is the token's user, and says so before any work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_destination_is_the_token_users() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(
        &tmp.path().join("store"),
        &[("org/model", &seed_dir())],
        |o| o.token("hf_write"),
    )
    .await;
    let c = client(&srv.url(), Some("hf_write"));
    let notes: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let n2 = notes.clone();
    let opts =
        MirrorOptions::new("org/model", tmp.path().join("w")).notes(Arc::new(move |m: &str| {
            n2.lock().unwrap().push(m.to_string())
        }));
    let r = brevis_hub::mirror(&c, &c, &opts).await.unwrap();
    // `serve`'s user is `local`.
    assert_eq!(r.dest_repo, "local/model-brevis");
    let notes = notes.lock().unwrap().clone();
    let first = notes
        .iter()
        .position(|n| n.contains("into local/model-brevis"))
        .unwrap();
    let download = notes
        .iter()
        .position(|n| n.starts_with("downloading"))
        .unwrap();
    assert!(first < download, "{notes:?}");
    srv.shutdown().await;
}
