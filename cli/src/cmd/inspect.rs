//! `inspect`: each tensor's program and what it saved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use brevis_core::Dtype;
use brevis_core::{Archive, Segment, SegmentKind};
use clap::Args;
use serde_json::{Value, json};

use crate::Outcome;
use crate::args::Json;
use crate::files::{self, about, ratio_text};
use crate::progress::Ui;

/// Show each tensor's program and what it saved.
#[derive(Args, Debug)]
#[command(
    after_help = "Example:\n  brevis-hub inspect model.safetensors.brv --json | jq '.summary'\n\nThe first line names the source's container (safetensors, gguf, pytorch,\nnpy, npz, onnx, ctranslate2, `with no header` for a file whose tensors\nanother file described, such as a TF.js shard, or plain bytes) and how\nmany tensor segments it was read as. The archive of an empty file has no ratio: n/a in the text."
)]
pub struct InspectArgs {
    /// The archive.
    pub archive: PathBuf,
    #[command(flatten)]
    pub json: Json,
}

/// What an archive holds: a row per segment (per tensor of a group), and
/// sums by program and by production.
#[derive(Default)]
struct Contents {
    rows: Vec<Value>,
    /// Program text -> (segments, bytes before, bytes after).
    by_program: BTreeMap<String, (u64, u64, u64)>,
    /// Production -> (nodes, literal payload bytes).
    by_production: BTreeMap<&'static str, (u64, u64)>,
}

pub fn run(a: InspectArgs, _ui: &Ui) -> Result<Outcome> {
    files::check_regular(&a.archive, &files::stat(&a.archive)?)?;
    let ar = Archive::open(&a.archive).map_err(|e| about("", &a.archive, e))?;
    let c = contents(&ar, &a.archive)?;
    let summary: Vec<_> = c
        .by_program
        .iter()
        .map(|(p, (n, b, e))| json!({"program": p, "segments": n, "bytes_before": b, "bytes_after": e, "bytes_saved": *b as i64 - *e as i64}))
        .collect();
    let productions: Vec<_> = c
        .by_production
        .iter()
        .map(|(p, (n, lit))| json!({"production": p, "nodes": n, "literal_payload_bytes": lit}))
        .collect();
    let info = ar.info();
    // What the source was: a container a format reader knows, else bytes.
    let container = ar.format().map_err(|e| about("", &a.archive, e))?;
    let tensor_segments = ar
        .segments()
        .iter()
        .filter(|s| s.desc.kind == SegmentKind::Tensor)
        .count();
    if a.json.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
            "archive": a.archive, "format_version": info.format_version,
            "container": container, "tensor_segments": tensor_segments,
            "original_bytes": info.original_len, "archive_bytes": info.archive_len,
            "sha256": hex::encode(info.sha256), "segments": c.rows,
            "summary": summary, "productions": productions}))?
        );
        return Ok(Outcome::Ok);
    }
    outln!(
        "{}: format v{}, source {} ({} tensor segments), {} -> {} bytes ({}), sha256 {}",
        a.archive.display(),
        info.format_version,
        match (container, tensor_segments) {
            (Some(c), _) => c,
            // Tensors no header of its own states: another file described
            // them (a TF.js shard, an ONNX model's external data).
            (None, 1..) => "with no header",
            (None, 0) => "plain bytes",
        },
        tensor_segments,
        info.original_len,
        info.archive_len,
        ratio_text(info.archive_len, info.original_len),
        hex::encode(info.sha256)
    );
    print_segments(&c.rows)?;
    print_sums(&summary, &productions)?;
    Ok(Outcome::Ok)
}

/// Every segment's program (a row per tensor of a group), and the sums.
fn contents(ar: &Archive<std::fs::File>, path: &Path) -> Result<Contents> {
    let tensors = ar.tensors().unwrap_or_default();
    let mut c = Contents::default();
    for (i, s) in ar.segments().iter().enumerate() {
        let mut texts: Vec<String> = Vec::new();
        for r in 0..s.regions.len() {
            let program = ar.describe_program(i, r).map_err(|e| about("", path, e))?;
            for step in &program.steps {
                let e = c.by_production.entry(step.production).or_default();
                e.0 += 1;
                e.1 += step.literal_bytes;
            }
            texts.push(program.text);
        }
        let program = summarize(&texts);
        let e = c.by_program.entry(program.clone()).or_default();
        e.0 += 1;
        e.1 += s.desc.len;
        e.2 += s.encoded_len();
        let (s0, s1) = (s.desc.offset, s.desc.offset + s.desc.len);
        let members: Vec<_> = tensors
            .iter()
            .filter(|t| t.len > 0 && t.offset >= s0 && t.offset + t.len <= s1)
            .collect();
        if s.desc.kind == SegmentKind::Tensor && members.len() > 1 {
            // Small tensors coded together: one row each, sharing the
            // group's program; bytes after are the group's, pro rata.
            let enc = s.encoded_len() as f64;
            for t in members {
                c.rows.push(json!({
                    "name": t.name,
                    "kind": "tensor",
                    "dtype": t.dtype.name(),
                    "shape": t.shape,
                    "program": program,
                    "group": s.desc.name,
                    "regions": s.regions.len(),
                    "bytes_before": t.len,
                    "bytes_after": (enc * t.len as f64 / s.desc.len as f64).round() as u64,
                }));
            }
            continue;
        }
        c.rows.push(segment_row(s, program));
    }
    Ok(c)
}

/// The row of a segment coded alone.
fn segment_row(s: &Segment, program: String) -> Value {
    json!({
        "name": s.desc.name,
        "kind": if s.desc.kind == SegmentKind::Tensor { "tensor" } else { "bytes" },
        "dtype": if s.desc.dtype == Dtype::Bytes { "" } else { s.desc.dtype.name() },
        "shape": s.desc.shape,
        "program": program,
        "regions": s.regions.len(),
        "bytes_before": s.desc.len,
        "bytes_after": s.encoded_len(),
    })
}

/// Widest a name is shown in the table (longer ones are cut, `~` last).
const NAME_WIDTH: usize = 48;
/// Widest a shape is shown in the table.
const SHAPE_WIDTH: usize = 18;

/// The table of segments, each column as wide as its widest cell.
fn print_segments(rows: &[Value]) -> Result<()> {
    let header = ["name", "dtype", "shape", "before", "after"].map(String::from);
    let mut cells = vec![header];
    for r in rows {
        let num = |k: &str| r[k].as_u64().unwrap_or(0).to_string();
        cells.push([
            trunc(r["name"].as_str().unwrap_or(""), NAME_WIDTH),
            r["dtype"].as_str().unwrap_or("").to_owned(),
            trunc(&r["shape"].to_string(), SHAPE_WIDTH),
            num("bytes_before"),
            num("bytes_after"),
        ]);
    }
    let mut w = [0usize; 5];
    for row in &cells {
        for (w, c) in w.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let programs =
        std::iter::once("program").chain(rows.iter().map(|r| r["program"].as_str().unwrap_or("")));
    for (c, program) in cells.iter().zip(programs) {
        outln!(
            "{:<w0$} {:<w1$} {:<w2$} {:>w3$} {:>w4$}  {program}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
        );
    }
    Ok(())
}

/// The sums by program and by production, numbers right-aligned.
fn print_sums(summary: &[Value], productions: &[Value]) -> Result<()> {
    let num = |v: &Value, k: &str| v[k].to_string();
    let width = |vs: &[Value], k: &str| vs.iter().map(|v| num(v, k).len()).max().unwrap_or(0);
    outln!("\nby program:");
    let n = width(summary, "segments").max(4);
    for s in summary {
        outln!(
            "  {:>n$} x {}  {} -> {} bytes, saved {}",
            num(s, "segments"),
            s["program"].as_str().unwrap_or(""),
            num(s, "bytes_before"),
            num(s, "bytes_after"),
            num(s, "bytes_saved")
        );
    }
    outln!("productions used:");
    let p = productions
        .iter()
        .map(|v| v["production"].as_str().unwrap_or("").len())
        .max()
        .unwrap_or(0)
        .max(8);
    let n = width(productions, "nodes").max(8);
    for v in productions {
        outln!(
            "  {:<p$} {:>n$} nodes, literal payload {} bytes",
            v["production"].as_str().unwrap_or(""),
            num(v, "nodes"),
            num(v, "literal_payload_bytes")
        );
    }
    Ok(())
}

/// One text for a segment's regions: `P` when all share it, else `Concat[k](...)`.
fn summarize(texts: &[String]) -> String {
    match texts {
        [] => "(empty)".into(),
        [one] => one.clone(),
        _ if texts.iter().all(|t| *t == texts[0]) => {
            format!("Concat[{}x]({})", texts.len(), texts[0])
        }
        _ => {
            let mut uniq: Vec<&String> = Vec::new();
            for t in texts {
                if !uniq.contains(&t) {
                    uniq.push(t);
                }
            }
            format!(
                "Concat[{}x]({})",
                texts.len(),
                uniq.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        }
    }
}

/// `s` cut to `n` characters, the last one `~` when cut.
fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}~")
    }
}
