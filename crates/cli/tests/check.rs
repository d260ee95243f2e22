//! `dtxn check` end to end: exit 0 without anomalies, 1 with, 2 (and one line) for a file it
//! cannot read.

use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    format!(
        "{}/../check/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dtxn"))
        .arg("check")
        .args(args)
        .output()
        .expect("dtxn runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_serializable_history_exits_0() {
    let o = check(&[&fixture("pass_real_time.jsonl"), "--real-time"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "strict serializable: 4 committed, 0 aborted, no anomalies\n"
    );
}

#[test]
fn an_anomaly_exits_1_with_the_verdict_first() {
    let o = check(&[&fixture("g2_write_skew.jsonl")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("NOT serializable: 1 anomaly (G2 x1)"));
    assert_eq!(lines.next(), Some("G2: a cycle of 2 transactions"));
    // Write skew is allowed under snapshot isolation; read skew is not.
    let o = check(&[&fixture("g2_write_skew.jsonl"), "--isolation", "snapshot"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let o = check(&[
        &fixture("g_single_read_skew.jsonl"),
        "--isolation",
        "snapshot",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).starts_with("NOT snapshot isolation: 1 anomaly (G-single x1)"));
}

#[test]
fn real_time_is_checked_only_when_asked() {
    let o = check(&[&fixture("real_time.jsonl")]);
    assert_eq!(o.status.code(), Some(0));
    let o = check(&[&fixture("real_time.jsonl"), "--real-time"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).starts_with("NOT strict serializable: 1 anomaly (real-time x1)"));
}

#[test]
fn json_output_parses() {
    let o = check(&[&fixture("g1a.jsonl"), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["ok"], false);
    assert_eq!(v["level"], "serializable");
    assert_eq!(v["anomalies"][0]["kind"], "G1a");
    assert_eq!(v["anomalies"][0]["reader"]["txn"], 2);
    assert_eq!(v["anomalies"][0]["writer"]["txn"], 1);
}

#[test]
fn an_unreadable_file_is_one_line_with_its_line_number_and_exit_2() {
    let o = check(&[&fixture("malformed.jsonl")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("dtxn: error: "), "{err}");
    assert!(
        err.trim_end()
            .ends_with("malformed.jsonl:3: missing field `version` (column 104)"),
        "{err}"
    );

    let o = check(&["/nonexistent/history.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("dtxn: error: /nonexistent/history.jsonl: "),
        "{err}"
    );

    let o = check(&[&fixture("g0.jsonl"), "--isolation", "linearizable"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn a_torn_value_exits_1_under_both_levels() {
    for level in ["serializable", "snapshot"] {
        let o = check(&[&fixture("torn_value.jsonl"), "--isolation", level]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let out = stdout(&o);
        let mut lines = out.lines();
        assert!(
            lines
                .next()
                .unwrap()
                .ends_with(": 1 anomaly (torn-value x1)"),
            "{out}"
        );
        assert_eq!(
            lines.next(),
            Some(
                "torn-value: txn 3 (session 3) read (1, 1) v1 as value 0000000000000013, but \
                 txn 1 (session 1) installed 0000000000000012"
            )
        );
    }
}
