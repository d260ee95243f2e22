//! `dtxn reproduce ford|motor`: a paper's main comparisons, each a pair of `dtxn bench` runs on
//! the sim at the paper's own setup, with our ratio beside the paper's, written as a report
//! (Markdown, CSV, and a bar chart as PNG and SVG).
//!
//! Each experiment is data (the two runs' options and the paper's number), so that a reader
//! can re-run any row with the command the report prints.

use crate::bench::args::parse_bench;
use crate::bench::report::{thousands, BenchReport};
use anyhow::{Context, Result};
use plotters::prelude::*;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Paper {
    /// FORD (FAST'22) against FaRM and DrTM+H: SmallBank, TATP, TPC-C, localized validation.
    Ford,
    /// Motor (OSDI'24) against FORD: TPC-C, SmallBank, TATP.
    Motor,
}

#[derive(Debug, clap::Args)]
pub struct ReproduceArgs {
    /// Which paper's experiments.
    #[arg(value_enum)]
    pub paper: Paper,
    /// A small setup (4 coordinators, 1 ms runs, 1 TPC-C warehouse) that finishes in seconds:
    /// the report's shape, not the paper's numbers.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the report (`report.md`, `ratios.csv`, `ratios.png`, `ratios.svg`);
    /// created if missing, refused if it holds other files.
    #[arg(long, default_value = "reproduce")]
    pub out: PathBuf,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// One comparison: the throughput of run `a` over run `b`, against the paper's ratio.
struct Experiment {
    what: &'static str,
    /// The paper's ratio (committed transactions per second, `a` / `b`).
    paper: f64,
    /// Where the paper's number is.
    source: &'static str,
    workload: &'static [&'static str],
    a: &'static [&'static str],
    b: &'static [&'static str],
}

/// The workloads as FORD's code lays them out: 22 slots in every bucket of every table
/// (`ITEM_NUM_PER_NODE`); TPC-C's NewOrder locks the district first, then fetches line by
/// line.
const FORD_SMALLBANK: &[&str] = &["--workload", "smallbank", "--slots-per-bucket", "22"];
const FORD_TATP: &[&str] = &["--workload", "tatp", "--slots-per-bucket", "22"];
const FORD_TPCC: &[&str] = &[
    "--workload",
    "tpcc",
    "--warehouses",
    "8",
    "--tpcc-order",
    "ford",
    "--slots-per-bucket",
    "22",
];
/// The workloads as Motor's code lays them out: its slots per bucket per table, FORD's
/// NewOrder order.
const MOTOR_SMALLBANK: &[&str] = &["--workload", "smallbank", "--slots-per-bucket", "1"];
const MOTOR_TATP: &[&str] = &["--workload", "tatp", "--slots-per-bucket", "5,subscriber=1"];
const MOTOR_TPCC: &[&str] = &[
    "--workload",
    "tpcc",
    "--warehouses",
    "24",
    "--tpcc-order",
    "ford",
    "--slots-per-bucket",
    "1,customer=3,history=15,new_order=15,order=15,order_line=15,stock=4,customer_last_order=15",
];
const FORD: &[&str] = &["--protocol", "ford"];
/// FaRM as FORD's code ran it: without an address cache (every access READs its bucket).
const FARM: &[&str] = &["--protocol", "farm", "--set", "addr_cache_entries=0"];
const DRTMH: &[&str] = &["--protocol", "drtmh"];
/// Motor with its authors' timestamps (the compute process's own counter).
const MOTOR: &[&str] = &["--protocol", "motor", "--set", "motor.oracle=local"];

const FORD_EXPERIMENTS: &[Experiment] = &[
    Experiment {
        what: "FORD / FaRM, SmallBank",
        paper: 1.6,
        source: "FORD Fig. 10",
        workload: FORD_SMALLBANK,
        a: FORD,
        b: FARM,
    },
    Experiment {
        what: "FORD / DrTM+H, SmallBank",
        paper: 1.3,
        source: "FORD Fig. 10",
        workload: FORD_SMALLBANK,
        a: FORD,
        b: DRTMH,
    },
    Experiment {
        what: "FORD / FaRM, TATP",
        paper: 1.3,
        source: "FORD Fig. 10",
        workload: FORD_TATP,
        a: FORD,
        b: FARM,
    },
    Experiment {
        what: "FORD / FaRM, TPC-C (8 warehouses)",
        paper: 2.7,
        source: "FORD Fig. 10",
        workload: FORD_TPCC,
        a: FORD,
        b: FARM,
    },
    Experiment {
        what: "FORD / DrTM+H, TPC-C (8 warehouses)",
        paper: 1.5,
        source: "FORD Fig. 10",
        workload: FORD_TPCC,
        a: FORD,
        b: DRTMH,
    },
    Experiment {
        what: "FORD-LV / FaRM, SmallBank",
        paper: 1.7,
        source: "FORD (TOS) localized validation",
        workload: FORD_SMALLBANK,
        a: &["--protocol", "ford", "--localized-validation"],
        b: FARM,
    },
];

const MOTOR_EXPERIMENTS: &[Experiment] = &[
    Experiment {
        what: "Motor / FORD, TPC-C (24 warehouses)",
        paper: 1.98,
        source: "Motor Fig. 11",
        workload: MOTOR_TPCC,
        a: MOTOR,
        b: FORD,
    },
    Experiment {
        what: "Motor / FORD, SmallBank",
        paper: 1.65,
        source: "Motor Fig. 11",
        workload: MOTOR_SMALLBANK,
        a: MOTOR,
        b: FORD,
    },
    Experiment {
        what: "Motor / FORD, TATP",
        paper: 1.14,
        source: "Motor Fig. 11",
        workload: MOTOR_TATP,
        a: MOTOR,
        b: FORD,
    },
];

/// The paper's cluster, as `dtxn bench` options (sim, `cx5-100g-papers`).
fn setup(paper: Paper, quick: bool) -> Vec<&'static str> {
    // Warm address caches: the papers measure after a million transactions per thread.
    let mut v = vec![
        "--backend",
        "sim",
        "--profile",
        "cx5-100g-papers",
        "--warm-caches",
    ];
    if quick {
        v.extend([
            "--compute-nodes",
            "1",
            "--threads",
            "2",
            "--coroutines",
            "2",
            "--duration",
            "1ms",
            "--warmup",
            "500us",
        ]);
    } else {
        v.extend(match paper {
            // FORD: one compute node of 20 threads x 11 coroutines, 2 memory nodes, 2 replicas.
            Paper::Ford => [
                "--threads",
                "20",
                "--coroutines",
                "11",
                "--memory-nodes",
                "2",
            ],
            // Motor: 40 threads x 7 coroutines, 3 memory nodes, 3 replicas.
            Paper::Motor => [
                "--threads",
                "40",
                "--coroutines",
                "7",
                "--memory-nodes",
                "3",
            ],
        });
        v.extend(["--compute-nodes", "1", "--duration", "10ms"]);
    }
    v.extend([
        "--replicas",
        match paper {
            Paper::Ford => "2",
            Paper::Motor if quick => "2",
            Paper::Motor => "3",
        },
    ]);
    v
}

/// A workload's options at `--quick` size: TPC-C on one warehouse.
fn quick_workload(w: &[&'static str]) -> Vec<&'static str> {
    let mut out = w.to_vec();
    if let Some(i) = out.iter().position(|&x| x == "--warehouses") {
        out[i + 1] = "1";
    }
    out
}

/// One run's outcome.
struct Run {
    args: Vec<String>,
    report: BenchReport,
}

/// One experiment's outcome.
struct Row<'a> {
    e: &'a Experiment,
    /// `e.what`, or what `--quick` made of it.
    what: String,
    a: Run,
    b: Run,
}

impl Row<'_> {
    fn ratio(&self) -> f64 {
        let b = self.b.report.all.committed_per_s;
        if b > 0.0 {
            self.a.report.all.committed_per_s / b
        } else {
            f64::NAN
        }
    }

    fn within(&self) -> bool {
        (self.ratio() / self.e.paper - 1.0).abs() <= 0.25
    }
}

pub fn run(a: ReproduceArgs) -> Result<ExitCode> {
    prepare_out(&a.out)?;
    let experiments = match a.paper {
        Paper::Ford => FORD_EXPERIMENTS,
        Paper::Motor => MOTOR_EXPERIMENTS,
    };
    let started = Instant::now();
    let seed = a.seed.to_string();
    let mut rows = Vec::with_capacity(experiments.len());
    for (i, e) in experiments.iter().enumerate() {
        let run_one = |protocol: &[&str]| -> Result<Run> {
            let mut args: Vec<String> = setup(a.paper, a.quick)
                .into_iter()
                .map(String::from)
                .collect();
            let workload = if a.quick {
                quick_workload(e.workload)
            } else {
                e.workload.to_vec()
            };
            args.extend(workload.iter().map(|s| s.to_string()));
            args.extend(protocol.iter().map(|s| s.to_string()));
            args.extend(["--seed".to_string(), seed.clone(), "--quiet".to_string()]);
            let mut argv: Vec<OsString> = vec!["bench".into()];
            argv.extend(args.iter().map(OsString::from));
            let b = parse_bench(argv).with_context(|| e.what)?;
            let report = crate::bench::run(&b, false).with_context(|| e.what)?;
            Ok(Run { args, report })
        };
        let ra = run_one(e.a)?;
        let rb = run_one(e.b)?;
        let what = if a.quick && e.workload.contains(&"--warehouses") {
            let w = e.what.split(" (").next().unwrap_or(e.what);
            format!("{w} (1 warehouse: --quick)")
        } else {
            e.what.to_string()
        };
        let row = Row {
            e,
            what,
            a: ra,
            b: rb,
        };
        if !a.quiet {
            eprintln!(
                "[{}/{}] {}: {:.2} (paper {:.2}){}",
                i + 1,
                experiments.len(),
                row.what,
                row.ratio(),
                e.paper,
                if row.within() { "" } else { ", not within 25%" }
            );
        }
        rows.push(row);
    }
    let wall = started.elapsed().as_secs_f64();
    let md = report_md(a.paper, a.quick, &rows, wall);
    write(&a.out.join("report.md"), &md)?;
    write(&a.out.join("ratios.csv"), &report_csv(&rows))?;
    plot(&rows, &a.out.join("ratios.png"), true)?;
    plot(&rows, &a.out.join("ratios.svg"), false)?;
    print!("{}", table(&rows));
    println!(
        "{} of {} within 25% of the paper; report in {} ({:.0} s)",
        rows.iter().filter(|r| r.within()).count(),
        rows.len(),
        a.out.join("report.md").display(),
        wall
    );
    Ok(ExitCode::SUCCESS)
}

/// Creates `out`, or accepts it empty or holding only an earlier report's files.
fn prepare_out(out: &Path) -> Result<()> {
    const OURS: [&str; 4] = ["report.md", "ratios.csv", "ratios.png", "ratios.svg"];
    if out.exists() {
        if !out.is_dir() {
            anyhow::bail!("--out {}: not a directory", out.display());
        }
        let entries =
            std::fs::read_dir(out).with_context(|| format!("cannot read {}", out.display()))?;
        for e in entries {
            let name = e?.file_name();
            if !OURS.iter().any(|o| name == *o) {
                anyhow::bail!(
                    "--out {}: holds {} (not a report of ours): choose an empty or new directory",
                    out.display(),
                    name.to_string_lossy()
                );
            }
        }
    } else {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    }
    for f in OURS {
        crate::bench::check_writable("--out", &out.join(f))?;
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The table printed and put in the report: one row per experiment.
fn table(rows: &[Row<'_>]) -> String {
    let mut t = String::from(
        "| comparison | paper | dtxn | within 25% | committed/s (a / b) | p50 us (a / b) | p99 us (a / b) | round trips (a / b) | abort rate (a / b) |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let (a, b) = (&r.a.report.all, &r.b.report.all);
        let _ = writeln!(
            t,
            "| {} | {:.2} | {:.2} | {} | {} / {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2} / {:.2} | {:.1}% / {:.1}% |",
            r.what,
            r.e.paper,
            r.ratio(),
            if r.within() { "yes" } else { "no" },
            thousands(a.committed_per_s),
            thousands(b.committed_per_s),
            a.latency_us.p50,
            b.latency_us.p50,
            a.latency_us.p99,
            b.latency_us.p99,
            a.round_trips,
            b.round_trips,
            100.0 * a.abort_rate,
            100.0 * b.abort_rate,
        );
    }
    t
}

fn report_md(paper: Paper, quick: bool, rows: &[Row<'_>], wall: f64) -> String {
    let name = match paper {
        Paper::Ford => "FORD",
        Paper::Motor => "Motor",
    };
    let mut md = format!(
        "# {name}'s comparisons, reproduced on dtxn's sim\n\n\
         Each row is the committed transactions per second of run *a* over run *b* (virtual \
         time, sim profile `cx5-100g-papers`), beside the paper's ratio; *within 25%* compares the two. \
         {}Wall time: {wall:.0} s.\n\n",
        if quick {
            "**`--quick`**: 4 coordinators, 1 ms runs, TPC-C on one warehouse: the report's \
             shape, not the paper's setup. "
        } else {
            ""
        }
    );
    md.push_str(&table(rows));
    md.push_str("\n![ratios](ratios.png)\n\n## Commands\n\n");
    for r in rows {
        let _ = writeln!(
            md,
            "- {} ({}):\n  - a: `dtxn bench {}`\n  - b: `dtxn bench {}`",
            r.what,
            r.e.source,
            r.a.args.join(" "),
            r.b.args.join(" ")
        );
    }
    md
}

fn report_csv(rows: &[Row<'_>]) -> String {
    let mut s = String::from(
        "comparison,paper,dtxn,within_25pct,a_committed_per_s,b_committed_per_s,a_p50_us,b_p50_us,a_p99_us,b_p99_us\n",
    );
    for r in rows {
        let (a, b) = (&r.a.report.all, &r.b.report.all);
        let _ = writeln!(
            s,
            "\"{}\",{},{:.4},{},{:.0},{:.0},{:.2},{:.2},{:.2},{:.2}",
            r.what,
            r.e.paper,
            r.ratio(),
            r.within(),
            a.committed_per_s,
            b.committed_per_s,
            a.latency_us.p50,
            b.latency_us.p50,
            a.latency_us.p99,
            b.latency_us.p99,
        );
    }
    s
}

/// Paper's and dtxn's ratio side by side, one pair of bars per comparison.
fn plot(rows: &[Row<'_>], path: &Path, png: bool) -> Result<()> {
    let size = (960, 120 + 60 * rows.len() as u32);
    if png {
        crate::sweep::ensure_font()?;
        let root = BitMapBackend::new(path, size).into_drawing_area();
        draw(rows, root)?;
    } else {
        let root = SVGBackend::new(path, size).into_drawing_area();
        draw(rows, root)?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(
    rows: &[Row<'_>],
    root: DrawingArea<DB, plotters::coord::Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("plot: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let max = rows
        .iter()
        .flat_map(|r| [r.e.paper, r.ratio()])
        .filter(|x| x.is_finite())
        .fold(1.0f64, f64::max)
        * 1.15;
    let n = rows.len() as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "throughput ratio: paper (grey) and dtxn (blue)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(280)
        .build_cartesian_2d(0.0..max, (0..n).into_segmented())
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len())
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) => rows
                .get(*i as usize)
                .map_or(String::new(), |r| r.what.clone()),
            _ => String::new(),
        })
        .x_desc("a / b, committed transactions per second")
        .draw()
        .map_err(err)?;
    // Two thin bars per comparison: the segment's upper half the paper, the lower half dtxn.
    for (i, r) in rows.iter().enumerate() {
        let i = i as u32;
        for (v, color, top) in [
            (r.e.paper, RGBColor(160, 160, 160), true),
            (r.ratio(), RGBColor(40, 90, 200), false),
        ] {
            if !v.is_finite() {
                continue;
            }
            let (y0, y1) = if top {
                (SegmentValue::Exact(i), SegmentValue::CenterOf(i))
            } else {
                (SegmentValue::CenterOf(i), SegmentValue::Exact(i + 1))
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y0), (v, y1)],
                    color.filled(),
                )))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}
