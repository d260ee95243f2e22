//! `dtxn`: distributed transactions on disaggregated memory.

mod backend;
mod bench;
mod check;
mod layout;
mod memnode;
mod probe;
mod progress;
mod remote;
mod reproduce;
mod sweep;
mod torture;
mod units;
mod verify;

use anyhow::{bail, Result};
use backend::{Backend, BackendArgs};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use probe::{ProbeCounts, ProbeParams, Scheme};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "dtxn",
    version,
    about = "Distributed transactions on disaggregated memory"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Torn-read probe: which read schemes a fabric lets accept torn records.
    Probe(ProbeArgs),
    /// Run a benchmark (SmallBank, kv, TATP, TPC-C, skew) and report throughput, aborts, latency
    /// and per-transaction costs.
    Bench(Box<bench::BenchArgs>),
    /// Run `bench` over a grid of options; write one CSV and plots (PNG, SVG).
    Sweep(Box<sweep::SweepArgs>),
    /// A workload's memory needs: bytes per table and per memory node.
    Layout(Box<layout::LayoutArgs>),
    /// Check a history file for serializability or snapshot isolation anomalies.
    Check(check::CheckArgs),
    /// Check a workload's invariants on a pool after a run of several compute processes, from
    /// their `bench --tally-out` files.
    Verify(Box<verify::VerifyArgs>),
    /// Memory-node daemon: serves a region over UCX to compute processes until SIGTERM.
    Memnode(memnode::MemnodeArgs),
    /// Every protocol x workload x seed on the adversarial sim, histories checked and
    /// invariants verified; prints the replay command of the first failure.
    Torture(torture::TortureArgs),
    /// A paper's main comparisons on the sim at the paper's setup, our ratios beside the
    /// paper's: a report (Markdown, CSV, PNG, SVG).
    Reproduce(reproduce::ReproduceArgs),
}

#[derive(Debug, clap::Args)]
struct ProbeArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Record sizes in bytes (multiples of 8, at least 24), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024")]
    record_size: Vec<usize>,
    /// Schemes to probe, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    schemes: Vec<Scheme>,
    /// Records under test (few records means much contention).
    #[arg(long, default_value_t = 4)]
    records: usize,
    /// Reader coordinators.
    #[arg(long, default_value_t = 2)]
    readers: u32,
    /// Writer coordinators.
    #[arg(long, default_value_t = 1)]
    writers: u32,
    /// Reads per reader [default: 20000].
    #[arg(long, conflicts_with = "duration_ms")]
    reads: Option<u64>,
    /// Read for this many milliseconds (virtual on sim) instead of a fixed count (1 to
    /// 3,600,000).
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress on stderr (it shows only on a terminal anyway).
    #[arg(long, short)]
    quiet: bool,
}

#[derive(serde::Serialize)]
struct ProbeRow {
    scheme: &'static str,
    record_size: usize,
    correct_scheme: bool,
    #[serde(flatten)]
    counts: ProbeCounts,
}

fn probe(a: ProbeArgs) -> Result<ExitCode> {
    for &s in &a.record_size {
        if s < 24 || s % 8 != 0 {
            bail!("record size {s} is not a multiple of 8 bytes of at least 24");
        }
    }
    if a.readers == 0 || a.writers == 0 || a.records == 0 {
        bail!("--readers, --writers and --records must be at least 1");
    }
    if u64::from(a.readers) + u64::from(a.writers) > 1024 {
        bail!("--readers and --writers: at most 1,024 coordinators in all");
    }
    if a.records > 1 << 20 {
        bail!("--records {}: at most 1,048,576", a.records);
    }
    if a.record_size.iter().any(|&s| s > 1 << 20) {
        bail!("--record-size: at most 1 MiB (1048576 bytes)");
    }
    let reads = a.reads.unwrap_or(20_000);
    if !(1..=100_000_000).contains(&reads) {
        bail!("--reads {reads}: 1 to 100,000,000 per reader");
    }
    if let Some(ms) = a.duration_ms {
        if !(1..=3_600_000).contains(&ms) {
            bail!("--duration-ms {ms}: 1 to 3,600,000 (an hour)");
        }
    }
    let schemes = if a.schemes.is_empty() {
        Scheme::ALL.to_vec()
    } else {
        a.schemes.clone()
    };
    a.backend.check_options()?;
    let biggest = *a.record_size.iter().max().expect("clap requires one");
    // Each compute node probes its own records (several probes may share a memory node).
    let area = ((biggest as u64).div_ceil(64) * 64 * a.records as u64).div_ceil(4096) * 4096;
    let base = area * u64::from(a.backend.compute_node);
    let node_size = base + area;
    // On ucx the pool is whatever --memnodes lists; the probe uses memory node 0.
    let nodes = match a.backend.kind() {
        Backend::Ucx => a.backend.pool.memnode_addrs()?.len(),
        _ => 1,
    };
    let mut rows = Vec::new();
    let bar = progress::bar(!a.quiet, (a.record_size.len() * schemes.len()) as u64);
    for &size in &a.record_size {
        for &scheme in &schemes {
            bar.set_message(format!("{} at {size} bytes", scheme.name()));
            let mut pool = a.backend.pool(nodes, node_size)?;
            let params = ProbeParams {
                base,
                compute_node: a.backend.compute_node,
                scheme,
                record_size: size,
                records: a.records,
                readers: a.readers,
                writers: a.writers,
                reads_per_reader: reads,
                duration_ns: a.duration_ms.map(|ms| ms * 1_000_000),
            };
            let counts = probe::run_probe(&mut pool, &params)?;
            rows.push(ProbeRow {
                scheme: scheme.name(),
                record_size: size,
                correct_scheme: scheme.correct(),
                counts,
            });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if a.json {
        let out = serde_json::json!({
            "backend": a.backend.describe(),
            "records": a.records,
            "readers": a.readers,
            "writers": a.writers,
            "results": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("torn-read probe on {}", a.backend.describe());
        println!(
            "{} records, {} readers, {} writers\n",
            a.records, a.readers, a.writers
        );
        println!(
            "{:<14} {:>6} {:>9} {:>9} {:>9} {:>9} {:>11}  scheme is",
            "scheme", "bytes", "reads", "accepted", "rejected", "torn det", "TORN UNDET"
        );
        for r in &rows {
            let c = &r.counts;
            println!(
                "{:<14} {:>6} {:>9} {:>9} {:>9} {:>9} {:>11}  {}",
                r.scheme,
                r.record_size,
                c.reads,
                c.accepted,
                c.rejected,
                c.torn_detected,
                c.torn_undetected,
                if r.correct_scheme {
                    "correct"
                } else {
                    "broken"
                }
            );
        }
    }
    let violations: Vec<_> = rows
        .iter()
        .filter(|r| r.correct_scheme && r.counts.torn_undetected > 0)
        .map(|r| format!("{} at {} bytes", r.scheme, r.record_size))
        .collect();
    if !violations.is_empty() {
        eprintln!(
            "dtxn: error: correct schemes accepted torn reads ({}): this fabric breaks the \
             contract's line atomicity or ordering",
            violations.join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// clap's multi-line usage errors, folded into the one line a script can grep (without
/// clap's own `error: ` in front: the caller adds it).
pub(crate) fn one_line(e: &clap::Error) -> String {
    if let Some(line) = negative_value(e) {
        return line;
    }
    let text = e
        .to_string()
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("For more information") && !l.starts_with("Usage:")
        })
        .collect::<Vec<_>>()
        .join(" ");
    // Rust's words for a bad integer, in a user's.
    let text = text.replace("invalid digit found in string", "not a whole number");
    text.strip_prefix("error: ").unwrap_or(&text).to_string()
}

/// `--threads -1`: a negative number where only 0 or more make sense, said as such (clap
/// says "invalid digit found in string" or "-1 is not in 0..=4294967295").
fn negative_value(e: &clap::Error) -> Option<String> {
    if e.kind() != ErrorKind::ValueValidation {
        return None;
    }
    let text = |k| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.as_str()),
        _ => None,
    };
    let value = text(ContextKind::InvalidValue)?;
    let arg = text(ContextKind::InvalidArg)?;
    let negative = value.strip_prefix('-')?;
    if negative.parse::<f64>().is_err() {
        return None;
    }
    let flag = arg.split_whitespace().next().unwrap_or(arg);
    Some(format!(
        "invalid value '{value}' for '{arg}': {flag} cannot be negative"
    ))
}

/// Lets every option that takes a value take a negative number (`--threads -1`), so that the
/// error says the number is out of range, not that `-1` is an unknown flag.
pub(crate) fn negatives_as_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() && !a.is_positional() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(negatives_as_values)
}

fn main() -> ExitCode {
    let parsed = negatives_as_values(Cli::command())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            eprintln!("dtxn: error: {}", one_line(&e));
            return ExitCode::from(2);
        }
        Err(e) => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let r = match cli.cmd {
        Cmd::Probe(a) => probe(a),
        Cmd::Bench(a) => bench::main(*a),
        Cmd::Check(a) => check::run(a),
        Cmd::Torture(a) => torture::run(a),
        Cmd::Reproduce(a) => reproduce::run(a),
        Cmd::Layout(a) => layout::run(*a),
        Cmd::Sweep(a) => sweep::run(*a),
        Cmd::Memnode(a) => memnode::run(a),
        Cmd::Verify(a) => verify::main(*a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            // One line, whatever the causes' messages hold.
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("dtxn: error: {msg}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_keeps_sim_as_its_default_backend() {
        let cli = Cli::try_parse_from(["dtxn", "probe"]).unwrap();
        let Cmd::Probe(a) = cli.cmd else {
            panic!("not probe")
        };
        assert_eq!(a.backend.kind(), Backend::Sim);
        let cli =
            Cli::try_parse_from(["dtxn", "probe", "--backend", "shm", "--delay-ns", "5"]).unwrap();
        let Cmd::Probe(a) = cli.cmd else {
            panic!("not probe")
        };
        assert_eq!(a.backend.kind(), Backend::Shm);
        assert_eq!(a.backend.pool.delay_ns(), 5);
    }
}
