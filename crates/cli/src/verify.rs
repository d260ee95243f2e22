//! `dtxn verify`: a workload's consistency check (what `dtxn bench --verify` runs) on a pool
//! that several compute processes ran against, from what each of them committed.
//!
//! A compute process knows only its own commits. With `dtxn bench --tally-out FILE` it writes
//! them down when it finishes (its coordinators' tallies merged into one, see
//! [`dtxn_workloads::Merge`]), with what identifies the run: workload and options, seed,
//! protocol, pool shape, compute nodes. `dtxn verify --tallies FILE,...` reads every process's
//! file, refuses files of different runs and incomplete or duplicated sets of compute nodes,
//! rebuilds the workload and the pool's layout from the files (no workload options to
//! repeat), checks that the pool it reaches is that layout, takes the pool alone (so no
//! compute process is still running, or starts, while it reads) and runs the check on the
//! merged tally, then the checks that need no tally: no log slice pending, every backup
//! holding what its primary holds (in the pool's current view).

use crate::backend::{Backend, PoolArgs};
use crate::bench::{self, Chosen};
use anyhow::{anyhow, bail, Context, Result};
use dtxn_fabric::shm::{node_file, ShmPool};
use dtxn_fabric::Pool;
use dtxn_store::{Plan, PoolShape};
use dtxn_txn::AttachError;
use dtxn_workloads::{kv, merge_all, skew, smallbank, tatp, tpcc, Workload, WorkloadError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The `format` of a tally file.
pub const FORMAT: &str = "dtxn-tally";
/// The version of the tally file format this binary writes and reads.
pub const VERSION: u32 = 1;

#[derive(Debug, clap::Args)]
#[command(
    mut_arg("backend", |a| a.default_value("ucx")),
    mut_arg("shm_dir", |a| a.help("shm: the run's --shm-dir (its memory nodes' files)")),
    // A sim pool dies with its run: the sim options mean nothing here.
    mut_arg("profile", |a| a.hide(true)),
    mut_arg("benign", |a| a.hide(true)),
)]
pub struct VerifyArgs {
    /// The tally files of every compute process of the run (`dtxn bench --tally-out`),
    /// comma- or space-separated.
    #[arg(long, value_delimiter = ',', num_args = 1.., required = true, value_name = "FILE,...")]
    pub tallies: Vec<PathBuf>,
    /// Where the run's pool is (ucx: its memory nodes; shm: its --shm-dir).
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Compute nodes of the run whose process was killed (`kill -9`) before it wrote its
    /// tally file (run with `dtxn bench --leases`: the survivors recovered its
    /// coordinators). Their commits are unknown, so the check is what needs no tally: no
    /// lock word left, no log slice pending, every backup identical to its primary, and
    /// SmallBank's `--mix transfer` total conserved; their claims on the pool are dropped.
    #[arg(long, value_delimiter = ',', value_name = "K,...")]
    pub lost: Vec<u32>,
}

/// What makes two compute processes part of one run: every field must agree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunId {
    pub workload: String,
    /// The workload's options, as it ran with them (defaults filled in).
    pub options: serde_json::Value,
    pub seed: u64,
    pub protocol: String,
    /// `--vnum` of a multi-version protocol (its layout depends on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vnum: Option<u8>,
    pub pool: ShapeFile,
    pub compute_nodes: u32,
    pub threads: u32,
    pub coroutines: u32,
    /// The run held leases (`--leases`): its 2PL read shares expire, and void ones are left
    /// counted in their words (cleared before the checks).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leases: bool,
}

/// [`PoolShape`], as the file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeFile {
    pub memory_nodes: u16,
    pub replicas: usize,
    pub log_slices: u32,
    pub log_slice_bytes: u64,
    /// `--node-memory`, if given.
    pub region_bytes: Option<u64>,
}

impl From<&PoolShape> for ShapeFile {
    fn from(s: &PoolShape) -> ShapeFile {
        ShapeFile {
            memory_nodes: s.memory_nodes,
            replicas: s.replicas,
            log_slices: s.log_slices,
            log_slice_bytes: s.log_slice_bytes,
            region_bytes: s.region_bytes,
        }
    }
}

impl ShapeFile {
    fn shape(&self) -> PoolShape {
        PoolShape {
            memory_nodes: self.memory_nodes,
            replicas: self.replicas,
            log_slices: self.log_slices,
            log_slice_bytes: self.log_slice_bytes,
            region_bytes: self.region_bytes,
        }
    }
}

/// One compute process's tally file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TallyFile {
    pub format: String,
    pub version: u32,
    pub run: RunId,
    /// The process's `--compute-node`.
    pub compute_node: u32,
    /// Its coordinators' tallies, merged (the workload's `Tally` as JSON).
    pub tally: serde_json::Value,
}

impl TallyFile {
    /// The file of compute node `compute_node`, with its coordinators' tallies merged.
    pub fn new<W: Workload>(run: RunId, compute_node: u32, merged: &W::Tally) -> Result<Self> {
        Ok(TallyFile {
            format: FORMAT.into(),
            version: VERSION,
            run,
            compute_node,
            tally: serde_json::to_value(merged)?,
        })
    }

    /// Writes the file whole or not at all (a temporary file, renamed).
    pub fn write(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("tmp-tally");
        let text = serde_json::to_string(self)? + "\n";
        std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
    }

    /// Reads a tally file, with one-line errors naming it.
    pub fn read(path: &Path) -> Result<TallyFile> {
        let p = path.display();
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {p}"))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| anyhow!("{p}: not JSON: {e}"))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            bail!("{p}: not a dtxn tally file (dtxn bench --tally-out writes them)");
        }
        match v.get("version").and_then(|f| f.as_u64()) {
            Some(n) if n == u64::from(VERSION) => {}
            Some(n) => bail!("{p}: tally file version {n}; this binary reads version {VERSION}"),
            None => bail!("{p}: the tally file has no version"),
        }
        serde_json::from_value(v).map_err(|e| anyhow!("{p}: {e}"))
    }
}

/// Refuses sets of files that are not one whole run: another run's file, a compute node
/// given twice, out of range or missing.
fn one_run<'a>(files: &'a [(PathBuf, TallyFile)], lost: &[u32]) -> Result<&'a RunId> {
    let (first_path, first) = files.first().ok_or_else(|| anyhow!("no tally files"))?;
    let run = &first.run;
    let base = serde_json::to_value(run)?;
    for (path, f) in &files[1..] {
        if f.run == *run {
            continue;
        }
        let other = serde_json::to_value(&f.run)?;
        let diffs: Vec<String> = base
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| other.get(k.as_str()) != Some(*v))
            .map(|(k, v)| {
                let o = other.get(k.as_str()).cloned().unwrap_or_default();
                format!("{k} {o}, not {v}")
            })
            .collect();
        bail!(
            "{} is not from the run of {}: {} (every compute process of a run has the same \
             workload, options, seed, protocol, pool and --compute-nodes/--threads/--coroutines)",
            path.display(),
            first_path.display(),
            diffs.join("; ")
        );
    }
    let n = run.compute_nodes;
    let mut seen: Vec<Option<&Path>> = vec![None; n as usize];
    for (path, f) in files {
        let k = f.compute_node;
        let slot = seen.get_mut(k as usize).ok_or_else(|| {
            anyhow!(
                "{}: compute node {k}, but its run has --compute-nodes {n}",
                path.display()
            )
        })?;
        if lost.contains(&k) {
            bail!(
                "{}: compute node {k}'s tallies, but --lost says its process died without \
                 writing them",
                path.display()
            );
        }
        if let Some(earlier) = slot {
            bail!(
                "{} and {} are both compute node {k}'s tallies: give each compute process's \
                 file once",
                earlier.display(),
                path.display()
            );
        }
        *slot = Some(path);
    }
    if let Some(k) = lost.iter().find(|&&k| k >= n) {
        bail!("--lost {k}: the run has --compute-nodes {n}");
    }
    let missing: Vec<String> = (0..n)
        .filter(|&k| seen[k as usize].is_none() && !lost.contains(&k))
        .map(|k| k.to_string())
        .collect();
    if !missing.is_empty() {
        bail!(
            "no tally file of compute node(s) {} of --compute-nodes {n}: the check compares \
             the pool with what every compute process committed, so it needs all {n} files",
            missing.join(", ")
        );
    }
    Ok(run)
}

/// The workload the files ran.
fn rebuild(run: &RunId) -> Result<Chosen> {
    let opts = || run.options.clone();
    let bad = |e: serde_json::Error| anyhow!("the tally files' {} options: {e}", run.workload);
    Ok(match run.workload.as_str() {
        "smallbank" => Chosen::SmallBank(smallbank::SmallBank::new(
            serde_json::from_value(opts()).map_err(bad)?,
        )?),
        "kv" => Chosen::Kv(kv::Kv::new(serde_json::from_value(opts()).map_err(bad)?)?),
        "tatp" => Chosen::Tatp(tatp::Tatp::new(
            serde_json::from_value(opts()).map_err(bad)?,
        )?),
        "tpcc" => Chosen::Tpcc(tpcc::Tpcc::new(
            serde_json::from_value(opts()).map_err(bad)?,
        )?),
        "skew" => Chosen::Skew(skew::Skew::new(
            serde_json::from_value(opts()).map_err(bad)?,
        )?),
        other => bail!(
            "the tally files name workload '{other}' (valid: {})",
            dtxn_workloads::NAMES.join(", ")
        ),
    })
}

/// The run's pool, its view, and the run's plan in that view (each table's live replicas).
struct Attached {
    pool: Pool,
    plan: Plan,
    view: dtxn_store::View,
}

/// The run's pool, as `--backend` says where it is, checked against `plan`.
fn attach(a: &PoolArgs, run: &RunId, plan: &Plan) -> Result<Attached> {
    a.check_options()?;
    let nodes = usize::from(plan.shape.memory_nodes);
    let (pool, names) = match a.kind {
        Backend::Sim => bail!(
            "a sim pool lives only inside the process that ran it: use dtxn bench --backend \
             sim --verify"
        ),
        Backend::Shm => {
            let dir = a.shm_dir.as_ref().ok_or_else(|| {
                anyhow!("--backend shm needs --shm-dir DIR (the run's --shm-dir)")
            })?;
            let pool = ShmPool::open(dir, a.delay_ns())?;
            let names = (0..pool.node_sizes().len())
                .map(|i| node_file(dir, i).display().to_string())
                .collect();
            (Pool::Shm(pool), names)
        }
        Backend::Ucx => {
            if a.shm_dir.is_some() {
                bail!("--shm-dir is an option of --backend shm");
            }
            // Compute node 0 of the run's: the claim below is this process's only coordinator.
            // A memory node the pool's view marks failed may be gone (failover).
            let pool = a.connect(run.seed, 0, true)?;
            (Pool::Ucx(pool), a.memnodes.clone())
        }
    };
    let sizes = pool.node_sizes();
    if sizes.len() != nodes {
        bail!(
            "the pool has {} memory node(s); the run's has {nodes} (--memory-nodes)",
            sizes.len()
        );
    }
    if let Some((i, size)) = sizes
        .iter()
        .enumerate()
        .find(|&(i, &s)| s < plan.region_bytes && !pool.node_down(i as dtxn_fabric::NodeId))
    {
        bail!(
            "memory node {i} ({}) has {size} bytes; the run's pool needs {}: not the run's pool",
            names[i],
            plan.region_bytes
        );
    }
    crate::remote::check_loaded(
        &pool,
        plan,
        &names,
        "dtxn verify needs the pool of the run that wrote the tally files",
    )?;
    // Memory-node failover: the tables' live replicas in the pool's current view.
    let view = dtxn_store::View::parse(
        pool.try_with_local(0, |m| m.read_u64(dtxn_store::layout::VIEW_OFF))?,
    );
    let plan = plan.in_view(view).map_err(|e| anyhow!("{e}"))?;
    Ok(Attached { pool, plan, view })
}

/// Refuses, before any file is read, options that do not say where the run's pool is.
fn where_the_pool_is(a: &PoolArgs) -> Result<()> {
    a.check_options()?;
    match a.kind {
        Backend::Ucx if a.memnodes.is_empty() && a.token.is_none() && a.shm_dir.is_none() => bail!(
            "dtxn verify needs the run's pool: --memnodes HOST:PORT,... and --token (the \
             default, --backend ucx), or --backend shm --shm-dir DIR"
        ),
        Backend::Ucx if a.shm_dir.is_some() => {
            bail!("--shm-dir is an option of --backend shm (here the backend is ucx)")
        }
        Backend::Shm if a.shm_dir.is_none() => {
            bail!("--backend shm needs --shm-dir DIR (the run's --shm-dir)")
        }
        _ => Ok(()),
    }
}

/// Takes the pool alone over the claims `lost` killed processes left behind (at most that
/// many; one that died before it attached left none), and drops them: the claim word goes
/// from the stale count to exclusive, and back to 0 at [`release_over_lost`].
fn claim_over_lost(pool: &mut Pool, compute_nodes: u32, lost: u64) -> Result<()> {
    use dtxn_store::layout::{CLAIM_EXCLUSIVE, CLAIM_OFF};
    let r = pool.run(
        bench::one_coordinator(compute_nodes),
        None,
        move |mut ep| async move {
            let c = ep.read(0, CLAIM_OFF, 8);
            ep.post().await?;
            let w = ep.word(c, 0);
            if w & CLAIM_EXCLUSIVE != 0 || w > lost {
                return Ok(Err(w));
            }
            let c = ep.cas(0, CLAIM_OFF, w, CLAIM_EXCLUSIVE);
            ep.post().await?;
            Ok::<_, dtxn_fabric::FabricError>(if ep.cas_ok(c) { Ok(()) } else { Err(ep.old(c)) })
        },
    )?;
    match r.outputs.into_iter().next().flatten() {
        Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(w))) if w & CLAIM_EXCLUSIVE != 0 => {
            bail!("another process holds the pool alone: verify once it has finished")
        }
        Some(Ok(Err(w))) => bail!(
            "{w} compute process(es) are attached to the pool, more than the {lost} --lost \
             ones: verify once every surviving compute process has finished"
        ),
        Some(Err(e)) => Err(anyhow!("cannot take the pool for the check: {e}")),
        None => bail!("the claiming coordinator did not finish"),
    }
}

fn release_over_lost(pool: &mut Pool, compute_nodes: u32) -> Result<()> {
    use dtxn_store::layout::{CLAIM_EXCLUSIVE, CLAIM_OFF};
    let r = pool.run(
        bench::one_coordinator(compute_nodes),
        None,
        |mut ep| async move {
            ep.cas(0, CLAIM_OFF, CLAIM_EXCLUSIVE, 0);
            ep.post().await
        },
    )?;
    match r.outputs.into_iter().next().flatten() {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(anyhow!("cannot give the pool back: {e}")),
        None => bail!("the releasing coordinator did not finish"),
    }
}

/// What can be checked without every process's commits (`--lost`): no lock word on any
/// record, no log slice pending, every backup holding what its primary holds, and for
/// SmallBank's transfer mix (which only moves money) the total as loaded.
fn check_without_tallies(
    w: &Chosen,
    pool: &Pool,
    plan: &Plan,
    view: dtxn_store::View,
    protocol: dtxn_txn::Protocol,
    seed: u64,
) -> std::result::Result<Vec<String>, String> {
    let mut checks = Vec::new();
    let mut records = 0u64;
    for t in plan.tables.iter().filter(|t| t.mv.is_none()) {
        for r in dtxn_workloads::scan_table(pool, t) {
            if r.lock != 0 {
                return Err(format!(
                    "{} key {}: lock word {:#x} left behind",
                    t.name, r.key, r.lock
                ));
            }
            records += 1;
        }
    }
    checks.push(format!("no lock word left on any of {records} records"));
    let p = bench::pool_checks(pool, plan, view, protocol, 0, None);
    if !p.ok {
        return Err(p.checks.join("; "));
    }
    checks.extend(p.checks);
    if let Chosen::SmallBank(sb) = w {
        if sb.options().mix == smallbank::Mix::Transfer {
            let (mut total, mut initial) = (0i64, 0i64);
            for id in [smallbank::SAVINGS, smallbank::CHECKING] {
                let Some(t) = plan.table(id) else {
                    return Err(format!("no table {id}"));
                };
                for r in dtxn_workloads::scan_table(pool, t) {
                    let v: [u8; 8] = r.value[..8].try_into().map_err(|_| "short value")?;
                    total += i64::from_le_bytes(v);
                    initial += smallbank::SmallBank::initial(seed, id, r.key);
                }
            }
            if total != initial {
                return Err(format!(
                    "transfers only, yet the total is {total}, loaded {initial}"
                ));
            }
            checks.push(format!(
                "money is conserved: the total is {total} cents, as loaded"
            ));
        }
    }
    Ok(checks)
}

/// Takes the pool alone for the check: refused while any compute process is attached.
fn claim_alone(pool: &mut Pool, compute_nodes: u32) -> Result<dtxn_txn::Attachment> {
    let r = pool.run(
        bench::one_coordinator(compute_nodes),
        None,
        |mut ep| async move { dtxn_txn::attach(&mut ep, true).await },
    )?;
    match r.outputs.into_iter().next().flatten() {
        Some(Ok(a)) => Ok(a),
        Some(Err(AttachError::InUse(n))) => bail!(
            "{n} compute process(es) are attached to the pool: verify once every compute \
             process of the run has finished (a process killed while attached leaves its \
             claim behind until the pool is loaded again)"
        ),
        Some(Err(AttachError::HeldExclusively)) => bail!(
            "a compute process with --localized-validation holds the pool: verify once it \
             has finished"
        ),
        Some(Err(e)) => Err(anyhow!("cannot take the pool for the check: {e}")),
        None => bail!("the claiming coordinator did not finish"),
    }
}

/// The check's outcome.
#[derive(Debug, Serialize)]
struct Verdict {
    ok: bool,
    workload: String,
    options: serde_json::Value,
    seed: u64,
    protocol: String,
    compute_nodes: u32,
    files: Vec<PathBuf>,
    backend: String,
    /// The checks that passed, or the one that failed.
    checks: Vec<String>,
    /// `--lost`: compute nodes whose commits are unknown (only the checks without tallies).
    lost: Vec<u32>,
}

/// Reads the files' tallies as `W`'s, merges them, and checks the pool: the workload's check,
/// then the log slices and the backups.
fn check<W: Workload>(
    w: &W,
    protocol: dtxn_txn::Protocol,
    a: &PoolArgs,
    run: &RunId,
    plan: &Plan,
    files: &[(PathBuf, TallyFile)],
) -> Result<std::result::Result<Vec<String>, String>> {
    let mut tallies = Vec::with_capacity(files.len());
    for (path, f) in files {
        let t: W::Tally = serde_json::from_value(f.tally.clone())
            .map_err(|e| anyhow!("{}: not a {} tally: {e}", path.display(), w.name()))?;
        tallies.push(t);
    }
    let merged = merge_all(tallies).ok_or_else(|| anyhow!("no tally files"))?;
    let Attached {
        mut pool,
        plan,
        view,
    } = attach(a, run, plan)?;
    let plan = &plan;
    // ucx: as one of the run's compute nodes; shm runs one.
    let compute_nodes = if matches!(pool, Pool::Ucx(_)) {
        run.compute_nodes
    } else {
        1
    };
    let claim = claim_alone(&mut pool, compute_nodes)?;
    let shares = clear_void_shares(&pool, plan, protocol, run.leases);
    let verdict = w
        .verify(&pool, plan, run.seed, std::slice::from_ref(&merged))
        .map_err(|e| match e {
            WorkloadError::Inconsistent(what) => what,
            other => other.to_string(),
        })
        .and_then(|mut checks| {
            checks.extend(shares);
            // What the workload's checks do not look at: the log slices, and the backups (a
            // replica a commit missed, or a re-replicated node the copy left short).
            let p = bench::pool_checks(&pool, plan, view, protocol, 0, None);
            if !p.ok {
                return Err(p.checks.join("; "));
            }
            checks.extend(p.checks);
            Ok(checks)
        });
    bench::release_claim(&mut pool, claim, compute_nodes)?;
    Ok(verdict)
}

/// Before the checks of a run that held leases with a 2PL protocol: its void read shares
/// cleared ([`dtxn_workloads::clear_read_shares`]), and a line that says how many.
pub(crate) fn clear_void_shares(
    pool: &Pool,
    plan: &Plan,
    protocol: dtxn_txn::Protocol,
    leases: bool,
) -> Option<String> {
    (leases && protocol.read_shares()).then(|| {
        let n = dtxn_workloads::clear_read_shares(pool, &plan.tables);
        format!("{n} lock words counting void read shares (left to expire) cleared")
    })
}

/// Runs `dtxn verify`: exit 0 consistent, 1 a check failed, 2 the files or pool are wrong.
pub fn main(a: VerifyArgs) -> Result<ExitCode> {
    where_the_pool_is(&a.pool)?;
    let mut files = Vec::with_capacity(a.tallies.len());
    for p in &a.tallies {
        files.push((p.clone(), TallyFile::read(p)?));
    }
    let run = one_run(&files, &a.lost)?.clone();
    let w = rebuild(&run)?;
    let protocol = dtxn_txn::Protocol::from_name(&run.protocol)
        .ok_or_else(|| anyhow!("the files name an unknown protocol '{}'", run.protocol))?;
    let plan =
        Plan::new(&w.tables(protocol, run.vnum), &run.pool.shape()).map_err(|e| anyhow!("{e}"))?;
    let outcome = if !a.lost.is_empty() {
        // The survivors' files name the run; the lost processes' commits are unknown.
        let Attached {
            mut pool,
            plan,
            view,
        } = attach(&a.pool, &run, &plan)?;
        let nodes = if matches!(pool, Pool::Ucx(_)) {
            run.compute_nodes
        } else {
            1
        };
        claim_over_lost(&mut pool, nodes, a.lost.len() as u64)?;
        let verdict = check_without_tallies(&w, &pool, &plan, view, protocol, run.seed);
        release_over_lost(&mut pool, nodes)?;
        verdict
    } else {
        match &w {
            Chosen::SmallBank(x) => check(x, protocol, &a.pool, &run, &plan, &files)?,
            Chosen::Kv(x) => check(x, protocol, &a.pool, &run, &plan, &files)?,
            Chosen::Tatp(x) => check(x, protocol, &a.pool, &run, &plan, &files)?,
            Chosen::Tpcc(x) => check(x, protocol, &a.pool, &run, &plan, &files)?,
            Chosen::Skew(x) => check(x, protocol, &a.pool, &run, &plan, &files)?,
        }
    };
    let ok = outcome.is_ok();
    let v = Verdict {
        ok,
        workload: run.workload.clone(),
        options: run.options.clone(),
        seed: run.seed,
        protocol: run.protocol.clone(),
        compute_nodes: run.compute_nodes,
        files: a.tallies.clone(),
        backend: a.pool.describe(),
        checks: outcome.unwrap_or_else(|e| vec![e]),
        lost: a.lost.clone(),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{}: {} under {} (seed {}), {} compute process(es), on {}",
            if ok { "consistent" } else { "NOT consistent" },
            v.workload,
            v.protocol,
            v.seed,
            v.compute_nodes,
            v.backend
        );
        if !v.lost.is_empty() {
            println!(
                "  (compute node(s) {} lost with their commits: the checks that need no tally)",
                v.lost
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for c in &v.checks {
            println!("  {} {c}", if ok { "ok:" } else { "FAILED:" });
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_id() -> RunId {
        RunId {
            leases: false,
            workload: "smallbank".into(),
            options: serde_json::json!({"accounts": 100, "hot": 4, "hot_pct": 90, "mix": "standard"}),
            seed: 1,
            protocol: "ford".into(),
            vnum: None,
            pool: ShapeFile {
                memory_nodes: 2,
                replicas: 2,
                log_slices: 8,
                log_slice_bytes: 16384,
                region_bytes: None,
            },
            compute_nodes: 2,
            threads: 1,
            coroutines: 4,
        }
    }

    fn file(k: u32, run: RunId) -> TallyFile {
        let t = smallbank::SmallBank::new(smallbank::Options::default())
            .unwrap()
            .tally(true);
        TallyFile::new::<smallbank::SmallBank>(run, k, &t).unwrap()
    }

    fn files(v: Vec<(&str, TallyFile)>) -> Vec<(PathBuf, TallyFile)> {
        v.into_iter().map(|(p, f)| (PathBuf::from(p), f)).collect()
    }

    #[test]
    fn a_whole_run_is_accepted_in_any_order() {
        let f = files(vec![
            ("b.json", file(1, run_id())),
            ("a.json", file(0, run_id())),
        ]);
        assert_eq!(one_run(&f, &[]).unwrap(), &run_id());
    }

    #[test]
    fn files_of_another_run_are_refused_with_what_differs() {
        let mut other = run_id();
        other.seed = 2;
        other.options["accounts"] = 200.into();
        let f = files(vec![
            ("a.json", file(0, run_id())),
            ("b.json", file(1, other)),
        ]);
        let e = one_run(&f, &[]).unwrap_err().to_string();
        assert!(
            e.starts_with("b.json is not from the run of a.json: "),
            "{e}"
        );
        assert!(
            e.contains(": seed 2, not 1") || e.contains("; seed 2, not 1"),
            "{e}"
        );
        assert!(e.contains("options {\"accounts\":200"), "{e}");
        assert!(!e.contains("protocol \""), "{e}");
    }

    #[test]
    fn duplicate_missing_and_stray_compute_nodes_are_refused() {
        let f = files(vec![
            ("a.json", file(0, run_id())),
            ("c.json", file(0, run_id())),
        ]);
        let e = one_run(&f, &[]).unwrap_err().to_string();
        assert!(
            e.contains("a.json and c.json are both compute node 0's"),
            "{e}"
        );
        let f = files(vec![("a.json", file(0, run_id()))]);
        let e = one_run(&f, &[]).unwrap_err().to_string();
        assert!(
            e.contains("no tally file of compute node(s) 1 of --compute-nodes 2"),
            "{e}"
        );
        let f = files(vec![
            ("a.json", file(0, run_id())),
            ("z.json", file(5, run_id())),
        ]);
        let e = one_run(&f, &[]).unwrap_err().to_string();
        assert!(
            e.contains("z.json: compute node 5, but its run has --compute-nodes 2"),
            "{e}"
        );
    }

    #[test]
    fn a_lost_compute_node_needs_no_file_and_may_not_have_one() {
        let f = files(vec![("a.json", file(0, run_id()))]);
        assert_eq!(one_run(&f, &[1]).unwrap(), &run_id());
        let e = one_run(&f, &[0]).unwrap_err().to_string();
        assert!(e.contains("--lost says its process died"), "{e}");
        let e = one_run(&f, &[1, 2]).unwrap_err().to_string();
        assert!(e.contains("--lost 2: the run has --compute-nodes 2"), "{e}");
    }

    #[test]
    fn files_round_trip_and_bad_ones_are_named() {
        let dir = std::env::temp_dir().join(format!("dtxn-tally-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.json");
        let f = file(1, run_id());
        f.write(&p).unwrap();
        let back = TallyFile::read(&p).unwrap();
        assert_eq!((back.run, back.compute_node), (run_id(), 1));
        assert_eq!(back.tally, f.tally);
        std::fs::write(&p, "{\"txn\": 1}").unwrap();
        let e = TallyFile::read(&p).unwrap_err().to_string();
        assert!(e.contains("t.json: not a dtxn tally file"), "{e}");
        std::fs::write(&p, "{\"format\": \"dtxn-tally\", \"version\": 9}").unwrap();
        let e = TallyFile::read(&p).unwrap_err().to_string();
        assert!(e.contains("version 9"), "{e}");
        std::fs::write(&p, "[1, 2").unwrap();
        let e = TallyFile::read(&p).unwrap_err().to_string();
        assert!(e.contains("t.json: not JSON"), "{e}");
        let e = TallyFile::read(&dir.join("none.json")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read"), "{e:#}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn the_workload_is_rebuilt_from_the_files() {
        let w = rebuild(&run_id()).unwrap();
        assert!(matches!(w, Chosen::SmallBank(_)));
        let mut r = run_id();
        r.options["warp"] = 1.into();
        let e = rebuild(&r).err().expect("refused").to_string();
        assert!(e.contains("warp"), "{e}");
        r.workload = "ycsb".into();
        assert!(rebuild(&r)
            .err()
            .expect("refused")
            .to_string()
            .contains("valid: "));
    }

    #[test]
    fn the_check_waits_for_no_one_and_refuses_while_a_process_is_attached() {
        let mut pool = Pool::Shm(
            ShmPool::create(dtxn_fabric::shm::ShmConfig {
                node_sizes: vec![1 << 16],
                dir: None,
                delay_ns: 0,
            })
            .unwrap(),
        );
        let r = pool
            .run(bench::one_coordinator(1), None, |mut ep| async move {
                dtxn_txn::attach(&mut ep, false).await
            })
            .unwrap();
        let running = r.outputs.into_iter().next().flatten().unwrap().unwrap();
        let e = claim_alone(&mut pool, 1).unwrap_err().to_string();
        assert!(e.contains("1 compute process(es) are attached"), "{e}");
        bench::release_claim(&mut pool, running, 1).unwrap();
        let alone = claim_alone(&mut pool, 1).unwrap();
        bench::release_claim(&mut pool, alone, 1).unwrap();
    }
}
