//! Every container a Hub repo holds, through the whole flow: compress,
//! inspect, and a mirror of a repo of GGUF, PyTorch, ONNX (inline and with
//! external data), CTranslate2, NumPy and TF.js files pulled back byte for
//! byte.

use std::path::{Path, PathBuf};

use brevis_core::{Archive, CompressOptions, SegmentKind, Sidecars, compress, decompress};
use brevis_hub::Encoding;
use brevis_hub::{MirrorOptions, PullOptions};

use crate::hub::{client, serve, sha_file};

fn testdata(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(p)
}

/// The committed sample of each container, with the format it must be
/// read as and the least number of tensor segments it holds.
const SAMPLES: &[(&str, &str, usize)] = &[
    ("gguf/gemma-3-270m-cut.gguf", "gguf", 5),
    ("pytorch/astra_subset.pt", "pytorch", 5),
    ("onnx/silero_vad_half.onnx", "onnx", 5),
    ("ct2/model.bin", "ctranslate2", 5),
    ("numpy/minilm.npz", "npz", 2),
    ("numpy/token_type_embeddings.npy", "npy", 1),
    ("silero-vad/silero_vad_16k.safetensors", "safetensors", 5),
];

/// Samples smaller than this are not compared with zstd -19.
const SMALL: usize = 64 << 10;

/// Each sample is read as its container's tensors (from its bytes, not its
/// name), compresses smaller than zstd -19 does, and decodes exactly.
#[test]
fn every_container_is_read_as_tensors_and_beats_zstd_19() {
    for (path, format, min_tensors) in SAMPLES {
        let data = std::fs::read(testdata(path)).unwrap();
        // A name that says nothing: detection is from the bytes.
        let anon = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(anon.path(), &data).unwrap();
        assert_eq!(
            brevis_core::detect_container(anon.path()).unwrap(),
            Some(*format),
            "{path}"
        );
        let archive = compress(&data, &CompressOptions::default().threads(1)).unwrap();
        assert_eq!(decompress(&archive).unwrap(), data, "{path}");
        let a = Archive::new(&archive[..]).unwrap();
        assert_eq!(a.format().unwrap(), Some(*format), "{path}");
        let tensors = a
            .segments()
            .iter()
            .filter(|s| s.desc.kind == SegmentKind::Tensor)
            .count();
        assert!(tensors >= *min_tensors, "{path}: {tensors} tensor segments");
        // (A 3 KB array is too small to say anything; zstd's frame wins.)
        let z19 = zstd::bulk::compress(&data, 19).unwrap().len();
        assert!(
            data.len() < SMALL || archive.len() < z19,
            "{path}: {} bytes, zstd -19 {z19}",
            archive.len()
        );
    }
}

/// The tensor segments of an archive, by name.
fn tensor_names(archive: &[u8]) -> Vec<String> {
    Archive::new(archive)
        .unwrap()
        .segments()
        .iter()
        .filter(|s| s.desc.kind == SegmentKind::Tensor)
        .map(|s| s.desc.name.clone())
        .collect()
}

/// Files whose tensors another file describes: the TF.js shards (their
/// model.json lists the weights, some running from one shard into the
/// next) and an ONNX model's external data. Given with the describing
/// file, each is read as the tensors described, smaller than as plain
/// bytes and than zstd -19; without it, it is plain bytes. Both decode
/// exactly.
#[test]
fn files_another_file_describes_are_read_as_its_tensors() {
    let sets: &[(&[&str], usize)] = &[
        (
            &[
                "tfjs/model.json",
                "tfjs/group1-shard1of3.bin",
                "tfjs/group1-shard2of3.bin",
                "tfjs/group1-shard3of3.bin",
            ],
            3,
        ),
        (
            &[
                "onnx-external/silero_vad_half.onnx",
                "onnx-external/silero_vad_half.onnx_data",
            ],
            1,
        ),
    ];
    for (files, described) in sets {
        let paths: Vec<PathBuf> = files.iter().map(|f| testdata(f)).collect();
        let sidecars = Sidecars::find(&paths);
        assert_eq!(sidecars.len(), *described, "{files:?}");
        for p in &paths[paths.len() - described..] {
            let s = sidecars.get(p).expect("described");
            let data = std::fs::read(p).unwrap();
            let opts = CompressOptions::default().threads(1);
            let with = compress(&data, &opts.clone().sidecar(Some(s.clone()))).unwrap();
            let without = compress(&data, &opts).unwrap();
            assert_eq!(decompress(&with).unwrap(), data, "{}", p.display());
            assert!(tensor_names(&without).is_empty());
            let names = tensor_names(&with);
            assert!(names.len() >= 5, "{}: {names:?}", p.display());
            let z19 = zstd::bulk::compress(&data, 19).unwrap().len();
            eprintln!(
                "{}: {} bytes, described {} ({} tensors), plain {}, zstd -19 {z19}",
                p.display(),
                data.len(),
                with.len(),
                s.tensors(),
                without.len()
            );
            assert!(with.len() < without.len() && with.len() < z19);
        }
    }
    // The middle shard starts and ends inside weights: their pieces.
    let paths: Vec<PathBuf> = sets[0].0.iter().map(|f| testdata(f)).collect();
    let s = Sidecars::find(&paths);
    let data = std::fs::read(&paths[2]).unwrap();
    let a = compress(
        &data,
        &CompressOptions::default().sidecar(s.get(&paths[2]).cloned()),
    )
    .unwrap();
    let names = tensor_names(&a);
    assert!(
        names.first().is_some_and(|n| n.ends_with("#1")),
        "{names:?}"
    );
}

/// A repo holding one file of each container (and a config, a large text
/// file, a large file that does not compress) mirrors with every weight
/// file as an archive, the large text as one, the rest as they are, and
/// pulls back byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repo_of_every_container_mirrors_and_pulls_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("seed");
    let files: &[(&str, &str)] = &[
        ("model-q4_k_m.gguf", "gguf/gemma-3-270m-cut.gguf"),
        ("pytorch_model.bin", "pytorch/astra_subset.pt"),
        ("onnx/model.onnx", "onnx/silero_vad_half.onnx"),
        ("ct2/model.bin", "ct2/model.bin"),
        ("weights.npz", "numpy/minilm.npz"),
        ("tfjs/group1-shard1of3.bin", "tfjs/group1-shard1of3.bin"),
        ("tfjs/group1-shard2of3.bin", "tfjs/group1-shard2of3.bin"),
        ("tfjs/group1-shard3of3.bin", "tfjs/group1-shard3of3.bin"),
        (
            "ext/silero_vad_half.onnx",
            "onnx-external/silero_vad_half.onnx",
        ),
        (
            "ext/silero_vad_half.onnx_data",
            "onnx-external/silero_vad_half.onnx_data",
        ),
        ("tfjs/model.json", "tfjs/model.json"),
        ("config.json", "hub-seed/config.json"),
    ];
    for (to, from) in files {
        let p = seed.join(to);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(testdata(from), p).unwrap();
    }
    // Text of more than 1 MiB (archived when smaller), and bytes that no
    // coder makes smaller (stored as they are).
    let text = std::fs::read(testdata("README.md")).unwrap().repeat(100);
    std::fs::write(seed.join("notes.txt"), &text).unwrap();
    std::fs::write(seed.join("noise.dat"), crate::noise((1 << 20) + 4096)).unwrap();

    let srv = serve(&tmp.path().join("store"), &[("org/model", &seed)], |o| o).await;
    let c = client(&srv.url(), None);
    let rep = brevis_hub::mirror(
        &c,
        &c,
        &MirrorOptions::new("org/model", tmp.path().join("w")),
    )
    .await
    .unwrap();
    let enc = |p: &str| {
        let f = rep.files.iter().find(|f| f.path == p).expect(p);
        (f.encoding, f.archive.clone(), f.archive_size, f.size)
    };
    for (p, _) in &files[..files.len() - 2] {
        let (e, archive, stored, size) = enc(p);
        assert_eq!(e, Encoding::Brv, "{p}");
        assert_eq!(archive, format!("{p}.brv"));
        assert!(stored < size, "{p}: {stored} of {size}");
    }
    // The files described by others were coded as their tensors: smaller
    // than zstd -19 makes them (as plain bytes they would not be).
    for p in ["tfjs/group1-shard2of3.bin", "ext/silero_vad_half.onnx_data"] {
        let z19 = zstd::bulk::compress(&std::fs::read(seed.join(p)).unwrap(), 19)
            .unwrap()
            .len() as u64;
        assert!(enc(p).2 < z19, "{p}: {} bytes, zstd -19 {z19}", enc(p).2);
    }
    assert_eq!(enc("tfjs/model.json").0, Encoding::Identity);
    assert_eq!(enc("notes.txt").0, Encoding::Brv);
    assert_eq!(enc("config.json").0, Encoding::Identity);
    let (e, archive, stored, size) = enc("noise.dat");
    assert_eq!(
        (e, archive.as_str(), stored),
        (Encoding::Identity, "noise.dat", size)
    );
    eprintln!(
        "source {} bytes, mirror {} bytes, ratio {:.4}",
        rep.source_bytes,
        rep.mirror_bytes,
        rep.ratio()
    );
    // The prior was learned from the repo's tensors, whatever their container.
    let tree = c.list_files("org/model-brevis", "main").await.unwrap();
    assert!(tree.iter().any(|f| f.path == "brevis.prior.json"));

    let plain = tmp.path().join("plain");
    let mut popts = PullOptions::new(
        "org/model-brevis",
        tmp.path().join("hf"),
        tmp.path().join("pw"),
    );
    popts.local_dir = Some(plain.clone());
    brevis_hub::pull(&c, &popts).await.unwrap();
    for p in files
        .iter()
        .map(|(p, _)| *p)
        .chain(["notes.txt", "noise.dat"])
    {
        assert_eq!(sha_file(&plain.join(p)), sha_file(&seed.join(p)), "{p}");
    }
    let v = brevis_hub::verify_mirror(
        &c,
        "org/model-brevis",
        "main",
        &tmp.path().join("vw"),
        0,
        std::sync::Arc::new(brevis_core::NoProgress),
    )
    .await
    .unwrap();
    assert!(v.ok, "{v:?}");
    srv.shutdown().await;
}

/// A file that claims a format but cannot be read as it (a GGUF cut in its
/// header) is coded as plain bytes, exactly, and the report says which
/// format and why.
#[test]
fn a_file_a_reader_refuses_is_plain_bytes_and_says_why() {
    let data = std::fs::read(testdata("gguf/gemma-3-270m-cut.gguf")).unwrap();
    let d = tempfile::tempdir().unwrap();
    let (src, dst) = (d.path().join("cut.gguf"), d.path().join("cut.gguf.brv"));
    std::fs::write(&src, &data[..3000]).unwrap();
    let r = brevis_core::compress_file(&src, &dst, false, &CompressOptions::default()).unwrap();
    assert_eq!(r.format, None);
    assert!(
        r.unread.len() == 1 && r.unread[0].starts_with("gguf: "),
        "{:?}",
        r.unread
    );
    assert_eq!(
        brevis_core::decompress(&std::fs::read(&dst).unwrap()).unwrap(),
        &data[..3000]
    );
    // A file that claims nothing has nothing to say.
    std::fs::write(&src, b"plain text, no container").unwrap();
    let r = brevis_core::compress_file(&src, &dst, true, &CompressOptions::default()).unwrap();
    assert!(r.unread.is_empty());
}

/// A TF.js shard compressed on its own finds its model.json (and the
/// shards before it) in its folder, and decodes exactly.
#[test]
fn a_shard_compressed_alone_finds_its_manifest_beside_it() {
    let d = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(testdata("tfjs")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, d.path().join(f.file_name().unwrap())).unwrap();
    }
    let o = crate::cli::run(
        d.path(),
        &["compress", "--json", "group1-shard2of3.bin", "-o", "s2.brv"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["container"], "tfjs-shard", "{v}");
    let o = crate::cli::run(d.path(), &["decompress", "s2.brv", "-o", "back.bin"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read(d.path().join("back.bin")).unwrap(),
        std::fs::read(d.path().join("group1-shard2of3.bin")).unwrap()
    );
}
