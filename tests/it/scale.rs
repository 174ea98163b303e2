//! Mirroring at scale (issue 32): a plan, worker processes (one killed
//! halfway and run again), one commit; the result is the one-machine
//! mirror's, byte for byte.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cli::bin;
use crate::hub::{client, seed_dir, serve, testdata};

/// A source repo of several real weight files of several containers,
/// TF.js shards beside their manifest and an ONNX model with external
/// data among them (a worker must describe them as the one machine does).
fn many_shards(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    let copy = |from: &Path, to: &str| {
        let p = src.join(to);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(from, p).unwrap();
    };
    for e in std::fs::read_dir(seed_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            copy(&p, p.file_name().unwrap().to_str().unwrap());
        }
    }
    let t = testdata();
    copy(
        &t.join("astra-bf16/model.safetensors"),
        "astra/model.safetensors",
    );
    copy(
        &t.join("whisper-tiny-f16/model.safetensors"),
        "whisper/model.safetensors",
    );
    for f in [
        "model.json",
        "group1-shard1of3.bin",
        "group1-shard2of3.bin",
        "group1-shard3of3.bin",
    ] {
        copy(&t.join("tfjs").join(f), &format!("tfjs/{f}"));
    }
    // The same manifest naming its shards in a folder below it: a worker
    // holds such a shard in a folder the manifest's is not.
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.join("tfjs/model.json")).unwrap()).unwrap();
    for group in m["weightsManifest"].as_array_mut().unwrap() {
        for p in group["paths"].as_array_mut().unwrap() {
            *p = serde_json::json!(format!("w/{}", p.as_str().unwrap()));
        }
    }
    std::fs::create_dir_all(src.join("tfjs-below/w")).unwrap();
    std::fs::write(src.join("tfjs-below/model.json"), m.to_string()).unwrap();
    for f in [
        "group1-shard1of3.bin",
        "group1-shard2of3.bin",
        "group1-shard3of3.bin",
    ] {
        copy(&t.join("tfjs").join(f), &format!("tfjs-below/w/{f}"));
    }
    for f in ["silero_vad_half.onnx", "silero_vad_half.onnx_data"] {
        copy(&t.join("onnx-external").join(f), &format!("onnx/{f}"));
    }
    src
}

/// `brevis-hub ARGS --endpoint URL --work-dir WORK`, its output; fails the
/// test on a non-zero exit.
fn hub(url: &str, work: &Path, args: &[&str]) -> String {
    let out = Command::new(bin())
        .args(args)
        .args([
            "--endpoint",
            url,
            "--work-dir",
            work.to_str().unwrap(),
            "-T",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_run_by_workers_one_killed_equals_the_one_machine_mirror() {
    let tmp = tempfile::tempdir().unwrap();
    let src = many_shards(tmp.path());
    let seeds = [("org/many", src.as_path()), ("org/small", &seed_dir())];
    let srv = serve(&tmp.path().join("store"), &seeds, |o| o).await;
    let url = srv.url();
    let work = tmp.path().join("work");
    let w = |name: &str| work.join(name);

    // The one-machine mirror.
    hub(
        &url,
        &w("one"),
        &["-q", "mirror", "org/many", "--to", "org/one"],
    );

    // The plan of two repos (each mirrored into <namespace>/<name>-brevis):
    // every compressed file a unit.
    let plan = tmp.path().join("plan.json");
    let p = plan.to_str().unwrap();
    let out = hub(
        &url,
        &w("plan"),
        &[
            "mirror",
            "--plan",
            p,
            "org/many",
            "org/small",
            "--unit-bytes",
            "1",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let units = v["units"].as_u64().unwrap();
    assert!(units >= 9, "{v}");
    assert_eq!(v["repos"], 2);
    let status = |work: &str| -> serde_json::Value {
        serde_json::from_str(&hub(
            &url,
            &w(work),
            &["mirror", "--plan", p, "--status", "--json"],
        ))
        .unwrap()
    };
    let count = |s: &serde_json::Value, state: &str| {
        s["units"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["state"] == state)
            .count()
    };
    assert_eq!(count(&status("s0"), "missing"), units as usize);

    // A commit before the units are done is refused and names them.
    let early = Command::new(bin())
        .args(["mirror", "--plan", p, "--commit", "--endpoint", &url])
        .args(["--work-dir", w("c0").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(early.status.code(), Some(2));
    let err = String::from_utf8_lossy(&early.stderr);
    assert!(
        err.contains("are not done") && err.contains("--status"),
        "{err}"
    );

    // Worker 1 of 2 is killed once it has committed its first unit.
    let mut victim = Command::new(bin())
        .args([
            "mirror",
            "--plan",
            p,
            "--worker",
            "1/2",
            "--endpoint",
            &url,
            "-T",
            "1",
        ])
        .args(["--work-dir", w("w1").to_str().unwrap()])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(victim.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .expect("worker 1 ended before a unit was done")
            .unwrap();
        seen.push(line.clone());
        if line.starts_with("unit ") && line.ends_with(" done") {
            break;
        }
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    let mid = status("s1");
    assert!(count(&mid, "done") >= 1, "{mid}");
    assert!(count(&mid, "in_flight") >= 1, "{mid}: {seen:?}");

    // Worker 0 (a process of its own) and worker 1 again, at once, through
    // the scheduler's variables.
    let worker = |k: &str, dir: &str| {
        Command::new(bin())
            .args([
                "mirror",
                "--plan",
                p,
                "--worker",
                "auto",
                "--json",
                "--endpoint",
                &url,
            ])
            .args(["-T", "1", "--work-dir", w(dir).to_str().unwrap()])
            .env("JOB_COMPLETION_INDEX", k)
            .env("BREVIS_WORKERS", "2")
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Worker 0's work folder is reached through a symlink: the files it
    // codes must be described as the one machine describes them.
    #[cfg(unix)]
    {
        std::fs::create_dir_all(w("real-w0")).unwrap();
        std::os::unix::fs::symlink(w("real-w0"), w("w0")).unwrap();
    }
    let (a, b) = (worker("0", "w0"), worker("1", "w1"));
    let mut reports = Vec::new();
    for c in [a, b] {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        reports.push(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap());
    }
    assert_eq!(reports[1]["worker"], "1/2");
    assert!(
        reports[1]["units_done_before"].as_u64().unwrap() >= 1,
        "{reports:?}"
    );
    let built: u64 = reports
        .iter()
        .map(|r| r["units_built"].as_u64().unwrap())
        .sum();
    let before: u64 = reports
        .iter()
        .map(|r| r["units_done_before"].as_u64().unwrap())
        .sum();
    assert_eq!(built + before, units);
    assert_eq!(count(&status("s2"), "done"), units as usize);

    // A unit result on the work branch that names other stored bytes than
    // those there is refused, and nothing is committed.
    let c = client(&url, None);
    let id = v["plan"].as_str().unwrap();
    let work_branch = format!("brevis-work-{id}");
    let result_path = format!("brevis.work/{id}/units/0.json");
    let original = tmp.path().join("unit-0.json");
    let none = brevis_hub::Expect::default();
    c.download_file(
        "org/many-brevis",
        &work_branch,
        &result_path,
        &original,
        &none,
        &brevis_core::NoProgress,
    )
    .await
    .unwrap();
    let mut forged: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&original).unwrap()).unwrap();
    forged["stored_sha256"][0] = serde_json::json!("0".repeat(64));
    let put = |data: Vec<u8>| {
        let local = tmp.path().join("put.json");
        std::fs::write(&local, &data).unwrap();
        brevis_hub::UploadFile {
            path_in_repo: result_path.clone(),
            hashes: brevis_hub::hashing::hash_file(&local, true).unwrap(),
            local,
        }
    };
    let up = put(serde_json::to_vec(&forged).unwrap());
    c.upload_files(
        "org/many-brevis",
        &work_branch,
        "forge",
        &[up],
        &[],
        std::sync::Arc::new(brevis_core::NoProgress),
    )
    .await
    .unwrap();
    let refused = Command::new(bin())
        .args(["mirror", "--plan", p, "--commit", "--endpoint", &url])
        .args(["--work-dir", w("c-forged").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("SHA-256"), "{err}");
    assert!(
        c.repo_info("org/many-brevis", "main").await.is_err()
            || c.list_files("org/many-brevis", "main")
                .await
                .unwrap()
                .iter()
                .all(|f| f.path == ".gitattributes"),
        "a refused commit published files"
    );
    let up = put(std::fs::read(&original).unwrap());
    c.upload_files(
        "org/many-brevis",
        &work_branch,
        "restore",
        &[up],
        &[],
        std::sync::Arc::new(brevis_core::NoProgress),
    )
    .await
    .unwrap();

    // The commit, then the same mirror as the one machine made.
    hub(&url, &w("c1"), &["-q", "mirror", "--plan", p, "--commit"]);
    let one = c.list_files("org/one", "main").await.unwrap();
    let scaled = c.list_files("org/many-brevis", "main").await.unwrap();
    let paths = |t: &[brevis_hub::RepoFile]| t.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&one), paths(&scaled));
    assert!(
        one.iter()
            .any(|f| f.path == "tfjs/group1-shard2of3.bin.brv")
    );
    let mut cards = Vec::new();
    for repo in ["org/one", "org/many-brevis"] {
        let d = tmp.path().join(format!("card-{}", repo.replace('/', "-")));
        let none = brevis_hub::Expect::default();
        c.download_file(
            repo,
            "main",
            "README.md",
            &d,
            &none,
            &brevis_core::NoProgress,
        )
        .await
        .unwrap();
        // The model card names its own repo.
        cards.push(
            std::fs::read_to_string(&d)
                .unwrap()
                .replace(repo, "<mirror>"),
        );
    }
    assert_eq!(cards[0], cards[1]);
    for (a, b) in one.iter().zip(&scaled) {
        if a.path != "README.md" {
            assert_eq!(a, b, "{} differs", a.path);
        }
    }
    // The work branch went with the commit; a worker run again finds the
    // mirror made and does nothing.
    assert!(
        matches!(
            c.repo_info("org/many-brevis", &work_branch).await,
            Err(brevis_hub::HubError::RevisionNotFound { .. })
        ),
        "the work branch is left after the commit"
    );
    let late = hub(
        &url,
        &w("late"),
        &["mirror", "--plan", p, "--worker", "0/2", "--json"],
    );
    let late: serde_json::Value = serde_json::from_str(&late).unwrap();
    assert_eq!(late["units_built"], 0, "{late}");
    // A second commit finds the mirror made; the status says so.
    let again = hub(
        &url,
        &w("c2"),
        &["mirror", "--plan", p, "--commit", "--json"],
    );
    assert!(again.contains("\"up_to_date\": true"), "{again}");
    let done = status("s3");
    assert_eq!(
        done["committed"],
        serde_json::json!(["org/many-brevis", "org/small-brevis"])
    );
    // The second repo's mirror holds its shard as an archive.
    let small = c.list_files("org/small-brevis", "main").await.unwrap();
    assert!(
        small.iter().any(|f| f.path == "model.safetensors.brv"),
        "{small:?}"
    );
    srv.shutdown().await;
}

#[test]
fn an_edited_plan_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("plan.json");
    let text = serde_json::json!({
        "plan_version": 1, "tool": "x", "id": "0000000000000000", "level": 6, "budget": null,
        "repos": [{"source": "org/m", "revision": "main", "commit": "a".repeat(40),
                   "dest": "org/m-brevis", "force": false, "files": [], "prior_sha256": null,
                   "up_to_date": false}],
        "units": [],
    });
    std::fs::write(&plan, text.to_string()).unwrap();
    let out = Command::new(bin())
        .args(["mirror", "--plan", plan.to_str().unwrap(), "--status"])
        .args(["--endpoint", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not the hash of its content"), "{err}");
    // Plans sealed with their right id that are still refused: a unit
    // naming a file its repo lacks, a path that climbs out, a file placed
    // as the mirror's own manifest, the destination being the source.
    let file = |path: &str, archive: &str, enc: &str| {
        serde_json::json!({"path": path, "size": 1, "oid": "b".repeat(40),
                           "lfs_sha256": null, "archive": archive, "encoding": enc})
    };
    let repo = |files: serde_json::Value, dest: &str| {
        serde_json::json!([{"source": "org/m", "revision": "main", "commit": "a".repeat(40),
                            "dest": dest, "force": false, "files": files,
                            "prior_sha256": null, "up_to_date": false}])
    };
    let cases = [
        (
            "units",
            serde_json::json!([{"repo": 0, "files": [3], "bytes": 1}]),
            "unit 0",
        ),
        (
            "repos",
            repo(
                serde_json::json!([file("../x", "../x.brv", "brv")]),
                "org/m-brevis",
            ),
            "..",
        ),
        (
            "repos",
            repo(
                serde_json::json!([file("a.json", "brevis.manifest.json", "identity")]),
                "org/m-brevis",
            ),
            "not placed where mirror places it",
        ),
        (
            "repos",
            repo(serde_json::json!([]), "org/m"),
            "the destination is the source",
        ),
    ];
    for (k, v, why) in cases {
        let mut bad = text.clone();
        bad[k] = v;
        let mut sealed: brevis_hub::MirrorPlan = serde_json::from_value(bad).unwrap();
        sealed.id = sealed.content_id();
        sealed.write(&plan).unwrap();
        let out = Command::new(bin())
            .args(["mirror", "--plan", plan.to_str().unwrap(), "--status"])
            .args(["--endpoint", "http://127.0.0.1:9"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{why}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why) && !err.contains("hash"), "{why}: {err}");
    }
}
