//! Regressions of the review of the local commands (`review_NN_*`, NN the
//! defect's number in the review notes): each runs the built binary.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli::{Out, bin, compressed_dir, names_in, run};

const MODEL: &str = "model.safetensors";
const ARCHIVE: &str = "model.safetensors.brv";

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
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..8 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(d.path().join("big.bin"), noise).unwrap();
    let mut child = Command::new(bin())
        .args(["compress", "big.bin", "-T", "1", "--no-prior"])
        .current_dir(d.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let running = child.try_wait().unwrap().is_none();
    // Killed mid-way (SIGKILL: no handler could clean up either).
    let _ = child.kill();
    let _ = child.wait();
    assert!(running, "compress finished before it could be killed");
    assert_eq!(names_in(d.path()), ["big.bin"], "files left behind");
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
    let o = run(p, &["compress", MODEL, "-o", "nodir/x.brv", "--no-prior"]);
    failed_naming(&o, &["nodir/x.brv"]);
    assert!(once(&o.stderr, "No such file or directory"), "{}", o.stderr);
    let o = run(p, &["decompress", ARCHIVE, "-o", "nodir/x"]);
    failed_naming(&o, &["nodir/x"]);
    assert!(once(&o.stderr, "No such file or directory"), "{}", o.stderr);
    let o = run(p, &["decompress", ARCHIVE, "-o", MODEL]);
    failed_naming(&o, &[MODEL]);
    assert!(once(&o.stderr, "already exists"), "{}", o.stderr);
}
