//! `verify` of mirrors: local folders holding `brevis.manifest.json`, or
//! mirror repo ids on a Hub.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use brevis_hub::{HubClient, VerifyEntry, VerifyReport};

use super::verify::VerifyArgs;
use crate::Outcome;
use crate::hub_args::{print_json, runtime};
use crate::progress::Ui;

/// Each target and what checking it gave.
type Results = Vec<(String, Result<VerifyReport>)>;

/// Verify mirrors: local folders, or remote mirror repo ids (at
/// `--revision`, on `--endpoint` with its token, downloading into the
/// work folder).
/// Every target is checked and reported, in text or JSON, whatever happens
/// to the others. Ok(Mismatch) when a file differs; an error (exit 2) when a
/// target could not be checked at all.
pub fn run(a: &VerifyArgs, ui: &Ui) -> Result<Outcome> {
    let mut results = check_all(a, ui);
    // --require-source: a mirror its source did not vouch for is not ok.
    let unvouched = |rep: &VerifyReport| a.require_source && !rep.source_checked;
    for rep in results.iter_mut().filter_map(|(_, r)| r.as_mut().ok()) {
        if unvouched(rep) {
            rep.ok = false;
        }
    }
    let ok = results
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|rep| rep.ok));
    if a.json.json {
        print_json_rows(&results, ok)?;
    } else {
        print_text(&results, a.require_source, ui)?;
    }
    outcome(results, ok)
}

/// Check every target, one client and runtime for all the remote ones.
fn check_all(a: &VerifyArgs, ui: &Ui) -> Results {
    let threads = a.threads.threads;
    let mut results = Vec::new();
    let mut client: Option<(HubClient, HubClient)> = None;
    let mut rt: Option<tokio::runtime::Runtime> = None;
    for target in &a.targets {
        let path = Path::new(target);
        let r = if path.is_dir() {
            brevis_hub::verify_local(path, threads).with_context(|| format!("verifying {target}"))
        } else {
            (|| {
                if client.is_none() {
                    client = Some((a.hub.client(ui)?, a.hub.source_client(&a.source, ui)?));
                }
                if rt.is_none() {
                    rt = Some(runtime()?);
                }
                let (Some((c, src)), Some(rt)) = (&client, &rt) else {
                    anyhow::bail!("no client");
                };
                rt.block_on(brevis_hub::verify_mirror_against(
                    c,
                    src,
                    target,
                    &a.revision,
                    &a.work.path(),
                    threads,
                    Arc::new(ui.sink()),
                ))
                .with_context(|| format!("verifying {target}"))
            })()
        };
        results.push((target.clone(), r));
    }
    results
}

/// One mirror's report as it is, several under `mirrors`.
fn print_json_rows(results: &Results, ok: bool) -> Result<()> {
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|(t, r)| match r {
            Ok(rep) => serde_json::to_value(rep).unwrap_or_default(),
            Err(e) => serde_json::json!({
                "target": t, "ok": false, "files": [], "error": crate::message(e),
            }),
        })
        .collect();
    match rows.as_slice() {
        [one] => print_json(one),
        _ => print_json(&serde_json::json!({ "ok": ok, "mirrors": rows })),
    }
}

/// A line per file and a summary per mirror (-q: only the files not ok,
/// and the summary when it alone says why the mirror fails).
fn print_text(results: &Results, require_source: bool, ui: &Ui) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // Several mirrors: each row names its mirror (with -q the rows are
    // all there is).
    let several = results.len() > 1;
    for (target, r) in results {
        let Ok(rep) = r else { continue };
        let prefix = if several {
            format!("{}: ", rep.target)
        } else {
            String::new()
        };
        for f in rep.files.iter().filter(|f| !(ui.quiet && f.status == "ok")) {
            writeln!(
                out,
                "{prefix}{:<8} {}{}",
                f.status,
                f.path,
                f.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            )?;
        }
        let unvouched = require_source && !rep.source_checked;
        if !ui.quiet || unvouched {
            let remote = !Path::new(target).is_dir();
            writeln!(out, "{}", summary(rep, unvouched, remote))?;
        }
    }
    Ok(())
}

/// `TARGET: N file(s), K ok, B bad (source REPO@COMMIT...)`.
fn summary(rep: &VerifyReport, unvouched: bool, remote: bool) -> String {
    let bad = rep.files.iter().filter(|f| f.status != "ok").count();
    let why = rep.source_unread.as_deref().unwrap_or("not read");
    format!(
        "{}: {} file(s), {} ok, {} bad (source {}@{}{})",
        rep.target,
        rep.files.len(),
        rep.files.len() - bad,
        bad,
        rep.source.repo,
        rep.source.commit,
        match (unvouched, remote && !rep.source_checked) {
            (true, _) =>
                format!("; the source was not checked ({why}): not ok with --require-source"),
            (false, true) => {
                format!("; not readable here ({why}), so checked against the manifest only")
            }
            (false, false) => String::new(),
        }
    )
}

/// Whether a row is a file that could not be checked (exit 2): it could
/// not be fetched (`error`) or is no archive that can be read
/// (`unreadable`), as opposed to one read that fails (exit 1).
fn unchecked(f: &VerifyEntry) -> bool {
    matches!(f.status.as_str(), "error" | "unreadable")
}

/// Files that could not be fetched or read make the run an error (exit
/// 2), after every row was reported; else a mismatch is exit 1.
fn outcome(results: Results, ok: bool) -> Result<Outcome> {
    let mut errors: Vec<anyhow::Error> = Vec::new();
    for (target, r) in results {
        match r {
            Err(e) => errors.push(e),
            Ok(rep) => {
                let failed: Vec<&VerifyEntry> = rep.files.iter().filter(|f| unchecked(f)).collect();
                if let Some(first) = failed.first() {
                    errors.push(anyhow::anyhow!(
                        "verifying {target}: {} file(s) could not be checked; {}: {}",
                        failed.len(),
                        first.path,
                        first.detail.as_deref().unwrap_or("")
                    ));
                }
            }
        }
    }
    let mut errors = errors.into_iter();
    match (errors.next(), errors.len()) {
        (None, _) => Ok(if ok { Outcome::Ok } else { Outcome::Mismatch }),
        (Some(e), 0) => Err(e),
        (Some(e), n) => Err(anyhow::anyhow!(
            "{} (and {n} more target(s) could not be checked)",
            crate::message(&e)
        )),
    }
}
