//! Regressions of the review of the local commands (`review_NN_*`, NN the
//! defect's number in the review notes): each runs the built binary.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cli::{bin, names_in};

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
