//! The hand-written histories in `fixtures/` (described in `fixtures/README.md`): the
//! serializable ones pass at every level, and each anomaly is flagged by its name.

use dtxn_check::{check_file, Isolation, Options, Report};
use std::path::PathBuf;

fn run(file: &str, isolation: Isolation, real_time: bool) -> Report {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    check_file(
        &path,
        Options {
            isolation,
            real_time,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The names of the anomalies found, sorted.
fn found(file: &str, isolation: Isolation, real_time: bool) -> Vec<&'static str> {
    let mut kinds: Vec<_> = run(file, isolation, real_time)
        .anomalies
        .iter()
        .map(|a| a.kind().name())
        .collect();
    kinds.sort_unstable();
    kinds
}

const PASS: [&str; 7] = [
    "pass_serial.jsonl",
    "pass_aborted.jsonl",
    "pass_deletes.jsonl",
    "pass_read_only.jsonl",
    "pass_real_time.jsonl",
    "pass_no_header.jsonl",
    "pass_intermediate_own.jsonl",
];

#[test]
fn serializable_histories_pass_at_every_level() {
    for file in PASS {
        for isolation in [Isolation::Serializable, Isolation::Snapshot] {
            for real_time in [false, true] {
                let r = run(file, isolation, real_time);
                assert!(r.ok(), "{file} {isolation:?} real_time={real_time}:\n{r}");
            }
        }
    }
}

#[test]
fn verdict_line_counts_committed_and_aborted() {
    let r = run("pass_aborted.jsonl", Isolation::Serializable, false);
    assert_eq!(
        r.verdict(),
        "serializable: 3 committed, 2 aborted, no anomalies"
    );
    let r = run("pass_real_time.jsonl", Isolation::Snapshot, true);
    assert_eq!(
        r.verdict(),
        "strong snapshot isolation: 4 committed, 0 aborted, no anomalies"
    );
}

/// (file, anomalies when serializable is asked, anomalies when snapshot isolation is asked).
const ANOMALIES: [(&str, &[&str], &[&str]); 12] = [
    ("g0.jsonl", &["G0"], &["G0"]),
    ("g1a.jsonl", &["G1a"], &["G1a"]),
    ("g1b.jsonl", &["G1b"], &["G1b"]),
    ("g1c.jsonl", &["G1c"], &["G1c"]),
    ("lost_update.jsonl", &["lost-update"], &["lost-update"]),
    ("g_single_read_skew.jsonl", &["G-single"], &["G-single"]),
    ("g2_write_skew.jsonl", &["G2"], &[]),
    ("g2_read_only.jsonl", &["G2"], &[]),
    ("g2_nonadjacent.jsonl", &["G2"], &["G2"]),
    ("real_time.jsonl", &[], &[]),
    ("torn_value.jsonl", &["torn-value"], &["torn-value"]),
    (
        "duplicate_version.jsonl",
        &["duplicate-version"],
        &["duplicate-version"],
    ),
];

#[test]
fn each_anomaly_is_flagged_by_name() {
    for (file, serializable, snapshot) in ANOMALIES {
        assert_eq!(
            found(file, Isolation::Serializable, false),
            serializable,
            "{file} serializable"
        );
        assert_eq!(
            found(file, Isolation::Snapshot, false),
            snapshot,
            "{file} snapshot"
        );
    }
}

#[test]
fn real_time_adds_only_real_time_violations() {
    for (file, serializable, snapshot) in ANOMALIES {
        let mut with_rt = serializable.to_vec();
        let mut with_rt_si = snapshot.to_vec();
        if file == "real_time.jsonl" {
            with_rt.push("real-time");
            with_rt_si.push("real-time");
        }
        assert_eq!(
            found(file, Isolation::Serializable, true),
            with_rt,
            "{file}"
        );
        assert_eq!(found(file, Isolation::Snapshot, true), with_rt_si, "{file}");
    }
}

#[test]
fn reports_name_the_transactions_keys_and_versions() {
    let r = run("g_single_read_skew.jsonl", Isolation::Serializable, false);
    assert_eq!(
        r.to_string(),
        "NOT serializable: 1 anomaly (G-single x1)\n\
         G-single: a cycle of 2 transactions\n  \
         txn 1 (session 1) -rw-> txn 2 (session 2): (1, 1) v0 read, then v1 installed\n  \
         txn 2 (session 2) -wr-> txn 1 (session 1): (1, 2) v1 installed, then read\n"
    );
    let r = run("g1a.jsonl", Isolation::Serializable, false);
    assert_eq!(
        r.anomalies[0].to_string(),
        "G1a: txn 2 (session 2) read (1, 1) v1, written by txn 1 (session 1), which aborted"
    );
    let r = run("g1b.jsonl", Isolation::Serializable, false);
    assert_eq!(
        r.anomalies[0].to_string(),
        "G1b: txn 2 (session 2) read (1, 1) v1, an intermediate version of txn 1 (session 1), \
         which installed v2 instead"
    );
    let r = run("lost_update.jsonl", Isolation::Serializable, false);
    assert_eq!(
        r.anomalies[0].to_string(),
        "lost-update: txn 2 (session 2), txn 3 (session 3) each read (1, 1) v1 and wrote it"
    );
    let r = run("torn_value.jsonl", Isolation::Serializable, false);
    assert_eq!(
        r.anomalies[0].to_string(),
        "torn-value: txn 3 (session 3) read (1, 1) v1 as value 0000000000000013, but txn 1 \
         (session 1) installed 0000000000000012"
    );
    let r = run("real_time.jsonl", Isolation::Serializable, true);
    assert_eq!(
        r.to_string(),
        "NOT strict serializable: 1 anomaly (real-time x1)\n\
         real-time: a cycle of 2 transactions\n  \
         txn 1 (session 1) -rt-> txn 2 (session 2): ended at 10, before the start at 20\n  \
         txn 2 (session 2) -rw-> txn 1 (session 1): (1, 1) v0 read, then v1 installed\n"
    );
    let r = run("g2_nonadjacent.jsonl", Isolation::Snapshot, false);
    let deps: Vec<_> = match &r.anomalies[0] {
        dtxn_check::Anomaly::Cycle { cycle, .. } => cycle.iter().map(|s| s.dep).collect(),
        other => panic!("{other}"),
    };
    assert_eq!(deps, ["rw", "wr", "rw", "wr"]);
}

#[test]
fn json_report_is_machine_readable() {
    let r = run("duplicate_version.jsonl", Isolation::Serializable, false);
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["counts"]["duplicate-version"], 1);
    assert_eq!(v["anomalies"][0]["kind"], "duplicate-version");
    assert_eq!(v["anomalies"][0]["txns"][1]["txn"], 2);
    assert_eq!(v["anomalies"][0]["version"], 1);
    let r = run("torn_value.jsonl", Isolation::Serializable, false);
    let v = serde_json::to_value(&r).unwrap();
    let a = &v["anomalies"][0];
    assert_eq!(a["kind"], "torn-value");
    assert_eq!(
        (&a["reader"]["txn"], &a["key"], &a["version"]),
        (&3.into(), &1.into(), &1.into())
    );
    assert_eq!(
        (&a["hash"], &a["expected"], &a["writer"]["txn"]),
        (&19.into(), &18.into(), &1.into())
    );
    assert!(a.get("first_reader").is_none());
}

#[test]
fn malformed_file_names_its_line() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/malformed.jsonl");
    let e = check_file(&path, Options::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("malformed.jsonl:3: missing field `version` (column 104)"),
        "{e}"
    );
}
