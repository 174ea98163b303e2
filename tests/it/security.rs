//! `brevis-hub serve` attacked as an attacker would (issue 27): identifiers
//! that are paths, forged and replayed upload tickets, oversized and
//! trickling bodies, many slow readers of decoded files, too many
//! connections, and what a killed upload leaves behind. Each test checks the
//! status codes and that nothing outside the store is read or written.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use brevis_hub::MirrorOptions;
use brevis_hub::server::{self, Limits, ServerOptions, Store};
use sha2::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::hub::{any_addr, cli, cli_binary, client, forget_source, seed_dir, serve};
use crate::wire::{Raw, exchange, parse};

const WRITE: &str = "w-token";
const READ: &str = "r-token";

/// A connection to `addr` from `local` (any 127.x.y.z: Linux routes all of
/// 127/8 to loopback, so tests can stand for many clients).
async fn connect_from(addr: SocketAddr, local: Ipv4Addr) -> tokio::net::TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(local.into(), 0)).unwrap();
    sock.connect(addr).await.unwrap()
}

/// Send one request (`connection: close`) with `body` and read the whole
/// answer (the body is written beside the reading, so an early answer to a
/// body the server stops reading is still seen).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &str,
    body: Vec<u8>,
) -> Raw {
    let s = connect_from(addr, Ipv4Addr::LOCALHOST).await;
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let length = if extra.contains("content-length") || extra.contains("transfer-encoding") {
        String::new()
    } else {
        format!("content-length: {}\r\n", body.len())
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}{length}{extra}connection: close\r\n\r\n"
    );
    exchange(s, head, body).await
}

async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Raw {
    request(addr, "GET", path, token, "", Vec::new()).await
}

async fn post(addr: SocketAddr, path: &str, token: Option<&str>, body: &str) -> Raw {
    request(addr, "POST", path, token, "", body.as_bytes().to_vec()).await
}

/// Every file under `dir` (relative paths), skipping the folder `skip`.
fn tree(dir: &Path, skip: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p == skip {
                continue;
            }
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out
}

/// A temp folder holding `store/` and `outside/secret.txt` (a file the
/// server must never serve), with a server over the store: write token
/// [`WRITE`], read token [`READ`] (or open, without `tokens`), and a
/// public repo `org/pub`.
struct Scene {
    tmp: tempfile::TempDir,
    srv: server::RunningServer,
    before: BTreeSet<PathBuf>,
}

const SECRET: &[u8] = b"the host's own secret, never to be served\n";

impl Scene {
    async fn new(tokens: bool, opts: impl FnOnce(ServerOptions) -> ServerOptions) -> Scene {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret.txt"), SECRET).unwrap();
        let srv = serve(&tmp.path().join("store"), &[], |o| {
            let o = if tokens {
                o.token(WRITE).read_token(READ)
            } else {
                o
            };
            opts(o)
        })
        .await;
        let r = post(
            srv.addr(),
            "/api/repos/create",
            Some(WRITE),
            r#"{"name":"pub","organization":"org","type":"model"}"#,
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        let before = tree(tmp.path(), &tmp.path().join("store"));
        Scene { tmp, srv, before }
    }

    fn store(&self) -> PathBuf {
        self.tmp.path().join("store")
    }

    fn addr(&self) -> SocketAddr {
        self.srv.addr()
    }

    /// Nothing outside the store changed; the outside file is intact.
    fn assert_outside_untouched(&self) {
        assert_eq!(
            tree(self.tmp.path(), &self.store()),
            self.before,
            "files appeared outside the store"
        );
        assert_eq!(
            std::fs::read(self.tmp.path().join("outside/secret.txt")).unwrap(),
            SECRET
        );
        // Nor beside the temp folder (a write that climbs further).
        let parent = self.tmp.path().parent().unwrap();
        assert!(!parent.join("pwned").exists());
    }
}

fn sha_hex(b: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(b))
}

fn commit_body(lines: &[String]) -> String {
    let mut b = r#"{"key":"header","value":{"summary":"attack"}}"#.to_string();
    for l in lines {
        b.push('\n');
        b.push_str(l);
    }
    b + "\n"
}

/// (1) A commit naming a host file (or the store's own secret) as an LFS
/// object was accepted and then served to anyone: now refused at the edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lfs_oid_that_is_a_path_is_refused() {
    for tokens in [true, false] {
        let sc = Scene::new(tokens, |o| o).await;
        let outside = sc.tmp.path().join("outside/secret.txt");
        for oid in [
            outside.display().to_string(),
            "./../secret".to_string(),
            "../../outside/secret.txt".to_string(),
            format!("{}/../../secret", "a".repeat(40)),
            "A".repeat(63) + "/",
        ] {
            let line =
                serde_json::json!({"key": "lfsFile", "value": {"path": "leak.bin", "oid": oid}});
            let r = post(
                sc.addr(),
                "/api/models/org/pub/commit/main",
                Some(WRITE),
                &commit_body(&[line.to_string()]),
            )
            .await;
            assert_eq!(r.status, 400, "oid {oid:?}: {r:?}");
            let r = get(sc.addr(), "/org/pub/resolve/main/leak.bin", None).await;
            assert_eq!(r.status, 404, "oid {oid:?}");
            assert!(!r.body.windows(SECRET.len()).any(|w| w == SECRET));
        }
        // The ticket key is not a file any request can name.
        for p in [
            "/secret",
            "/../secret",
            "/%2e%2e/secret",
            "/org/pub/resolve/main/..%2Fsecret",
        ] {
            let r = get(sc.addr(), p, Some(WRITE)).await;
            assert!((400..500).contains(&r.status), "{p}: {r:?}");
        }
        sc.assert_outside_untouched();
        sc.srv.shutdown().await;
    }
}

/// The upload URLs the batch API answers for one object.
async fn batch(addr: SocketAddr, oid: &str, size: u64) -> serde_json::Value {
    let body = serde_json::json!({"operation": "upload", "transfers": ["basic", "multipart"],
        "objects": [{"oid": oid, "size": size}], "hash_algo": "sha256"});
    let r = post(
        addr,
        "/org/pub.git/info/lfs/objects/batch",
        Some(WRITE),
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["objects"][0]["actions"].clone()
}

/// The path and query of an absolute URL.
fn path_of(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    rest[rest.find('/').unwrap()..].to_string()
}

/// (2) Tickets were `sha256(secret || oid)` and the part folder was built
/// from the URL: with the secret, anyone could write outside the store.
/// Now a ticket is an HMAC over repo, oid, size, part size and expiry, and
/// good only for its own object's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_tickets_are_bound_to_their_object() {
    let sc = Scene::new(true, |o| o.multipart(16, 8)).await;
    let addr = sc.addr();
    let store = Store::open(&sc.store()).unwrap();
    // The old attack, with any 32-digit ticket: refused, nothing written.
    let forged = "0123456789abcdef0123456789abcdef";
    for p in [
        format!("/lfs-upload/%2F..%2F..%2F..%2Fpwned/{forged}/part/1"),
        format!("/lfs-upload/..%2F..%2Fpwned/{forged}"),
        format!("/lfs-upload/{}/{forged}", "a".repeat(64)),
    ] {
        let r = request(addr, "PUT", &p, None, "", b"pwned".to_vec()).await;
        assert_eq!(r.status, 403, "{p}: {r:?}");
    }

    // A basic upload: its own bytes only.
    let good = b"hello".to_vec();
    let evil = b"world".to_vec();
    let (good_oid, evil_oid) = (sha_hex(&good), sha_hex(&evil));
    let actions = batch(addr, &good_oid, 5).await;
    let href = path_of(actions["upload"]["href"].as_str().unwrap());
    // Another object's bytes through it (same length): refused, not stored.
    let r = request(addr, "PUT", &href, None, "", evil.clone()).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!store.has_object(&evil_oid.parse().unwrap(), 5));
    // The ticket with another oid, size or repo put in: forged.
    for (from, to) in [
        (good_oid.as_str(), evil_oid.as_str()),
        ("/5/", "/6/"),
        ("/org/pub/", "/org/other/"),
    ] {
        let p = href.replacen(from, to, 1);
        assert_ne!(p, href);
        let r = request(addr, "PUT", &p, None, "", evil.clone()).await;
        assert_eq!(r.status, 403, "{p}: {r:?}");
    }
    // Longer than the ticket says, by its length or its bytes.
    let r = request(addr, "PUT", &href, None, "", b"hello!".to_vec()).await;
    assert!(matches!(r.status, 400 | 413), "{r:?}");
    let r = request(
        addr,
        "PUT",
        &href,
        None,
        "transfer-encoding: chunked\r\n",
        b"6\r\nhello!\r\n0\r\n\r\n".to_vec(),
    )
    .await;
    assert_eq!(r.status, 413, "{r:?}");
    // The right bytes: stored.
    let r = request(addr, "PUT", &href, None, "", good.clone()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(store.has_object(&good_oid.parse().unwrap(), 5));
    // Verify through the ticket.
    let verify = path_of(actions["verify"]["href"].as_str().unwrap());
    let r = post(
        addr,
        &verify,
        None,
        &format!(r#"{{"oid":"{good_oid}","size":5}}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");

    // Multipart: 20 bytes in parts of 8; a part is exactly its length.
    let data: Vec<u8> = (0..20u8).collect();
    let oid = sha_hex(&data);
    let actions = batch(addr, &oid, 20).await;
    let header = &actions["upload"]["header"];
    assert_eq!(header["chunk_size"], "8");
    let part = |n: u32| path_of(header[n.to_string()].as_str().unwrap());
    let past = part(3).replace("/part/3", "/part/4");
    let r = request(addr, "PUT", &past, None, "", data[..4].to_vec()).await;
    assert_eq!(r.status, 400, "part past the last: {r:?}");
    let r = request(addr, "PUT", &part(1), None, "", data[..9].to_vec()).await;
    assert!(matches!(r.status, 400 | 413), "a part too long: {r:?}");
    let r = request(addr, "PUT", &part(1), None, "", data[..7].to_vec()).await;
    assert_eq!(r.status, 400, "a part too short: {r:?}");
    for (n, range) in [(1, 0..8), (2, 8..16), (3, 16..20)] {
        let r = request(addr, "PUT", &part(n), None, "", data[range].to_vec()).await;
        assert_eq!(r.status, 200, "part {n}: {r:?}");
    }
    let done = path_of(actions["upload"]["href"].as_str().unwrap());
    let r = post(
        addr,
        &done,
        None,
        r#"{"parts":[{"partNumber":1},{"partNumber":3}]}"#,
    )
    .await;
    assert_eq!(r.status, 400, "parts missing: {r:?}");
    let r = post(
        addr,
        &done,
        None,
        r#"{"parts":[{"partNumber":1},{"partNumber":2},{"partNumber":3}]}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(store.has_object(&oid.parse().unwrap(), 20));
    assert!(!store.parts_dir(&oid.parse().unwrap()).exists());
    // A small batch asking for huge objects, or many: bounded answers.
    let huge: Vec<_> = (0..20)
        .map(|i| serde_json::json!({"oid": format!("{i:064x}"), "size": 1u64 << 50}))
        .collect();
    let many: Vec<_> = (0..1001)
        .map(|i| serde_json::json!({"oid": format!("{i:064x}"), "size": 1}))
        .collect();
    let parts: Vec<_> = (0..20)
        .map(|i| serde_json::json!({"oid": format!("{i:064x}"), "size": 1u64 << 39}))
        .collect();
    for (objects, want) in [(huge, 200), (many, 413), (parts, 413)] {
        let body = serde_json::json!({"operation": "upload", "objects": objects});
        let r = post(
            addr,
            "/org/pub.git/info/lfs/objects/batch",
            Some(WRITE),
            &body.to_string(),
        )
        .await;
        assert_eq!(
            r.status,
            want,
            "{}",
            String::from_utf8_lossy(&r.body[..r.body.len().min(300)])
        );
        assert!(
            r.body.len() < 1 << 20,
            "an answer of {} bytes",
            r.body.len()
        );
    }
    sc.assert_outside_untouched();
    sc.srv.shutdown().await;
}

/// A private repo is hidden from anonymous readers whenever the server has
/// tokens, read-only ones included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_repos_are_hidden_with_only_read_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = Store::open(&root).unwrap();
    store
        .create_repo(&"org/secret".parse().unwrap(), true)
        .unwrap();
    let srv = serve(&root, &[], |o| o.read_token(READ)).await;
    assert_eq!(
        get(srv.addr(), "/api/models/org/secret", None).await.status,
        404
    );
    assert_eq!(
        get(srv.addr(), "/api/models/org/secret", Some(READ))
            .await
            .status,
        200
    );
    srv.shutdown().await;
}

/// (5) Every endpoint with identifiers that are paths, overlong, not hex,
/// not UTF-8, or unicode: a 4xx, never a 2xx or 5xx, and nothing written
/// outside the store or in a new folder inside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_identifiers_on_every_endpoint_are_refused() {
    let sc = Scene::new(true, |o| o).await;
    let addr = sc.addr();
    let long = "x".repeat(3000);
    let ids = [
        "..",
        "%2e%2e",
        "..%2F..%2Foutside",
        "%2Fetc%2Fpasswd",
        "a%00b",
        "%C3%28",
        "%E2%80%AE",
        long.as_str(),
        "%5C..%5Cx",
        ".git",
        "refs%2F..%2Fx",
        "x.lock",
        "%2E%2E%2F%2E%2E%2Fsecret",
    ];
    let templates = [
        ("GET", "/api/models/{}/{}"),
        ("GET", "/api/models/org/pub/revision/{}"),
        ("GET", "/api/models/org/{}/refs"),
        ("GET", "/api/models/org/pub/tree/{}/{}"),
        ("GET", "/api/models/org/pub/tree/main/{}"),
        ("GET", "/org/pub/resolve/{}/{}"),
        ("HEAD", "/{}/{}/resolve/main/a"),
        ("POST", "/api/models/org/{}/commit/main"),
        ("POST", "/api/models/org/pub/commit/{}"),
        ("POST", "/api/models/org/pub/preupload/{}"),
        ("POST", "/api/models/org/pub/branch/{}"),
        ("POST", "/{}/{}.git/info/lfs/objects/batch"),
        ("PUT", "/lfs-upload/{}/{}"),
        ("PUT", "/lfs-upload/org/pub/{}/1/1/1/{}/part/1"),
        ("PUT", "/lfs-upload/org/pub/{}/1/1/1/{}/part/{}"),
        ("POST", "/lfs-upload/{}"),
        ("POST", "/lfs-verify/{}/{}"),
    ];
    let mut n = 0;
    for (m, t) in templates {
        for id in &ids {
            let p = t.replace("{}", id);
            let body = r#"{"files":[],"operation":"upload","objects":[]}"#.to_string();
            let r = request(addr, m, &p, Some(WRITE), "", body.into_bytes()).await;
            assert!(
                (400..500).contains(&r.status),
                "{m} {}: {}",
                &p[..p.len().min(120)],
                r.status
            );
            n += 1;
        }
    }
    assert!(n > 200);
    // Inside the store: only the one repo's folder.
    let models: Vec<_> = std::fs::read_dir(sc.store().join("models"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(models, vec![std::ffi::OsString::from("org")]);
    let branches = std::fs::read_dir(sc.store().join("models/org/pub/refs/heads"))
        .unwrap()
        .count();
    assert_eq!(branches, 1, "a branch was made");
    // A branch below a branch that is a file: missing, not a server error.
    let r = post(addr, "/api/models/org/pub/branch/a", Some(WRITE), "{}").await;
    assert_eq!(r.status, 200, "{r:?}");
    for p in [
        "/api/models/org/pub/revision/a%2Fb",
        "/org/pub/resolve/a%2Fb/x",
    ] {
        assert_eq!(get(addr, p, Some(WRITE)).await.status, 404, "{p}");
    }
    // And a branch that is a folder of branches: missing too, and no path
    // of the server's disk in any answer.
    let r = post(addr, "/api/models/org/pub/branch/c%2Fd", Some(WRITE), "{}").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = get(addr, "/api/models/org/pub/revision/c", Some(WRITE)).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(!String::from_utf8_lossy(&r.body).contains("/tmp"), "{r:?}");
    sc.assert_outside_untouched();
    sc.srv.shutdown().await;
}

/// (3, 5) A commit body is bounded (413 from its `Content-Length` before
/// any of it is read, or once too much has come), its lines too, and a body
/// that stops sending is cut (408); the server goes on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_trickling_bodies_are_cut() {
    let sc = Scene::new(true, |o| {
        o.limits(Limits::default().body_idle_timeout(Duration::from_millis(300)))
    })
    .await;
    let addr = sc.addr();
    let commit = "/api/models/org/pub/commit/main";
    // Said to be 200 MB: refused at once, without reading a byte.
    let t = std::time::Instant::now();
    let r = request(
        addr,
        "POST",
        commit,
        Some(WRITE),
        "content-length: 200000000\r\n",
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, 413, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
    // Chunked, one line longer than any a commit may hold.
    let line = vec![b'A'; (server::limits::MAX_COMMIT_LINE + (1 << 20)) as usize];
    let mut chunked = Vec::new();
    for c in line.chunks(1 << 20) {
        chunked.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        chunked.extend_from_slice(c);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = request(
        addr,
        "POST",
        commit,
        Some(WRITE),
        "transfer-encoding: chunked\r\n",
        chunked,
    )
    .await;
    assert_eq!(r.status, 413, "{r:?}");
    // A preupload body over its limit.
    let big = format!(r#"{{"files":[],"x":"{}"}}"#, "y".repeat(5 << 20));
    let r = post(
        addr,
        "/api/models/org/pub/preupload/main",
        Some(WRITE),
        &big,
    )
    .await;
    assert_eq!(r.status, 413);
    // A regular file over the limit inside a commit: told to use LFS.
    let huge = serde_json::json!({"key": "file", "value": {"path": "a.txt", "encoding": "base64",
        "content": "A".repeat((server::limits::MAX_REGULAR_FILE as usize / 3 + 8) * 4)}});
    let r = post(addr, commit, Some(WRITE), &commit_body(&[huge.to_string()])).await;
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("LFS"), "{r:?}");
    // Trickling: a few bytes, then nothing.
    let mut trickles = Vec::new();
    for _ in 0..20 {
        trickles.push(tokio::spawn(async move {
            let mut s = connect_from(addr, Ipv4Addr::LOCALHOST).await;
            let head = format!(
                "POST {commit} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {WRITE}\r\ncontent-length: 1000\r\n\r\n{{\"key\""
            );
            s.write_all(head.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            let r = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
            (r.is_ok(), parse(&out).status)
        }));
    }
    for t in trickles {
        assert_eq!(t.await.unwrap(), (true, 408));
    }
    // Still serving.
    let r = get(addr, "/api/models/org/pub", None).await;
    assert_eq!(r.status, 200);
    sc.assert_outside_untouched();
    sc.srv.shutdown().await;
}

/// (5) Temp files and part folders of uploads a killed server left are
/// removed when a server starts on the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_leftovers_are_removed_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = Store::open(&root).unwrap();
    std::fs::write(store.tmp_dir().join(".tmpKILLED"), vec![7u8; 4096]).unwrap();
    let oid = "b".repeat(64).parse().unwrap();
    std::fs::create_dir_all(store.parts_dir(&oid)).unwrap();
    std::fs::write(store.parts_dir(&oid).join("00000001"), b"part").unwrap();
    let srv = serve(&root, &[], |o| o).await;
    assert_eq!(std::fs::read_dir(store.tmp_dir()).unwrap().count(), 0);
    // One server a store.
    assert!(
        server::start(ServerOptions::new(&root), any_addr())
            .await
            .is_err()
    );
    srv.shutdown().await;
}

/// `VmHWM` (peak resident memory) and `Threads` of process `pid`, from
/// `/proc`.
#[cfg(target_os = "linux")]
fn peak_rss_and_threads(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:") * 1024, field("Threads:"))
}

/// A model folder whose `model.safetensors` holds the seed checkpoint's
/// tensors `copies` times over (real weights; the copies cost the encoder
/// little, as references, and the decoder their full size); returns the
/// file's SHA-256.
fn big_seed(dir: &Path, copies: usize) -> String {
    let src = std::fs::read(seed_dir().join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(src[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&src[8..8 + n]).unwrap();
    let data = &src[8 + n..];
    let mut out_header = serde_json::Map::new();
    let mut body = Vec::new();
    for k in 0..copies {
        for (name, t) in &header {
            if name == "__metadata__" {
                continue;
            }
            let offs = t["data_offsets"].as_array().unwrap();
            let (a, b) = (
                offs[0].as_u64().unwrap() as usize,
                offs[1].as_u64().unwrap() as usize,
            );
            let mut t = t.clone();
            t["data_offsets"] = serde_json::json!([body.len(), body.len() + b - a]);
            body.extend_from_slice(&data[a..b]);
            out_header.insert(format!("copy{k}.{name}"), t);
        }
    }
    let mut h = serde_json::to_vec(&out_header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&h);
    file.extend_from_slice(&body);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), &file).unwrap();
    std::fs::copy(seed_dir().join("config.json"), dir.join("config.json")).unwrap();
    sha_hex(&file)
}

/// The stated bound on `serve`'s peak memory under attack (README,
/// "Security").
const SERVE_PEAK_RSS: u64 = 300 << 20;

/// (4) Many slow readers of a file decoded on the fly: at most
/// `--max-decoded-streams` decode at once, the others wait and then get 503
/// with `Retry-After`; memory and threads stay bounded; once they leave the
/// file is served whole again. Also (5) the per-address connection cap.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_of_decoded_files_are_bounded() {
    let Some(bin) = cli_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    // Mirror a seed too large to sit in socket buffers in an in-process
    // server, then forget the source so the binary serves it decoded.
    let seed = tmp.path().join("seed");
    let want = big_seed(&seed, 12);
    {
        let srv = serve(&root, &[("org/model", &seed)], |o| o).await;
        let c = client(&srv.url(), None);
        brevis_hub::mirror(
            &c,
            &c,
            &MirrorOptions::new("org/model", tmp.path().join("w")),
        )
        .await
        .unwrap();
        srv.shutdown().await;
    }
    forget_source(tmp.path());
    let mut child = cli(&bin, &tmp.path().join("home"))
        .args(["serve", "--root"])
        .arg(&root)
        .args([
            "--addr",
            "127.0.0.1:0",
            "--max-decoded-streams",
            "2",
            "--decode-queue-wait-ms",
            "500",
            "--max-connections-per-addr",
            "16",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim()
            .strip_prefix("listening on http://")
            .unwrap()
            .parse()
            .unwrap()
    };
    let path = "/org/model/resolve/main/model.safetensors";
    // 48 readers from 8 addresses (6 each, under the per-address cap), each
    // with a small receive window, reading the status line and then nothing.
    let mut readers = Vec::new();
    for i in 0..48u8 {
        let local = Ipv4Addr::new(127, 0, 0, 2 + i % 8);
        readers.push(tokio::spawn(async move {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.set_recv_buffer_size(4096).unwrap();
            sock.bind(SocketAddr::new(local.into(), 0)).unwrap();
            let mut s = sock.connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut buf = vec![0u8; 2048];
            let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or(0);
            (parse(&buf[..n]), s)
        }));
    }
    let mut held = Vec::new();
    let (mut ok, mut busy) = (0, 0);
    for r in readers {
        let (raw, s) = r.await.unwrap();
        match raw.status {
            200 => ok += 1,
            503 => {
                assert!(raw.header("retry-after").is_some(), "{raw:?}");
                busy += 1;
            }
            s => panic!("a slow reader got {s}"),
        }
        held.push(s);
    }
    let (rss, threads) = peak_rss_and_threads(child.id());
    eprintln!(
        "48 slow readers: {ok} served, {busy} told to retry; peak RSS {} MB, {threads} threads",
        rss >> 20
    );
    assert!((1..=2).contains(&ok), "{ok} decoded at once, the cap is 2");
    assert_eq!(ok + busy, 48);
    assert!(rss < SERVE_PEAK_RSS, "peak RSS {rss}");
    assert!(threads < 40, "{threads} threads");
    // Over the per-address cap: 503 at once, without a request read.
    let mut conns = Vec::new();
    for _ in 0..16 {
        conns.push(connect_from(addr, Ipv4Addr::new(127, 0, 0, 42)).await);
    }
    let mut extra = connect_from(addr, Ipv4Addr::new(127, 0, 0, 42)).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), extra.read_to_end(&mut out)).await;
    assert_eq!(
        parse(&out).status,
        503,
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    drop(conns);
    drop(held);
    // Ranges of the last byte, their clients gone at once: the decoders
    // skipping towards that byte notice and give their slots back.
    for _ in 0..6 {
        let mut s = connect_from(addr, Ipv4Addr::new(127, 0, 0, 50)).await;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nrange: bytes=-1\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        drop(s);
    }
    // The readers gone, the file is served whole (the slots come back).
    let mut whole = None;
    for _ in 0..50 {
        let r = get(addr, path, None).await;
        if r.status == 200 {
            whole = Some(r.body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let body = whole.expect("the decoded file is served again");
    assert_eq!(sha_hex(&body), want);
    let _ = child.kill();
    let _ = child.wait();
}

/// (4) A download that fills the disk removes its partial file (a full
/// disk is not left full) unless asked to keep it, and says which file.
/// `/dev/full` stands for the full disk: every write to it fails with
/// ENOSPC, and the partial file is a link to it.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_that_fills_the_disk_removes_its_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = serve(
        &tmp.path().join("store"),
        &[("org/model", &seed_dir())],
        |o| o,
    )
    .await;
    let dst = tmp.path().join("out/model.safetensors");
    let part = brevis_hub::client::incomplete_path(&dst);
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    for keep in [false, true] {
        std::os::unix::fs::symlink("/dev/full", &part).unwrap();
        let c = client(&srv.url(), None).with_keep_partial(keep);
        let e = c
            .download_file(
                "org/model",
                "main",
                "model.safetensors",
                &dst,
                &brevis_hub::Expect::default(),
                &brevis_core::NoProgress,
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&part.display().to_string()), "{e}");
        assert!(e.contains(if keep { "kept" } else { "removed" }), "{e}");
        assert_eq!(part.symlink_metadata().is_ok(), keep, "{e}");
        assert!(!dst.exists());
        let _ = std::fs::remove_file(&part);
    }
    srv.shutdown().await;
}
