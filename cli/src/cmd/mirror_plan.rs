//! `mirror --plan`: a mirror planned once, run by many workers (each
//! handed an index by its scheduler), and committed once.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use brevis_hub::pipeline::{UnitState, human};
use brevis_hub::{MirrorPlan, commit_plan, make_plan, plan_status, run_worker};

use super::mirror::{MirrorArgs, clients, options, print_done};
use crate::Outcome;
use crate::hub_args::{print_json, runtime};
use crate::progress::Ui;

/// Most source repos read from a `--sources` file.
const MAX_SOURCES: usize = 100_000;

/// Most workers of a plan.
const MAX_WORKERS: usize = 1_000_000;

pub(super) fn run(a: MirrorArgs, ui: &Ui) -> Result<Outcome> {
    let Some(plan_path) = a.plan.clone() else {
        bail!("no --plan");
    };
    if a.dry_run {
        bail!(
            "--dry-run does not go with --plan: a plan's steps write to the destination; \
             `--plan PLAN.json --status` shows where a plan stands"
        );
    }
    let (src, dst) = clients(&a, ui)?;
    let opts = options(&a, ui);
    let step = a.worker.is_some() || a.commit || a.status;
    if step && (!a.src.is_empty() || a.sources.is_some()) {
        bail!(
            "--worker, --commit and --status run the plan in {}: give no source repo",
            plan_path.display()
        );
    }
    let started = std::time::Instant::now();
    let rt = runtime()?;
    if !step {
        let mut sources = a.src.clone();
        if let Some(list) = &a.sources {
            sources.extend(read_sources(list)?);
        }
        if sources.is_empty() {
            bail!("nothing to plan: give source repos (SRC...) or --sources FILE");
        }
        let plan = rt
            .block_on(make_plan(&src, &dst, &sources, &opts))
            .context("planning the mirror")?;
        plan.write(&plan_path)?;
        if a.json.json {
            print_json(&serde_json::json!({
                "plan": plan.id,
                "path": plan_path,
                "repos": plan.repos.len(),
                "units": plan.units.len(),
                "unit_bytes": plan.unit_bytes(),
                "up_to_date": plan.repos.iter().filter(|r| r.up_to_date).count(),
            }))?;
        } else if !ui.quiet {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "plan {} -> {}: {} repo(s), {} unit(s) of {} to compress{}",
                plan.id,
                plan_path.display(),
                plan.repos.len(),
                plan.units.len(),
                human(plan.unit_bytes()),
                match plan.repos.iter().filter(|r| r.up_to_date).count() {
                    0 => String::new(),
                    n => format!(" ({n} already mirrored)"),
                }
            )?;
            writeln!(
                out,
                "next: brevis-hub mirror --plan {} --worker K/N (K = 0..N-1), then --commit",
                plan_path.display()
            )?;
        }
        return Ok(Outcome::Ok);
    }
    let plan = MirrorPlan::read(&plan_path)?;
    if let Some(w) = &a.worker {
        let (k, n) = worker_index(w)?;
        let rep = rt
            .block_on(run_worker(&src, &dst, &plan, k, n, &opts))
            .with_context(|| format!("worker {k}/{n} of plan {}", plan.id))?;
        if a.json.json {
            print_json(&serde_json::to_value(&rep)?)?;
        } else if !ui.quiet {
            writeln!(
                std::io::stdout().lock(),
                "worker {}: {} unit(s), {} built ({} -> {}), {} done before, in {:.1} s",
                rep.worker,
                rep.units,
                rep.units_built,
                human(rep.source_bytes),
                human(rep.mirror_bytes),
                rep.units_done_before,
                started.elapsed().as_secs_f64()
            )?;
        }
        return Ok(Outcome::Ok);
    }
    if a.status {
        let st = rt.block_on(plan_status(&dst, &plan, &opts))?;
        if a.json.json {
            print_json(&serde_json::to_value(&st)?)?;
        } else {
            let count = |s: UnitState| st.units.iter().filter(|u| u.state == s).count();
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "plan {}: {} unit(s): {} done, {} in flight, {} missing; {} of {} mirror(s) committed",
                st.plan,
                st.units.len(),
                count(UnitState::Done),
                count(UnitState::InFlight),
                count(UnitState::Missing),
                st.committed.len(),
                st.committed.len() + st.uncommitted.len()
            )?;
            for u in st.units.iter().filter(|u| u.state != UnitState::Done) {
                writeln!(
                    out,
                    "  unit {:>5}  {:<9}  {:>10}  {}{}",
                    u.unit,
                    match u.state {
                        UnitState::InFlight => "in flight",
                        _ => "missing",
                    },
                    human(u.bytes),
                    u.source,
                    u.worker
                        .as_ref()
                        .map(|w| format!(" (worker {w})"))
                        .unwrap_or_default()
                )?;
            }
        }
        return Ok(Outcome::Ok);
    }
    let reps = rt
        .block_on(commit_plan(&src, &dst, &plan, &opts))
        .with_context(|| format!("committing plan {}", plan.id))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json.json {
        let v: Vec<serde_json::Value> = reps
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["ratio"] = serde_json::json!(r.ratio());
                v
            })
            .collect();
        print_json(&serde_json::json!({"plan": plan.id, "mirrors": v, "seconds": secs}))?;
    } else if !ui.quiet {
        for r in &reps {
            print_done(r, secs)?;
        }
    }
    Ok(Outcome::Ok)
}

/// `K/N`, or `auto`: K from `JOB_COMPLETION_INDEX` or
/// `SLURM_ARRAY_TASK_ID` (less `SLURM_ARRAY_TASK_MIN`), N from
/// `BREVIS_WORKERS` or `SLURM_ARRAY_TASK_COUNT`.
fn worker_index(w: &str) -> Result<(usize, usize)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let num = |name: &str, v: &str| -> Result<usize> {
        v.trim()
            .parse()
            .with_context(|| format!("{name}={v:?} is not a number"))
    };
    let (k, n) = if w == "auto" {
        let k = if let Some(v) = var("JOB_COMPLETION_INDEX") {
            num("JOB_COMPLETION_INDEX", &v)?
        } else if let Some(v) = var("SLURM_ARRAY_TASK_ID") {
            let min = match var("SLURM_ARRAY_TASK_MIN") {
                Some(m) => num("SLURM_ARRAY_TASK_MIN", &m)?,
                None => 0,
            };
            num("SLURM_ARRAY_TASK_ID", &v)?
                .checked_sub(min)
                .context("SLURM_ARRAY_TASK_ID is below SLURM_ARRAY_TASK_MIN")?
        } else {
            bail!(
                "--worker auto: neither JOB_COMPLETION_INDEX nor SLURM_ARRAY_TASK_ID is set; \
                 give --worker K/N"
            );
        };
        let n = if let Some(v) = var("BREVIS_WORKERS") {
            num("BREVIS_WORKERS", &v)?
        } else if let Some(v) = var("SLURM_ARRAY_TASK_COUNT") {
            num("SLURM_ARRAY_TASK_COUNT", &v)?
        } else {
            bail!(
                "--worker auto: set BREVIS_WORKERS to the number of workers \
                 (SLURM_ARRAY_TASK_COUNT serves under Slurm), or give --worker K/N"
            );
        };
        (k, n)
    } else {
        let (k, n) = w
            .split_once('/')
            .with_context(|| format!("--worker {w:?}: give K/N, such as 0/4, or auto"))?;
        (num("K", k)?, num("N", n)?)
    };
    if n == 0 || k >= n {
        bail!("worker {k}/{n}: K must be below N (workers are 0..N-1)");
    }
    if n > MAX_WORKERS {
        bail!("worker {k}/{n}: at most {MAX_WORKERS} workers");
    }
    Ok((k, n))
}

/// The repo ids a `--sources` file lists, one per line (`#` comments and
/// blank lines skipped).
fn read_sources(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the source list {}", path.display()))?;
    let list: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    if list.len() > MAX_SOURCES {
        bail!(
            "{} lists {} repos, more than {MAX_SOURCES}",
            path.display(),
            list.len()
        );
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_list_takes_one_repo_a_line_and_skips_comments() {
        let dir = std::env::temp_dir().join(format!("brevis-sources-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("repos.txt");
        std::fs::write(&p, "# the org\norg/a\n\n  org/b   # big\n#org/c\n").unwrap();
        assert_eq!(read_sources(&p).unwrap(), ["org/a", "org/b"]);
        assert!(read_sources(&dir.join("missing.txt")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn worker_indices_are_checked() {
        assert_eq!(worker_index("0/4").unwrap(), (0, 4));
        assert_eq!(worker_index("3/4").unwrap(), (3, 4));
        for bad in ["4/4", "0/0", "x/2", "1", "-1/2", "0/10000000000"] {
            assert!(worker_index(bad).is_err(), "{bad}");
        }
    }
}
