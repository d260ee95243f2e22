//! What a run tells its user besides the numbers: whether the result was checked, a warning
//! for an empty history, and no progress output off a terminal (or with --quiet).

use std::process::{Command, Output};

fn dtxn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dtxn"))
        .args(args)
        .output()
        .expect("dtxn runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("dtxn-out-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

const SHORT: [&str; 6] = [
    "--backend",
    "sim",
    "--duration",
    "2ms",
    "--accounts",
    "1000",
];

fn bench(extra: &[&str]) -> Output {
    let mut args = vec!["bench"];
    args.extend(SHORT);
    args.extend(extra);
    let o = dtxn(&args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
    o
}

#[test]
fn the_table_says_whether_the_result_was_checked() {
    let o = bench(&[]);
    let out = text(&o.stdout);
    assert!(
        out.trim_end().ends_with(
            "not checked: add --verify to check the workload's invariants, or --record FILE \
             and dtxn check FILE for the isolation level"
        ),
        "{out}"
    );
    let out = text(&bench(&["--verify"]).stdout);
    assert!(out.contains("verify: consistent"), "{out}");
    assert!(!out.contains("not checked"), "{out}");
    let d = Dir::new("checked");
    let h = d.path("h.jsonl");
    let out = text(&bench(&["--record", &h]).stdout);
    assert!(
        out.contains(&format!(
            "not checked here: the history is in {h} (dtxn check {h})"
        )),
        "{out}"
    );
}

#[test]
fn off_a_terminal_a_run_writes_nothing_to_stderr_and_json_is_clean() {
    for extra in [&[][..], &["--quiet"], &["-q", "--json"], &["--json"]] {
        let o = bench(extra);
        assert_eq!(text(&o.stderr), "", "{extra:?}: no progress off a terminal");
        if extra.contains(&"--json") {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("only JSON");
            assert_eq!(v["config"]["workload"], "smallbank");
            assert_eq!(v["time"], "virtual");
        }
    }
    let o = dtxn(&[
        "torture",
        "--quiet",
        "--seeds",
        "1",
        "--txns",
        "50",
        "--protocols",
        "ford",
        "--workloads",
        "kv",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "");
    assert!(text(&o.stdout).contains("1 passed, 0 failed"));
}

#[test]
fn an_empty_history_checks_with_a_warning() {
    let d = Dir::new("empty");
    let empty = d.path("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let o = dtxn(&["check", &empty]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        text(&o.stdout).lines().next(),
        Some("serializable: 0 committed, 0 aborted, no anomalies")
    );
    assert_eq!(
        text(&o.stderr),
        format!(
            "dtxn: warning: {empty} holds no committed transaction (0 aborted): there was \
             nothing to check\n"
        )
    );
    // A history with transactions: no warning.
    let h = d.path("h.jsonl");
    bench(&["--record", &h]);
    let o = dtxn(&["check", &h]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stderr), "");
}

#[test]
fn the_abort_reasons_are_explained_under_the_abort_rate() {
    let out = text(&bench(&["--threads", "4", "--coroutines", "4"]).stdout);
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("committed/s"))
        .expect("the throughput line");
    let rate = lines[at];
    let (_, reasons) = rate.split_once("abort rate").unwrap();
    let listed: Vec<&str> = reasons
        .trim_start_matches(|c: char| c != '(')
        .trim_matches(|c| c == '(' || c == ')')
        .split(", ")
        .filter_map(|r| r.split_whitespace().next())
        .collect();
    assert!(!listed.is_empty(), "a contended run aborts: {rate}");
    let meanings = lines[at + 1];
    for r in listed {
        assert!(meanings.contains(&format!("{r}: ")), "{r} in {meanings}");
    }
    assert!(
        meanings.contains("lock-conflict: another transaction held a lock (no waiting)"),
        "{meanings}"
    );
}

/// The texts of an SVG plotters drew, with their y positions.
fn svg_texts(svg: &str) -> Vec<(f64, String)> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let y = t.split(" y=\"").nth(1)?.split('"').next()?.parse().ok()?;
            let body = t.split_once('>')?.1.split("</text>").next()?;
            Some((y, body.trim().to_string()))
        })
        .collect()
}

#[test]
fn sweep_plots_label_each_value_and_keep_the_legend_off_the_data() {
    let d = Dir::new("plots");
    let out = d.path("sweep");
    let o = dtxn(&[
        "sweep",
        "--backend",
        "sim",
        "--duration",
        "1ms",
        "--accounts",
        "1000",
        "--vary",
        "threads=1,2",
        "--vary",
        "protocol=ford,farm",
        "--out",
        &out,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let svg = std::fs::read_to_string(format!("{out}/sweep.svg")).unwrap();
    let texts = svg_texts(&svg);
    let count = |want: &str| texts.iter().filter(|(_, t)| t == want).count();
    // The title names what is fixed, not what varied (protocol).
    assert_eq!(
        texts[0].1,
        "smallbank on sim, coroutines 4, compute-nodes 1 (virtual time)"
    );
    // The x axes of throughput and abort rate: one label per value, nothing between.
    assert_eq!((count("1"), count("2"), count("threads")), (2, 2, 2));
    for (_, t) in &texts {
        assert!(!t.contains("0000"), "float noise in a label: {t}");
    }
    // The legend: one entry per series, below the axes (its own strip, off the data).
    let axis_y = texts
        .iter()
        .filter(|(_, t)| t == "threads")
        .map(|(y, _)| *y)
        .fold(0.0, f64::max);
    for series in ["protocol=ford", "protocol=farm"] {
        let (y, _) = texts.iter().find(|(_, t)| t == series).expect(series);
        assert!(
            *y > axis_y,
            "{series} at y {y}, the axes' labels at {axis_y}"
        );
    }
}
