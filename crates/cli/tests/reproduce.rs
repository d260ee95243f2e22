//! `dtxn reproduce PAPER --quick`: every comparison runs and the report has a row for each,
//! with numbers; a directory holding other files is refused.

use std::collections::HashMap;

use std::process::{Command, Output};

fn dtxn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dtxn"))
        .args(args)
        .output()
        .expect("dtxn runs")
}

fn out_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dtxn-reproduce-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs `dtxn reproduce PAPER --quick` and returns each row's number (the *dtxn* column) by
/// its name, after checking the report's files.
fn quick(paper: &str, rows: &[&str]) -> HashMap<String, f64> {
    quick_report(paper, rows).0
}

/// [`quick`], and the report's Markdown.
fn quick_report(paper: &str, rows: &[&str]) -> (HashMap<String, f64>, String) {
    let dir = out_dir(paper);
    let o = dtxn(&[
        "reproduce",
        paper,
        "--quick",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let mut numbers = HashMap::new();
    for row in rows {
        let line = md
            .lines()
            .find(|l| l.starts_with(&format!("| {row} |")))
            .unwrap_or_else(|| panic!("no row {row:?} in {md}"));
        // | what | paper | dtxn | reproduced | ...
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let ours: f64 = cells[3].parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(ours >= 0.0 && ours.is_finite(), "{line}");
        assert!(["yes", "no"].contains(&cells[4]), "{line}");
        // Every row that misses has its entry under "Not reproduced, and why".
        if cells[4] == "no" {
            assert!(
                md.contains(&format!("\n- **{row}** (")),
                "{row} missed, no why: {md}"
            );
        }
        numbers.insert(row.to_string(), ours);
    }
    let rows_in_md = md
        .lines()
        .filter(|l| {
            l.starts_with("| ") && !l.starts_with("| comparison") && !l.starts_with("| measurement")
        })
        .count();
    assert_eq!(rows_in_md, rows.len(), "{md}");
    if paper == "sync" {
        assert!(md.contains("- `dtxn probe --backend sim"), "{md}");
    } else {
        assert!(md.contains("- a: `dtxn bench --backend sim"), "{md}");
    }
    let csv = std::fs::read_to_string(dir.join("ratios.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1, "{csv}");
    for f in ["ratios.png", "ratios.svg"] {
        assert!(std::fs::metadata(dir.join(f)).unwrap().len() > 1000, "{f}");
    }
    assert!(
        stdout.contains("reproduced (within 25% of the paper"),
        "{stdout}"
    );
    // Again into the same directory: its own report files may be replaced.
    let o = dtxn(&[
        "reproduce",
        paper,
        "--quick",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
    (numbers, md)
}

#[test]
fn ford_quick_writes_a_report_with_every_comparison() {
    let (n, md) = quick_report(
        "ford",
        &[
            "FORD / FaRM, SmallBank",
            "FORD / DrTM+H, SmallBank",
            "FORD / FaRM, TATP",
            "FORD / FaRM, TPC-C (1 warehouse: --quick)",
            "FORD / DrTM+H, TPC-C (1 warehouse: --quick)",
            "FORD-LV / FaRM, SmallBank",
            "FORD backup reads / none, SmallBank",
            "FORD selective / full flush, kv 4 writes, 1 coordinator",
            "FORD selective / full flush p50, kv 4 writes, 1 coordinator",
            "FORD 11 / 1 coroutines per thread, SmallBank",
            "FORD 11 / 1 coroutines per thread, TATP",
        ],
    );
    // 22 coordinators against 2 on two threads: the CPU, not the round trip, binds.
    assert!(n["FORD 11 / 1 coroutines per thread, TATP"] > 2.0, "{n:?}");
    // Three more FLUSHes on each replica's QP, each holding it 2 us: slower, not faster.
    assert!(
        n["FORD selective / full flush, kv 4 writes, 1 coordinator"] > 1.05,
        "{n:?}"
    );
    assert!(
        n["FORD selective / full flush p50, kv 4 writes, 1 coordinator"] < 0.95,
        "{n:?}"
    );
    // A row that misses says why, with its probe run: FaRM's TPC-C (1.4-1.6 at this size
    // against the paper's 2.7) with the links unlimited, and the runs' bytes.
    let tpcc = "FORD / FaRM, TPC-C (1 warehouse: --quick)";
    let row = md
        .lines()
        .find(|l| l.starts_with(&format!("| {tpcc} |")))
        .unwrap();
    if row.split('|').nth(4).unwrap().trim() == "no" {
        let why = md
            .lines()
            .find(|l| l.starts_with(&format!("- **{tpcc}**")))
            .unwrap();
        assert!(
            why.contains("With links of unlimited bandwidth (`--profile-set link_gbps=0,cn_link_gbps=0`, seed 1): ")
                && why.contains("bytes and")
                && why.contains("memory-node NICs busy"),
            "{why}"
        );
    }
    // Every row of FORD's that misses is explained (each has its Why).
    assert!(!md.contains("not explained by this report"), "{md}");
}

#[test]
fn motor_quick_writes_a_report_with_every_comparison() {
    let n = quick(
        "motor",
        &[
            "Motor / FORD, TPC-C (1 warehouse: --quick)",
            "Motor / FORD, SmallBank",
            "Motor / FORD, TATP",
            "Motor / FaRMv2-DM, TPC-C (1 warehouse: --quick)",
            "Motor / FaRMv2-DM, SmallBank",
            "Motor / FaRMv2-DM, TATP",
            "Motor vnum 2, StockLevel aborts %, TPC-C (1 warehouse: --quick)",
            "Motor vnum 4, StockLevel aborts %, TPC-C (1 warehouse: --quick)",
            "Motor vnum 4 / 2, TPC-C (1 warehouse: --quick)",
            "Motor vnum 4 / 8, TPC-C (1 warehouse: --quick)",
            "Motor CVT / O2N chains, KVS (zipf 0.99, 80% read-write)",
            "Motor CVT / N2O chains, KVS (zipf 0.99, 80% read-write)",
            "Motor CVT / O2N chains, KVS (zipf 0.99, 20% read-write)",
            "Motor CVT / N2O chains, KVS (zipf 0.99, 20% read-write)",
            "Motor CVT / O2N chains p50, KVS (zipf 0.99, 80% read-write)",
            "Motor CVT / N2O chains p50, KVS (zipf 0.99, 80% read-write)",
            "Motor CVT / O2N chains p50, KVS (zipf 0.99, 20% read-write)",
            "Motor CVT / N2O chains p50, KVS (zipf 0.99, 20% read-write)",
        ],
    );
    // Below saturation a chain's walk costs its round trips: new-to-old one node for the
    // newest version, old-to-new every node.
    for chain in ["O2N", "N2O"] {
        let rw80 = format!("Motor CVT / {chain} chains, KVS (zipf 0.99, 80% read-write)");
        assert!(n[rw80.as_str()] > 1.1, "{n:?}");
    }
}

#[test]
fn rcc_quick_writes_a_report_with_every_comparison() {
    let n = quick(
        "rcc",
        &[
            "one-sided / RPC, NO_WAIT, SmallBank",
            "one-sided / RPC, OCC, YCSB",
            "RPC / one-sided, MVCC, TPC-C NewOrder (1 warehouse: --quick)",
            "NO_WAIT / OCC, one-sided, SmallBank",
            "OCC / NO_WAIT, one-sided, YCSB",
            "MVCC hybrid 28 / RPC, SmallBank",
            "MVCC hybrid 28 / one-sided, SmallBank",
            "SUNDIAL hybrid 21 / RPC, SmallBank",
            "SUNDIAL hybrid 21 / one-sided, SmallBank",
            "SUNDIAL hybrid 21 / RPC, YCSB",
            "SUNDIAL hybrid 21 / one-sided, YCSB",
            "OCC / NO_WAIT, one-sided, YCSB high contention",
            "SUNDIAL / OCC, one-sided, YCSB high contention",
            "MVCC / OCC, one-sided, YCSB high contention",
            "CALVIN / NO_WAIT, one-sided, SmallBank",
        ],
    );
    // Even at 4 coordinators, RPCs cost the memory nodes' CPU and CALVIN its epochs.
    assert!(n["one-sided / RPC, NO_WAIT, SmallBank"] > 1.0, "{n:?}");
    assert!(n["CALVIN / NO_WAIT, one-sided, SmallBank"] < 1.0, "{n:?}");
}

#[test]
fn scythe_quick_writes_a_report_with_every_comparison() {
    quick(
        "scythe",
        &[
            "Scythe / FORD, SmallBank",
            "Scythe / FORD p99, SmallBank",
            "Scythe / FORD, TPC-C (1 warehouse: --quick)",
            "Scythe / FORD p99, TPC-C (1 warehouse: --quick)",
            "Scythe / FORD, YCSB 3:7",
            "Scythe / FORD, YCSB write-only",
            "Scythe / FORD p50, YCSB write-only",
            "hot-aware / OCC only, YCSB write-only",
            "hot-aware / TOCC only, SmallBank uniform",
            "takeout lock / CAS lock p50, YCSB write-only",
            "batched TSO / one FAA per timestamp p50, SmallBank",
        ],
    );
}

/// `--seeds 3`: each row's number is the median of its three seeds' (written to the CSV),
/// and the table gives their range.
#[test]
fn seeds_give_each_row_the_median_and_the_range() {
    let dir = out_dir("seeds");
    let o = dtxn(&[
        "reproduce",
        "scythe",
        "--quick",
        "--seeds",
        "3",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("the median of 3 seeds (1 to 3)"), "{md}");
    let csv = std::fs::read_to_string(dir.join("ratios.csv")).unwrap();
    let mut rows = 0;
    for line in csv.lines().skip(1) {
        // "what","paper",dtxn,reproduced,...,seeds (the quoted fields hold commas)
        let unquoted = line.splitn(5, '"').nth(4).unwrap();
        let ours: f64 = unquoted.split(',').nth(1).unwrap().parse().unwrap();
        let mut each: Vec<f64> = line
            .rsplit(',')
            .next()
            .unwrap()
            .split(';')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(each.len(), 3, "{line}");
        each.sort_by(f64::total_cmp);
        assert!((ours - each[1]).abs() < 1e-3, "{line}");
        // The table: `lo-hi (3 seeds)` beside the median.
        let what = line.split('"').nth(1).unwrap();
        let cells: Vec<String> = md
            .lines()
            .find(|l| l.starts_with(&format!("| {what} |")))
            .unwrap()
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        assert_eq!(
            cells[5],
            format!("{:.2}-{:.2} (3 seeds)", each[0], each[2]),
            "{line}"
        );
        rows += 1;
    }
    assert_eq!(rows, 11);
    std::fs::remove_dir_all(&dir).unwrap();
    // Seeds past the largest are refused, not wrapped.
    let o = dtxn(&[
        "reproduce",
        "scythe",
        "--seed",
        "18446744073709551615",
        "--seeds",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the seeds run past the largest"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The sync paper's probe is one run.
    let o = dtxn(&[
        "reproduce",
        "sync",
        "--quick",
        "--seeds",
        "3",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("--seeds: `reproduce sync` runs its probe once"));
}

#[test]
fn sync_quick_measures_torn_reads_and_atomics() {
    let n = quick(
        "sync",
        &[
            "bookend, 256 B: torn reads accepted",
            "single-read, 256 B: torn reads accepted",
            "mark-in-place, 256 B: torn reads accepted",
            "two-read, per-line, lock, 256 B: torn reads accepted",
            "bookend, single-read, mark-in-place, 128 B: torn reads accepted",
            "bookend, single-read, mark-in-place, 64 B: torn reads accepted",
            "contended CAS (one word), 8 workers, Mops",
            "contended CAS (one word), 128 workers, Mops",
            "CAS at 64 B stride, 128 workers, Mops",
            "CAS at 256 B stride, 128 workers, Mops",
            "CAS at 512 B stride, 64 workers, Mops",
            "CAS at 4 KiB stride, 128 workers, Mops",
        ],
    );
    // Correct schemes never accept a torn read; a single line never tears.
    assert_eq!(
        n["two-read, per-line, lock, 256 B: torn reads accepted"],
        0.0
    );
    assert_eq!(
        n["bookend, single-read, mark-in-place, 64 B: torn reads accepted"],
        0.0
    );
    assert!(n["bookend, 256 B: torn reads accepted"] > 0.0, "{n:?}");
    // One word serializes in the NIC's atomic unit (400 ns a slot: 2.5 M/s), as do words
    // 4 KiB apart; spread words scale with the workers.
    let one = n["contended CAS (one word), 128 workers, Mops"];
    assert!((2.0..=2.6).contains(&one), "{n:?}");
    assert!((n["CAS at 4 KiB stride, 128 workers, Mops"] / one - 1.0).abs() < 0.05);
    assert!(
        n["CAS at 64 B stride, 128 workers, Mops"] > 10.0 * one,
        "{n:?}"
    );
}

#[test]
fn a_directory_with_other_files_is_refused() {
    let dir = out_dir("busy");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let o = dtxn(&[
        "reproduce",
        "ford",
        "--quick",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("holds notes.txt"), "{err}");
    let o = dtxn(&["reproduce", "silo"]);
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}
