//! `dtxn reproduce PAPER --quick`: every comparison runs and the report has a row for each,
//! with numbers; a directory holding other files is refused.

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

fn quick(paper: &str, rows: &[&str]) {
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
    for row in rows {
        let line = md
            .lines()
            .find(|l| l.starts_with(&format!("| {row}")))
            .unwrap_or_else(|| panic!("no row {row:?} in {md}"));
        // | what | paper | dtxn | within | committed/s a / b | ...
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let ratio: f64 = cells[3].parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(ratio > 0.0 && ratio.is_finite(), "{line}");
        assert!(["yes", "no"].contains(&cells[4]), "{line}");
    }
    assert!(md.contains("- a: `dtxn bench --backend sim"), "{md}");
    let csv = std::fs::read_to_string(dir.join("ratios.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1, "{csv}");
    for f in ["ratios.png", "ratios.svg"] {
        assert!(std::fs::metadata(dir.join(f)).unwrap().len() > 1000, "{f}");
    }
    assert!(stdout.contains("within 25% of the paper"), "{stdout}");
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
}

#[test]
fn ford_quick_writes_a_report_with_every_comparison() {
    quick(
        "ford",
        &[
            "FORD / FaRM, SmallBank",
            "FORD / DrTM+H, SmallBank",
            "FORD / FaRM, TATP",
            "FORD / FaRM, TPC-C (1 warehouse: --quick)",
            "FORD / DrTM+H, TPC-C (1 warehouse: --quick)",
            "FORD-LV / FaRM, SmallBank",
        ],
    );
}

#[test]
fn motor_quick_writes_a_report_with_every_comparison() {
    quick(
        "motor",
        &[
            "Motor / FORD, TPC-C (1 warehouse: --quick)",
            "Motor / FORD, SmallBank",
            "Motor / FORD, TATP",
        ],
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
