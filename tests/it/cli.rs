//! The `brevis-hub` binary on local files: exit codes (0 ok, 1 mismatch,
//! 2 error, never 101 = panic), refusing to overwrite, JSON output, help.
//!
//! Runs `target/<profile>/brevis-hub`, which `cargo test` does not build:
//! run `cargo build -p brevis-cli` first.

use std::path::{Path, PathBuf};
use std::process::Command;

use brevis_core::Archive;
use brevis_core::DecodeError;
use sha2::Digest;

use crate::archive::harness;

/// The binary beside this test's `deps/` folder.
pub(crate) fn bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe.parent().expect("deps folder").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let p = dir.join(format!("brevis-hub{}", std::env::consts::EXE_SUFFIX));
    assert!(
        p.is_file(),
        "{} not found: run `cargo build -p brevis-cli` first",
        p.display()
    );
    p
}

pub(crate) struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Run the binary in `dir`; fail on a panic (exit 101) or a signal.
pub(crate) fn run(dir: &Path, args: &[&str]) -> Out {
    let o = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("HF_TOKEN")
        .output()
        .expect("running brevis-hub");
    let out = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(
        out.code != 101 && out.code != -1 && !out.stderr.contains("panicked"),
        "brevis-hub {args:?} crashed (exit {}):\n{}",
        out.code,
        out.stderr
    );
    out
}

pub(crate) fn sha256(p: &Path) -> [u8; 32] {
    sha2::Sha256::digest(std::fs::read(p).unwrap()).into()
}

/// A temp dir holding `model.safetensors` (the small synthetic checkpoint).
pub(crate) fn model_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("model.safetensors"),
        harness::sample_safetensors(),
    )
    .unwrap();
    d
}

/// `model_dir()` with `model.safetensors.brv` beside the checkpoint.
pub(crate) fn compressed_dir() -> tempfile::TempDir {
    let d = model_dir();
    let o = run(
        d.path(),
        &["compress", "model.safetensors", "-T", "1", "--no-prior"],
    );
    assert_eq!(o.code, 0, "compress failed: {}", o.stderr);
    d
}

pub(crate) fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn compress_then_decompress_gives_the_same_sha256() {
    let d = compressed_dir();
    let p = d.path();
    assert!(p.join("model.safetensors.brv").is_file());
    let o = run(
        p,
        &[
            "decompress",
            "model.safetensors.brv",
            "-o",
            "restored.safetensors",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        sha256(&p.join("restored.safetensors")),
        sha256(&p.join("model.safetensors"))
    );
    // Without -o the original name comes back (here in another folder).
    std::fs::create_dir(p.join("out")).unwrap();
    std::fs::rename(
        p.join("model.safetensors.brv"),
        p.join("out/model.safetensors.brv"),
    )
    .unwrap();
    let o = run(&p.join("out"), &["decompress", "model.safetensors.brv"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        sha256(&p.join("out/model.safetensors")),
        sha256(&p.join("model.safetensors"))
    );
}

#[test]
fn refuses_to_overwrite_without_force() {
    let d = compressed_dir();
    let p = d.path();
    let brv = p.join("model.safetensors.brv");
    let before = std::fs::read(&brv).unwrap();
    // An existing archive: exit 2, untouched.
    std::fs::write(&brv, b"not an archive, but mine").unwrap();
    let o = run(p, &["compress", "model.safetensors", "--no-prior"]);
    assert_eq!(o.code, 2, "compress over an existing file: {}", o.stderr);
    assert!(o.stderr.contains("exists"), "{}", o.stderr);
    assert_eq!(std::fs::read(&brv).unwrap(), b"not an archive, but mine");
    let o = run(p, &["compress", "model.safetensors", "--no-prior", "-f"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read(&brv).unwrap(), before);
    // An existing decompression target: exit 2, untouched.
    std::fs::write(p.join("restored.safetensors"), b"keep me").unwrap();
    let o = run(
        p,
        &[
            "decompress",
            "model.safetensors.brv",
            "-o",
            "restored.safetensors",
        ],
    );
    assert_eq!(o.code, 2, "decompress over an existing file: {}", o.stderr);
    assert_eq!(
        std::fs::read(p.join("restored.safetensors")).unwrap(),
        b"keep me"
    );
    let o = run(
        p,
        &[
            "decompress",
            "model.safetensors.brv",
            "-o",
            "restored.safetensors",
            "--force",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        sha256(&p.join("restored.safetensors")),
        sha256(&p.join("model.safetensors"))
    );
}

/// A copy of `archive` with one byte in the middle of a region program
/// changed so that the program still parses but decodes to other bytes.
pub(crate) fn corrupt_body(archive: &[u8]) -> Vec<u8> {
    let a = Archive::new(archive).unwrap();
    let mut regions: Vec<_> = a.segments().iter().flat_map(|s| s.regions.iter()).collect();
    regions.sort_by_key(|r| std::cmp::Reverse(r.body_len));
    for r in regions {
        let (start, len) = (r.body_offset as usize, r.body_len as usize);
        let mid = start + len / 2;
        // From the middle outwards.
        let order = (0..len / 2).flat_map(|k| [mid + k, mid - k - 1]);
        for i in order.filter(|&i| i >= start && i < start + len) {
            for x in [0x01u8, 0x10, 0xFF] {
                let mut b = archive.to_vec();
                b[i] ^= x;
                if let Err(DecodeError::Checksum { .. }) = brevis_core::decompress(&b) {
                    return b;
                }
            }
        }
    }
    panic!("no single-byte change of a program gives a checksum mismatch");
}

#[test]
fn verify_exit_codes() {
    let d = compressed_dir();
    let p = d.path();
    let good = std::fs::read(p.join("model.safetensors.brv")).unwrap();

    let o = run(p, &["verify", "model.safetensors.brv"]);
    assert_eq!(o.code, 0, "good archive: {}{}", o.stdout, o.stderr);
    let o = run(
        p,
        &[
            "verify",
            "model.safetensors.brv",
            "--original",
            "model.safetensors",
        ],
    );
    assert_eq!(
        o.code, 0,
        "good archive and its original: {}{}",
        o.stdout, o.stderr
    );

    std::fs::write(p.join("bad.brv"), corrupt_body(&good)).unwrap();
    let o = run(p, &["verify", "bad.brv"]);
    assert_eq!(o.code, 1, "checksum mismatch: {}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("bad.brv"), "{}", o.stdout);

    // One rule: 1 an archive that was read and does not match, 2 one that
    // could not be read at all (truncated, garbled, random bytes).
    std::fs::write(p.join("short.brv"), &good[..good.len() / 2]).unwrap();
    let o = run(p, &["verify", "short.brv"]);
    assert_eq!(o.code, 2, "truncated archive: {}{}", o.stdout, o.stderr);
    assert!(o.stdout.starts_with("ERROR  short.brv"), "{}", o.stdout);

    // A stream that no longer decodes cannot be read either.
    let mut b = good.clone();
    let a = Archive::new(&good[..]).unwrap();
    let r = a
        .segments()
        .iter()
        .flat_map(|s| s.regions.iter())
        .max_by_key(|r| r.body_len)
        .unwrap();
    b[r.body_offset as usize..(r.body_offset + r.body_len) as usize].fill(0xFF);
    assert!(
        matches!(brevis_core::decompress(&b), Err(DecodeError::Corrupt(_))),
        "the garbled program must fail to parse, not only its checksum"
    );
    std::fs::write(p.join("garbled.brv"), &b).unwrap();
    let o = run(p, &["verify", "garbled.brv"]);
    assert_eq!(o.code, 2, "garbled program: {}{}", o.stdout, o.stderr);

    // Random bytes, with and without the magic in front.
    let random = crate::noise(4096);
    std::fs::write(p.join("random.brv"), &random).unwrap();
    let o = run(p, &["verify", "random.brv"]);
    assert_eq!(o.code, 2, "random bytes: {}{}", o.stdout, o.stderr);
    let mut magic = good[..8].to_vec();
    magic.extend_from_slice(&random);
    std::fs::write(p.join("magic.brv"), &magic).unwrap();
    let o = run(p, &["verify", "magic.brv"]);
    assert_eq!(o.code, 2, "magic then random: {}{}", o.stdout, o.stderr);

    std::fs::write(p.join("text.brv"), b"hello, I am not an archive\n").unwrap();
    let o = run(p, &["verify", "text.brv"]);
    assert_eq!(o.code, 2, "not an archive: {}{}", o.stdout, o.stderr);

    std::fs::write(p.join("other.bin"), b"some other file").unwrap();
    let o = run(
        p,
        &["verify", "model.safetensors.brv", "--original", "other.bin"],
    );
    assert_eq!(
        o.code, 1,
        "--original of another file: {}{}",
        o.stdout, o.stderr
    );

    let o = run(p, &["verify", "model.safetensors.brv", "--json"]);
    assert_eq!(o.code, 0);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("verify --json is JSON");
    assert_eq!(v["ok"], true, "{v}");
}

/// A local mirror folder holding `model.safetensors.brv` (an LFS file) and
/// its manifest; the folder of `compressed_dir()`.
fn mirror_folder() -> tempfile::TempDir {
    use brevis_hub::manifest::{MANIFEST_NAME, Source};
    let d = compressed_dir();
    let p = d.path();
    let size = |n: &str| std::fs::metadata(p.join(n)).unwrap().len();
    let m = brevis_hub::Manifest {
        manifest_version: 1,
        tool: "test".into(),
        format_version: 1,
        source: Source {
            repo: "org/model".into(),
            revision: "main".into(),
            commit: "0".repeat(40),
        },
        files: vec![brevis_hub::FileEntry {
            path: "model.safetensors".into(),
            size: size("model.safetensors"),
            sha256: hex::encode(sha256(&p.join("model.safetensors"))),
            git_oid: "0".repeat(40),
            lfs: true,
            encoding: brevis_hub::Encoding::Brv,
            archive: "model.safetensors.brv".into(),
            archive_size: size("model.safetensors.brv"),
        }],
    };
    std::fs::write(p.join(MANIFEST_NAME), m.to_json()).unwrap();
    d
}

/// A mirror follows verify's one rule: an archive read that does not match
/// is `corrupt` (exit 1), one that cannot be read is `unreadable` (exit 2).
#[test]
fn verify_mirror_folder_exit_codes_follow_the_one_rule() {
    let d = mirror_folder();
    let p = d.path();
    let archive = p.join("model.safetensors.brv");
    let good = std::fs::read(&archive).unwrap();
    let status = |o: &Out| -> String {
        let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
        v["files"][0]["status"].as_str().unwrap().to_string()
    };
    let o = run(p, &["verify", ".", "--json"]);
    assert_eq!(o.code, 0, "good mirror: {}{}", o.stdout, o.stderr);
    assert_eq!(status(&o), "ok");

    // A flipped byte in a region: read to the end, a checksum mismatch.
    std::fs::write(&archive, corrupt_body(&good)).unwrap();
    let o = run(p, &["verify", ".", "--json"]);
    assert_eq!(o.code, 1, "flipped byte: {}{}", o.stdout, o.stderr);
    assert_eq!(status(&o), "corrupt");

    // Truncated: it cannot be read at all.
    std::fs::write(&archive, &good[..good.len() / 2]).unwrap();
    let o = run(p, &["verify", ".", "--json"]);
    assert_eq!(o.code, 2, "truncated: {}{}", o.stdout, o.stderr);
    assert_eq!(status(&o), "unreadable");
    let o = run(p, &["verify", "."]);
    assert_eq!(o.code, 2);
    assert!(
        o.stdout.starts_with("unreadable model.safetensors"),
        "{}",
        o.stdout
    );
    assert!(o.stderr.contains("could not be checked"), "{}", o.stderr);

    // Not an archive at all.
    std::fs::write(&archive, b"hello, I am not an archive\n").unwrap();
    let o = run(p, &["verify", ".", "--json"]);
    assert_eq!(o.code, 2, "not an archive: {}{}", o.stdout, o.stderr);
    assert_eq!(status(&o), "unreadable");
}

#[test]
fn inspect_json_lists_tensors() {
    let d = compressed_dir();
    let o = run(d.path(), &["inspect", "model.safetensors.brv", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("inspect --json is JSON");
    let segs = v["segments"].as_array().expect("segments array");
    for t in harness::sample_tensors()
        .iter()
        .filter(|t| !t.data.is_empty())
    {
        let s = segs
            .iter()
            .find(|s| s["name"] == t.name.as_str())
            .unwrap_or_else(|| panic!("tensor {} missing from {v}", t.name));
        assert_eq!(s["dtype"], t.dtype, "{s}");
        assert_eq!(s["kind"], "tensor", "{s}");
        assert!(!s["program"].as_str().unwrap_or("").is_empty(), "{s}");
    }
    assert_eq!(
        v["original_bytes"],
        harness::sample_safetensors().len() as u64
    );
}

#[test]
fn malformed_safetensors_inputs_are_errors() {
    let ok = harness::sample_safetensors();
    let n = u64::from_le_bytes(ok[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&ok[8..8 + n]).unwrap();
    let with_header = |h: &str| {
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(h.as_bytes());
        f.extend_from_slice(&ok[8 + n..]);
        f
    };
    let mut past_eof = ok.clone();
    past_eof[..8].copy_from_slice(&(ok.len() as u64 * 2).to_le_bytes());
    let cases: [(&str, Vec<u8>); 3] = [
        ("past-eof.safetensors", past_eof),
        (
            "bad-json.safetensors",
            with_header(&header.replacen(':', ";", 1)),
        ),
        (
            "bad-offsets.safetensors",
            with_header(&header.replacen("\"data_offsets\":[0,", "\"data_offsets\":[99999999,", 1)),
        ),
    ];
    for (name, bytes) in cases {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(name), &bytes).unwrap();
        let o = run(d.path(), &["compress", name, "--no-prior"]);
        assert_eq!(o.code, 2, "{name}: exit {}: {}", o.code, o.stderr);
        assert!(
            o.stderr.contains(name),
            "{name}: error does not name the file: {}",
            o.stderr
        );
        assert_eq!(names_in(d.path()), [name], "{name}: files left behind");
    }
}

/// Subcommand names listed under `Commands:` in a help text.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn help_of_every_subcommand_has_an_example() {
    let d = tempfile::tempdir().unwrap();
    let top = run(d.path(), &["--help"]);
    assert_eq!(top.code, 0);
    let mut todo: Vec<Vec<String>> = subcommands(&top.stdout)
        .into_iter()
        .map(|c| vec![c])
        .collect();
    assert!(todo.len() >= 6, "{}", top.stdout);
    let mut missing = Vec::new();
    while let Some(cmd) = todo.pop() {
        let mut args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        args.push("--help");
        let o = run(d.path(), &args);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        if !o.stdout.contains("Example") {
            missing.push(cmd.join(" "));
        }
        for sub in subcommands(&o.stdout) {
            let mut c = cmd.clone();
            c.push(sub);
            todo.push(c);
        }
    }
    assert!(missing.is_empty(), "--help without an Example: {missing:?}");
}

/// #14: a safetensors file with a dtype that has no wire id (C64) beside a
/// BF16 tensor compresses (its bytes opaque) and decompresses to the same
/// bytes.
#[test]
fn regression_14_unknown_dtype_round_trips() {
    let tensors = harness::sample_tensors();
    let bf16 = tensors
        .iter()
        .find(|t| t.dtype == "BF16")
        .expect("a BF16 tensor")
        .clone();
    let c64 = harness::TensorSpec {
        name: "spectrum".into(),
        dtype: "C64",
        shape: vec![3, 7],
        data: (0..3 * 7 * 8).map(|i| (i * 37 % 256) as u8).collect(),
        gap_before: 0,
    };
    let bytes = harness::build_safetensors(&[c64, bf16], &[("format", "pt")], b"");
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("c64.safetensors"), &bytes).unwrap();
    let o = run(p, &["compress", "c64.safetensors", "--no-prior", "-T", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = run(
        p,
        &[
            "decompress",
            "c64.safetensors.brv",
            "-o",
            "back.safetensors",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read(p.join("back.safetensors")).unwrap(), bytes);
    // (Which segments the tensors became is checked in brevis-core's
    // layout tests: a file this small may be coded whole.)
}

/// #9: `--prior` takes only a prior file; versions 1 and 2 load.
#[test]
fn regression_9_prior_must_be_a_prior() {
    let d = model_dir();
    let p = d.path();
    for (file, text, why) in [
        (
            "config.json",
            r#"{"architectures": ["BertModel"], "hidden_size": 384}"#,
            "version",
        ),
        ("empty.json", "{}", "version"),
        ("list.json", "[]", "not a JSON object"),
        ("foo.json", r#"{"foo": 1}"#, "version"),
        ("future.json", r#"{"version": 999}"#, "version 999"),
        ("tables.json", r#"{"version": 2, "full": {}}"#, "backoff"),
    ] {
        std::fs::write(p.join(file), text).unwrap();
        let o = run(p, &["compress", "model.safetensors", "--prior", file]);
        assert_eq!(o.code, 2, "{file}: exit {}: {}", o.code, o.stderr);
        assert!(
            o.stderr.contains(file) && o.stderr.contains(why),
            "{file}: {}",
            o.stderr
        );
        assert!(!p.join("model.safetensors.brv").exists(), "{file}");
    }
    // A version-1 prior (no leaf model), as written before version 2.
    std::fs::write(
        p.join("v1.json"),
        r#"{"version": 1, "full": {"BF16|16|top|embed.2d|3": {"Merge": 1}},
            "backoff": {"BF16|16|top": {"Merge": 1}}, "tensors": 1, "source": ["m.safetensors"]}"#,
    )
    .unwrap();
    let o = run(p, &["compress", "model.safetensors", "--prior", "v1.json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // And one written now (version 2).
    let o = run(p, &["prior", "learn", "model.safetensors", "-o", "v2.json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = run(
        p,
        &["compress", "model.safetensors", "--prior", "v2.json", "-f"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// #16: bench JSON has the path, the archive bytes and a total; zstd -19
/// skipped is null (and `-` in the table), not 0.0.
#[test]
fn regression_16_bench_json_paths_totals_and_nulls() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let model = harness::sample_safetensors();
    for sub in ["a", "b"] {
        std::fs::create_dir(p.join(sub)).unwrap();
        std::fs::write(p.join(sub).join("model.safetensors"), &model).unwrap();
    }
    let args = [
        "bench",
        "a/model.safetensors",
        "b/model.safetensors",
        "--no-zstd19",
        "--no-prior",
    ];
    let o = run(p, &[&args[..], &["--json"]].concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("bench --json is JSON");
    let models = v["models"].as_array().expect("models");
    assert_eq!(models.len(), 2);
    let paths: Vec<&str> = models.iter().map(|m| m["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["a/model.safetensors", "b/model.safetensors"]);
    let mut archive = 0;
    for m in models {
        assert!(m["mb_per_s"]["zstd19_compress"].is_null(), "{m}");
        // The codec as peers are timed: one thread and all, compressing
        // with and without the source's SHA-256 given, the decoder alone
        // and with the SHA-256 proof.
        for k in [
            "brevis_compress_1t",
            "brevis_compress_all",
            "brevis_encode_1t",
            "brevis_encode_all",
            "brevis_decode_1t",
            "brevis_decode_all",
            "brevis_decompress_1t",
            "brevis_decompress_all",
        ] {
            assert!(
                m["mb_per_s"][k].as_f64().is_some_and(|x| x > 0.0),
                "{k}: {m}"
            );
        }
        assert!(m["ratio"]["zstd19"].is_null(), "{m}");
        assert!(m["prior_learn_seconds"].is_null(), "{m}");
        let a = m["archive_bytes"].as_u64().expect("archive_bytes");
        assert!(a > 0);
        let ratio = m["ratio"]["brevis"].as_f64().unwrap();
        assert!((ratio - a as f64 / model.len() as f64).abs() < 1e-12, "{m}");
        archive += a;
    }
    let t = &v["total"];
    assert_eq!(t["bytes"], 2 * model.len() as u64, "{t}");
    assert_eq!(t["archive_bytes"], archive, "{t}");
    assert_eq!(t["files"], 2, "{t}");
    let ratio = t["ratio"]["brevis"].as_f64().unwrap();
    assert!((ratio - archive as f64 / (2 * model.len()) as f64).abs() < 1e-12);
    assert!(t["ratio"]["zstd19"].is_null(), "{t}");
    // The table: `-` where nothing was measured, each row told apart.
    let o = run(p, &args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let rows: Vec<&str> = o.stdout.lines().filter(|l| l.contains("/model")).collect();
    assert_eq!(rows.len(), 4, "{}", o.stdout);
    for r in rows {
        if r.contains(" / ") {
            // Speeds: zstd -19 and the prior's learning were not measured.
            assert!(r.ends_with("| - | - |"), "{r}");
        } else {
            assert!(r.contains("| - |"), "{r}");
        }
    }
    assert!(o.stdout.contains("| total |"), "{}", o.stdout);
    // A folder of several files: its decoding on all threads is timed
    // with the files at once, as `decompress` runs them (each alone above).
    for m in models {
        assert_eq!(m["files_decoded_at_once"], false, "{m}");
    }
    let o = run(p, &["bench", ".", "--no-zstd19", "--no-prior", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("bench --json is JSON");
    let m = &v["models"][0];
    assert_eq!(
        (m["files"].as_u64(), &m["files_decoded_at_once"]),
        (Some(2), &serde_json::json!(true)),
        "{m}"
    );
    for k in ["brevis_decode_all", "brevis_decompress_all"] {
        assert!(
            m["mb_per_s"][k].as_f64().is_some_and(|x| x > 0.0),
            "{k}: {m}"
        );
    }
}

/// #21: an empty input has one ratio in JSON (1.0, `brevis_core::ratio`,
/// the field stays a number) in compress, inspect and bench; the text
/// output says it has none (`n/a`, `-` in bench's table).
#[test]
fn regression_21_empty_input_ratio_is_one_in_json_and_na_in_text() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("empty.bin"), b"").unwrap();
    let o = run(p, &["compress", "empty.bin", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["ratio"], 1.0, "{v}");
    assert_eq!(v["ratio"], 1.0, "{v}");
    let o = run(p, &["compress", "empty.bin", "-o", "again.brv"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("0 -> 75 bytes (n/a)"), "{}", o.stderr);
    let o = run(p, &["inspect", "empty.bin.brv"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("(n/a)"), "{}", o.stdout);
    assert!(!o.stdout.contains("1.0000"), "{}", o.stdout);
    let o = run(p, &["bench", "empty.bin", "--no-prior"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("| empty.bin | 0.0 | - | - | - | - |"),
        "{}",
        o.stdout
    );
    let o = run(p, &["bench", "empty.bin", "--json", "--no-prior"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    for r in [&v["models"][0]["ratio"], &v["total"]["ratio"]] {
        for k in ["brevis", "order0_ref", "zstd3", "zstd19"] {
            assert_eq!(r[k], 1.0, "{k}: {v}");
        }
    }
    assert_eq!(v["models"][0]["bytes"], 0, "{v}");
}

/// `inspect`'s table: every column lines up (widths from the cells), the
/// byte counts right-aligned under their headers.
#[test]
fn inspect_table_columns_line_up() {
    let d = compressed_dir();
    let o = run(d.path(), &["inspect", "model.safetensors.brv"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("name"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(lines.len() > 2, "{}", o.stdout);
    let header = lines[0];
    let program = header.find("  program").expect("program column") + 2;
    let after_end = header.find("after").unwrap() + "after".len();
    let before_end = header.find("before").unwrap() + "before".len();
    for l in &lines[1..] {
        assert!(
            l.len() > program && &l[program - 2..program] == "  " && !l[program..].starts_with(' '),
            "program column not at {program}:\n{header}\n{l}"
        );
        for end in [after_end, before_end] {
            assert!(
                l.as_bytes()[end - 1].is_ascii_digit() && l.as_bytes()[end] == b' ',
                "a byte count does not end at {end}:\n{header}\n{l}"
            );
        }
    }
}

/// A `-o` whose folder is missing (or is a file) is refused before any
/// work (no prior learned), naming the path.
#[test]
fn output_in_a_missing_folder_is_refused_before_any_work() {
    let d = model_dir();
    let p = d.path();
    let o = run(p, &["compress", "model.safetensors", "-o", "nope/m.brv"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("nope/m.brv") && o.stderr.contains("the folder nope does not exist"),
        "{}",
        o.stderr
    );
    assert!(
        !o.stderr.contains("learned"),
        "work was done first: {}",
        o.stderr
    );
    let o = run(
        p,
        &["prior", "learn", "model.safetensors", "-o", "nope/p.json"],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("the folder nope does not exist"),
        "{}",
        o.stderr
    );
    std::fs::write(p.join("file"), b"x").unwrap();
    let o = run(p, &["compress", "model.safetensors", "-o", "file/m.brv"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("file is not a folder"), "{}", o.stderr);
    let o = run(p, &["compress", "model.safetensors", "-o", "file/sub/"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("file is not a folder"), "{}", o.stderr);
    assert_eq!(names_in(p), ["file", "model.safetensors"]);
}

/// Files below `dir`, relative, sorted.
pub(crate) fn files_below(dir: &Path) -> Vec<String> {
    fn go(root: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                go(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    go(dir, dir, &mut out);
    out.sort();
    out
}

/// A small model folder: a ~50-byte config.json (mode 0640), an empty
/// file below a subfolder, and the silero-vad checkpoint from testdata.
fn small_files_model(p: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let m = p.join("my-model");
    std::fs::create_dir_all(m.join("sub")).unwrap();
    let config = br#"{"model_type": "silero_vad", "sampling_rate": 16000}"#;
    std::fs::write(m.join("config.json"), config).unwrap();
    std::fs::set_permissions(
        m.join("config.json"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::write(m.join("sub/empty.txt"), b"").unwrap();
    std::fs::copy(
        crate::hub::testdata().join("silero-vad/silero_vad_16k.safetensors"),
        m.join("silero_vad_16k.safetensors"),
    )
    .unwrap();
    m
}

/// Folder mode stores a file whose archive would be no smaller as it is
/// (same bytes and mode, no `.brv`), archives the checkpoint, says so in
/// `--json`; decompress of the packed folder gives back every file.
#[test]
fn folder_compress_stores_small_files_as_is_and_decompress_copies_them() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let m = small_files_model(p);
    let config = std::fs::read(m.join("config.json")).unwrap();
    let o = run(
        p,
        &[
            "compress", "my-model", "-o", "packed", "-T", "1", "--json", "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let packed = p.join("packed");
    assert_eq!(
        files_below(&packed),
        [
            "config.json",
            "silero_vad_16k.safetensors.brv",
            "sub/empty.txt"
        ]
    );
    assert_eq!(std::fs::read(packed.join("config.json")).unwrap(), config);
    let mode = std::fs::metadata(packed.join("config.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    let ckpt = std::fs::metadata(m.join("silero_vad_16k.safetensors"))
        .unwrap()
        .len();
    let brv = std::fs::metadata(packed.join("silero_vad_16k.safetensors.brv"))
        .unwrap()
        .len();
    assert!(brv < ckpt, "{brv} >= {ckpt}");
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("compress --json is JSON");
    let row = |name: &str| {
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["input"].as_str().unwrap().ends_with(name))
            .unwrap_or_else(|| panic!("no row for {name}: {v}"))
            .clone()
    };
    let c = row("config.json");
    assert_eq!(c["stored"], true, "{c}");
    assert_eq!(c["ratio"], 1.0, "{c}");
    assert_eq!(c["archive_bytes"], config.len(), "{c}");
    assert!(
        c["output"]
            .as_str()
            .unwrap()
            .ends_with("packed/config.json"),
        "{c}"
    );
    assert_eq!(row("empty.txt")["stored"], true);
    assert_eq!(row("safetensors")["stored"], false);
    assert_eq!(v["archive_bytes"], config.len() as u64 + brv, "{v}");
    // verify of the folder checks the archive and ignores the rest.
    let o = run(p, &["verify", "packed"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // Back: every file, byte for byte.
    let o = run(p, &["decompress", "packed", "-o", "restored", "-T", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("config.json: copied"), "{}", o.stderr);
    let restored = p.join("restored");
    assert_eq!(files_below(&restored), files_below(&m));
    for f in files_below(&m) {
        assert_eq!(sha256(&restored.join(&f)), sha256(&m.join(&f)), "{f}");
    }
}

/// The text output says a file was stored as is; an existing output under
/// either name is refused up front without --force; a file compressed on
/// its own (or in place, `-o` the folder itself) still gets its archive;
/// decompress copies no file that has its archive beside it.
#[test]
fn stored_as_is_rules_force_single_files_and_in_place() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let m = p.join("c");
    std::fs::create_dir(&m).unwrap();
    let config = br#"{"architectures": ["BertModel"], "hidden_size": 384}"#;
    std::fs::write(m.join("config.json"), config).unwrap();
    std::fs::write(m.join("notes.txt"), b"tiny").unwrap();
    let o = run(p, &["compress", "c", "-o", "out"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("out/config.json: stored as is (52 bytes; its archive would be"),
        "{}",
        o.stderr
    );
    // Again: the stored files exist in out (no .brv does): refused up front.
    let before = std::fs::read(p.join("out/notes.txt")).unwrap();
    std::fs::write(p.join("out/notes.txt"), b"mine").unwrap();
    let o = run(p, &["compress", "c", "-o", "out"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("already exists"), "{}", o.stderr);
    assert_eq!(std::fs::read(p.join("out/notes.txt")).unwrap(), b"mine");
    let o = run(p, &["compress", "c", "-o", "out", "--force"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read(p.join("out/notes.txt")).unwrap(), before);
    assert_eq!(names_in(&p.join("out")), ["config.json", "notes.txt"]);
    // One file on its own: an archive, into a folder or not.
    let o = run(p, &["compress", "c/config.json", "-o", "single/"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(names_in(&p.join("single")), ["config.json.brv"]);
    // In place (-o the input folder): archives beside the inputs, and
    // decompress of that folder restores from the archives only.
    let o = run(p, &["compress", "c", "-o", "c"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        names_in(&m),
        [
            "config.json",
            "config.json.brv",
            "notes.txt",
            "notes.txt.brv"
        ]
    );
    let o = run(p, &["decompress", "c", "-o", "back"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("copied"), "{}", o.stderr);
    assert_eq!(names_in(&p.join("back")), ["config.json", "notes.txt"]);
    assert_eq!(std::fs::read(p.join("back/config.json")).unwrap(), config);
}

/// A JSON-ish text file of about `n` lines (no tensors: coded as bytes).
fn text_file(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "  \"tok_{i}\": {}, \"merge\": \"{} {}\",\n",
                i * 7 % 1000,
                i % 97,
                i % 89
            )
        })
        .collect()
}

#[test]
fn levels_in_zstds_habit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("vocab.json"), text_file(40_000)).unwrap();
    let sizes: Vec<(&str, u64)> = [
        ("default", &[][..]),
        ("six", &["--level", "6"][..]),
        ("one", &["-1"][..]),
        ("fast", &["--fast"][..]),
        ("best", &["--best"][..]),
    ]
    .into_iter()
    .map(|(name, flags)| {
        let out = format!("{name}.brv");
        let mut args = vec!["compress", "vocab.json", "-o", &out, "--json", "-q"];
        args.extend_from_slice(flags);
        let o = run(d, &args);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        let level = j["level"].as_u64().unwrap();
        let want = match name {
            "one" | "fast" => 1,
            "best" => 9,
            _ => 6,
        };
        assert_eq!(level, want, "{args:?}");
        let back = format!("{name}.json");
        let o = run(d, &["decompress", &out, "-o", &back, "-q"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(sha256(&d.join(&back)), sha256(&d.join("vocab.json")));
        (name, std::fs::metadata(d.join(&out)).unwrap().len())
    })
    .collect();
    let size = |n: &str| sizes.iter().find(|(k, _)| *k == n).unwrap().1;
    // The default is level 6; -1 and --fast are level 1, which codes text
    // with a faster zstd: larger.
    assert_eq!(size("default"), size("six"));
    assert_eq!(size("one"), size("fast"));
    assert!(size("one") > size("six"), "{sizes:?}");
    assert!(size("best") <= size("six"), "{sizes:?}");
    // A level and a budget go together.
    let o = run(
        d,
        &[
            "compress",
            "vocab.json",
            "-o",
            "budget.brv",
            "-1",
            "--budget",
            "5",
            "--json",
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        (j["level"].as_u64(), j["budget"].as_u64()),
        (Some(1), Some(5))
    );
    // Out of range, or two levels at once: a usage error, nothing written.
    for bad in [
        &["--level", "0"][..],
        &["--level", "10"],
        &["-1", "--best"],
        &["--fast", "--level", "3"],
    ] {
        let mut args = vec!["compress", "vocab.json", "-o", "bad.brv"];
        args.extend_from_slice(bad);
        let o = run(d, &args);
        assert_eq!(o.code, 2, "{bad:?}: {}", o.stderr);
        assert!(!d.join("bad.brv").exists());
    }
}
