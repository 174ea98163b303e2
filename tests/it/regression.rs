//! Regressions of the review of the local commands (`review_NN_*`, NN the
//! defect's number in the review notes): each runs the built binary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brevis_core::Archive;

use crate::cli::{
    Out, bin, compressed_dir, corrupt_body, files_below, model_dir, names_in, run, sha256,
};

const MODEL: &str = "model.safetensors";
const ARCHIVE: &str = "model.safetensors.brv";

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(ok.success());
}

/// [`run`], but killed after `limit` (exit code -2 then).
fn run_for_at_most(dir: &Path, args: &[&str], limit: Duration) -> Out {
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Out {
                code: -2,
                stdout: String::new(),
                stderr: format!("{args:?} still running after {limit:?}"),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `needle` occurs exactly once in `hay`.
fn once(hay: &str, needle: &str) -> bool {
    hay.matches(needle).count() == 1
}

fn failed_naming(o: &Out, what: &[&str]) {
    assert_eq!(o.code, 2, "stdout {}\nstderr {}", o.stdout, o.stderr);
    for w in what {
        assert!(o.stderr.contains(w), "{w:?} not in: {}", o.stderr);
    }
}

#[test]
fn review_01_a_killed_compress_leaves_no_temp_file() {
    let d = tempfile::tempdir().unwrap();
    // 8 MB of noise as plain bytes: zstd -19 takes seconds on it.
    let noise = crate::noise(8 << 20);
    std::fs::write(d.path().join("big.bin"), noise).unwrap();
    // Killed mid-way (SIGKILL: no handler could clean up either), after a
    // shorter wait each time the run was already over (a fast machine).
    for wait in [400, 100, 20, 5] {
        let mut child = Command::new(bin())
            .args(["compress", "big.bin", "-T", "1", "--no-prior", "-f"])
            .current_dir(d.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(wait));
        let running = child.try_wait().unwrap().is_none();
        let _ = child.kill();
        let _ = child.wait();
        if running {
            assert_eq!(names_in(d.path()), ["big.bin"], "files left behind");
            return;
        }
        let _ = std::fs::remove_file(d.path().join("big.bin.brv"));
    }
    panic!("compress always finished before it could be killed");
}

#[test]
fn review_02_inputs_that_are_not_regular_files_are_refused() {
    let d = compressed_dir();
    let p = d.path();
    let o = run(p, &["compress", "/proc/cpuinfo", "-o", "x.brv"]);
    failed_naming(&o, &["/proc/cpuinfo", "not a regular file"]);
    mkfifo(&p.join("pipe"));
    // Never opened (that would block): refused from its type.
    for cmd in [
        &["compress", "pipe", "-o", "x.brv"][..],
        &["decompress", "pipe", "-o", "x"],
        &["inspect", "pipe"],
        &["verify", "pipe"],
    ] {
        let o = run_for_at_most(p, cmd, Duration::from_secs(20));
        failed_naming(&o, &["pipe", "not a regular file"]);
    }
    // cat model.safetensors | brevis-hub compress /dev/stdin
    let mut child = Command::new(bin())
        .args(["compress", "/dev/stdin", "-o", "x.brv", "--no-prior"])
        .current_dir(p)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let model = std::fs::read(p.join(MODEL)).unwrap();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&model);
    });
    let o = child.wait_with_output().unwrap();
    let _ = feeder.join();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/dev/stdin is not a regular file"),
        "{stderr}"
    );
    assert_eq!(names_in(p), [MODEL, ARCHIVE, "pipe"]);
}

#[test]
fn review_03_an_output_that_is_an_input_is_refused_even_with_force() {
    let d = compressed_dir();
    let p = d.path();
    let (model, archive) = (sha256(&p.join(MODEL)), sha256(&p.join(ARCHIVE)));
    let o = run(p, &["compress", MODEL, "-o", MODEL, "-f", "--no-prior"]);
    failed_naming(&o, &["same file as the input"]);
    let o = run(p, &["decompress", ARCHIVE, "-o", ARCHIVE, "-f"]);
    failed_naming(&o, &["same file as the input"]);
    // Another name of the same file.
    std::fs::hard_link(p.join(MODEL), p.join("link")).unwrap();
    let o = run(p, &["compress", MODEL, "-o", "./link", "-f", "--no-prior"]);
    failed_naming(&o, &["same file as the input"]);
    assert_eq!(sha256(&p.join(MODEL)), model);
    assert_eq!(sha256(&p.join(ARCHIVE)), archive);
    assert_eq!(names_in(p), ["link", MODEL, ARCHIVE]);
}

#[test]
fn review_04_decompress_finds_colliding_outputs_before_writing() {
    let d = compressed_dir();
    let p = d.path();
    for sub in ["a", "b"] {
        std::fs::create_dir(p.join(sub)).unwrap();
        std::fs::copy(p.join(ARCHIVE), p.join(sub).join(ARCHIVE)).unwrap();
    }
    let (a, b) = ("a/model.safetensors.brv", "b/model.safetensors.brv");
    for force in [false, true] {
        let mut args = vec!["decompress", a, b, "-o", "out"];
        if force {
            args.push("-f");
        }
        let o = run(p, &args);
        failed_naming(&o, &["would both be written to", "out/model.safetensors"]);
        assert!(!p.join("out").exists(), "written before the check");
    }
}

#[test]
fn review_05_prior_learn_writes_through_an_atomic_temp_file() {
    let d = model_dir();
    let p = d.path();
    std::fs::write(p.join("q.json.tmp"), b"a file of mine").unwrap();
    let o = run(p, &["prior", "learn", MODEL, "-o", "q.json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read(p.join("q.json.tmp")).unwrap(),
        b"a file of mine"
    );
    assert_eq!(names_in(p), [MODEL, "q.json", "q.json.tmp"]);
    let learned = std::fs::read(p.join("q.json")).unwrap();
    // No clobbering without -f, and never an input.
    let o = run(p, &["prior", "learn", MODEL, "-o", "q.json"]);
    failed_naming(&o, &["q.json already exists"]);
    let o = run(p, &["prior", "learn", MODEL, "-o", MODEL, "-f"]);
    failed_naming(&o, &["same file as the input"]);
    let o = run(p, &["prior", "learn", MODEL, "-o", "q.json", "-f"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read(p.join("q.json")).unwrap(), learned);
    assert_eq!(names_in(p), [MODEL, "q.json", "q.json.tmp"]);
}

#[test]
fn review_06_folders_are_mirrored_below_the_output_folder() {
    let d = model_dir();
    let p = d.path();
    let m = p.join("m");
    std::fs::create_dir_all(m.join("1_Pooling")).unwrap();
    std::fs::copy(p.join(MODEL), m.join(MODEL)).unwrap();
    std::fs::write(m.join("config.json"), b"{\"top\": 1}").unwrap();
    std::fs::write(m.join("1_Pooling/config.json"), b"{\"pooling\": 2}").unwrap();
    let o = run(p, &["compress", "m", "-o", "packed", "-T", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        files_below(&p.join("packed")),
        // The configs are stored as they are: their archives would be
        // bigger than they are.
        [
            "1_Pooling/config.json",
            "config.json",
            "model.safetensors.brv"
        ]
    );
    // And back, the same tree and bytes.
    let o = run(p, &["decompress", "packed", "-o", "restored"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(files_below(&p.join("restored")), files_below(&m));
    for f in files_below(&m) {
        assert_eq!(
            sha256(&p.join("restored").join(&f)),
            sha256(&m.join(&f)),
            "{f}"
        );
    }
    // A folder holding one file: -o is still a folder.
    std::fs::create_dir(p.join("one")).unwrap();
    std::fs::copy(p.join(MODEL), p.join("one").join(MODEL)).unwrap();
    let o = run(p, &["compress", "one", "-o", "one-packed", "--no-prior"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(p.join("one-packed").is_dir());
    assert_eq!(files_below(&p.join("one-packed")), [ARCHIVE]);
}

#[test]
fn review_07_verify_checks_every_argument() {
    let d = compressed_dir();
    let p = d.path();
    std::fs::write(p.join("notes.txt"), b"not an archive").unwrap();
    let o = run(p, &["verify", ARCHIVE, "notes.txt"]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("ERROR  notes.txt"), "{}", o.stdout);
    // An archive by any other name is still one.
    std::fs::copy(p.join(ARCHIVE), p.join("archive.bin")).unwrap();
    let o = run(p, &["verify", "archive.bin"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.starts_with("ok  archive.bin"), "{}", o.stdout);
    // Missing local paths are not Hub repo ids: no network, an error.
    let t = Instant::now();
    for missing in ["missing.brv", "./missing/model", "a/b/c", "/nope/model"] {
        let o = run(p, &["verify", missing]);
        failed_naming(&o, &[missing, "no such file"]);
    }
    // A typo beside a real archive, shaped like a repo id or not: an error
    // row beside the archive's result (in --json too), no network.
    for typo in ["packed/typo", "typo.brv"] {
        let o = run(p, &["verify", ARCHIVE, typo, "--json"]);
        assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
        let files = v["files"].as_array().unwrap();
        assert_eq!(files.len(), 2, "{v}");
        assert_eq!(files[0]["ok"], true, "{v}");
        assert!(
            files[1]["error"].as_str().unwrap().contains("no such file"),
            "{v}"
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "went to the network?"
    );
    // A folder is scanned for archives.
    std::fs::create_dir(p.join("sub")).unwrap();
    std::fs::copy(p.join(ARCHIVE), p.join("sub/x.brv")).unwrap();
    let o = run(p, &["verify", "sub"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("sub/x.brv"), "{}", o.stdout);
}

#[test]
fn review_10_threads_are_capped() {
    let d = compressed_dir();
    let t = Instant::now();
    let o = run(d.path(), &["decompress", ARCHIVE, "-o", "x", "-T", "2000"]);
    failed_naming(&o, &["2000", "1024"]);
    let o = run(d.path(), &["decompress", ARCHIVE, "-o", "x", "-T", "1024"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[test]
fn review_11_an_io_error_is_printed_once() {
    let d = compressed_dir();
    let p = d.path();
    // A missing folder is refused before any work, in words of our own.
    let o = run(p, &["compress", MODEL, "-o", "nodir/x.brv", "--no-prior"]);
    failed_naming(&o, &["nodir/x.brv"]);
    assert!(once(&o.stderr, "does not exist"), "{}", o.stderr);
    // The system's own error (a folder no file can be created in).
    let o = run(p, &["compress", MODEL, "-o", "/proc/x.brv", "--no-prior"]);
    failed_naming(&o, &["/proc/x.brv"]);
    assert!(once(&o.stderr, "No such file or directory"), "{}", o.stderr);
    let o = run(p, &["decompress", ARCHIVE, "-o", "/proc/x"]);
    failed_naming(&o, &["/proc/x"]);
    assert!(once(&o.stderr, "No such file or directory"), "{}", o.stderr);
    let o = run(p, &["decompress", ARCHIVE, "-o", MODEL]);
    failed_naming(&o, &[MODEL]);
    assert!(once(&o.stderr, "already exists"), "{}", o.stderr);
}

#[test]
fn review_12_inspect_errors_name_the_archive() {
    let d = compressed_dir();
    let p = d.path();
    let mut bytes = std::fs::read(p.join(ARCHIVE)).unwrap();
    let at = {
        let a = Archive::new(&bytes[..]).unwrap();
        a.segments()[0].regions[0].body_offset as usize
    };
    bytes[at] = 0xFE; // no such node tag
    std::fs::write(p.join("bad.brv"), bytes).unwrap();
    let o = run(p, &["inspect", "bad.brv"]);
    failed_naming(&o, &["bad.brv"]);
}

#[test]
fn review_13_compress_says_which_inputs_were_skipped() {
    let d = compressed_dir();
    let o = run(d.path(), &["compress", ARCHIVE]);
    failed_naming(&o, &["model.safetensors.brv is already a Brevis archive"]);
}

#[test]
fn review_17_verify_json_has_fields_and_errors() {
    let d = compressed_dir();
    let p = d.path();
    let model = std::fs::read(p.join(MODEL)).unwrap();
    let o = run(p, &["verify", ARCHIVE, "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let f = &v["files"][0];
    assert_eq!(f["path"], ARCHIVE, "{v}");
    assert_eq!(f["ok"], true, "{v}");
    assert_eq!(f["sha256"], hex::encode(sha256(&p.join(MODEL))), "{v}");
    assert_eq!(f["size"], model.len() as u64, "{v}");
    // A failing argument: JSON still, with what was checked and the error.
    let o = run(p, &["verify", ARCHIVE, "--original", "missing", "--json"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON on error");
    assert_eq!(v["ok"], false, "{v}");
    let files = v["files"].as_array().unwrap();
    assert!(
        files
            .iter()
            .any(|f| f["path"] == ARCHIVE && f["ok"] == true),
        "{v}"
    );
    assert!(
        files
            .iter()
            .any(|f| f["path"] == "missing" && f["error"].is_string()),
        "{v}"
    );
}

#[test]
fn review_18_verify_quiet_prints_only_problems() {
    let d = compressed_dir();
    let p = d.path();
    let o = run(p, &["verify", "-q", ARCHIVE]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "");
    let good = std::fs::read(p.join(ARCHIVE)).unwrap();
    std::fs::write(p.join("bad.brv"), corrupt_body(&good)).unwrap();
    let o = run(p, &["verify", "-q", ARCHIVE, "bad.brv"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stdout.starts_with("MISMATCH  bad.brv"), "{}", o.stdout);
    assert_eq!(o.stdout.lines().count(), 1, "{}", o.stdout);
}

#[test]
fn review_19_symlinked_folders_are_not_followed_and_dangling_links_named() {
    let d = model_dir();
    let p = d.path();
    let m = p.join("m");
    std::fs::create_dir_all(m.join("sub")).unwrap();
    std::fs::copy(p.join(MODEL), m.join("sub").join(MODEL)).unwrap();
    std::os::unix::fs::symlink("..", m.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("../model.safetensors", m.join("linked.safetensors")).unwrap();
    let o = run(p, &["compress", "m", "-o", "out", "--no-prior"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        files_below(&p.join("out")),
        ["linked.safetensors.brv", "sub/model.safetensors.brv"]
    );
    std::os::unix::fs::symlink("nowhere", m.join("dangling")).unwrap();
    let o = run(p, &["compress", "m", "-o", "out2", "--no-prior"]);
    failed_naming(&o, &["m/dangling", "dangling symlink"]);
    assert!(!p.join("out2").exists(), "written before the check");
}

#[test]
fn review_20_decompress_names_an_archive_without_brv_suffix() {
    let d = compressed_dir();
    let p = d.path();
    std::fs::copy(p.join(ARCHIVE), p.join("A.bin")).unwrap();
    let o = run(p, &["decompress", "A.bin", "-o", "out/"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(sha256(&p.join("out/A.bin.out")), sha256(&p.join(MODEL)));
}

/// A file name that is not UTF-8 names its archive and its restored file
/// byte for byte, and is reported (lossily) in `--json`, not a panic of
/// the JSON encoder.
#[test]
fn non_utf8_file_names_survive_and_are_reported() {
    use std::os::unix::ffi::OsStrExt;
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("in");
    std::fs::create_dir(&src).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"a\xffb.safetensors");
    let m = model_dir();
    std::fs::copy(m.path().join(MODEL), src.join(name)).unwrap();
    let o = run(d.path(), &["compress", "in", "-o", "out", "--json", "-q"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("compress --json is JSON");
    assert!(v.to_string().contains("a\u{fffd}b.safetensors"), "{v}");
    let o = run(d.path(), &["verify", "out", "--json"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("verify --json is JSON");
    assert_eq!(v["ok"], true, "{v}");
    // The names themselves survive, byte for byte, both ways.
    let mut archive = name.to_owned();
    archive.push(".brv");
    assert!(d.path().join("out").join(&archive).is_file());
    let o = run(d.path(), &["decompress", "out", "-o", "back", "-q"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(
        std::fs::read(d.path().join("back").join(name)).unwrap(),
        std::fs::read(src.join(name)).unwrap()
    );
}

/// One file named twice (`a` and `./a`) is taken once, not coded twice or
/// refused half-way after its first output was written.
#[test]
fn a_file_named_twice_is_taken_once() {
    let d = model_dir();
    let p = d.path();
    let dot = format!("./{MODEL}");
    let o = run(p, &["compress", MODEL, &dot, "--no-prior"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("again"), "{}", o.stderr);
    let o = run(
        p,
        &["decompress", ARCHIVE, &format!("./{ARCHIVE}"), "-o", "back"],
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(sha256(&p.join("back")), sha256(&p.join(MODEL)));
}

/// A private source stays private: its archive and the file restored from
/// it get its permission bits (as cp, zstd and gzip give them).
#[test]
fn outputs_keep_the_source_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let d = model_dir();
    let p = d.path();
    let mode = |f: &str| std::fs::metadata(p.join(f)).unwrap().permissions().mode() & 0o777;
    std::fs::set_permissions(p.join(MODEL), std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(p, &["compress", MODEL, "--no-prior", "-q"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(mode(ARCHIVE), 0o600);
    let o = run(p, &["decompress", ARCHIVE, "-o", "back", "-q"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(mode("back"), 0o600);
}
