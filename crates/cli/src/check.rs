//! `dtxn check`: reads a history file and reports whether it has the isolation level asked for.

use anyhow::Result;
use dtxn_check::{check_file, Isolation, Options};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, Default, clap::ValueEnum)]
pub enum IsolationArg {
    /// No cycle in the serialization graph (PL-3).
    #[default]
    Serializable,
    /// No G0/G1, and every cycle has two adjacent anti-dependencies (PL-SI).
    Snapshot,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// History file (JSON Lines; the format: docs/src/correctness.md).
    file: PathBuf,
    /// The isolation level to check for.
    #[arg(long, value_enum, default_value_t)]
    isolation: IsolationArg,
    /// Also order transactions by real time (strict serializability, strong SI).
    #[arg(long)]
    real_time: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Exit 0 without anomalies, 1 with; an unreadable file is an error (exit 2).
pub fn run(a: CheckArgs) -> Result<ExitCode> {
    let options = Options {
        isolation: match a.isolation {
            IsolationArg::Serializable => Isolation::Serializable,
            IsolationArg::Snapshot => Isolation::Snapshot,
        },
        real_time: a.real_time,
    };
    let report = check_file(&a.file, options)?;
    if report.committed == 0 {
        // Nothing to find an anomaly in: say so, or "no anomalies" would read as a result.
        eprintln!(
            "dtxn: warning: {} holds no committed transaction ({} aborted): there was nothing \
             to check",
            a.file.display(),
            report.aborted
        );
    }
    let text = if a.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        report.to_string()
    };
    // A reader that has seen enough (`| head`) is not an error.
    match io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(e.into()),
        _ => {}
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
