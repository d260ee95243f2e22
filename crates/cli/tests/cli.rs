//! The `dtxn` binary end to end: results on good input, one-line errors on bad input.

use std::process::{Command, Output};

fn dtxn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dtxn"))
        .args(args)
        .output()
        .expect("dtxn runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn probe_on_sim_separates_broken_from_correct_schemes() {
    let o = dtxn(&[
        "probe",
        "--backend",
        "sim",
        "--record-size",
        "256",
        "--reads",
        "3000",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        let scheme = r["scheme"].as_str().unwrap();
        let undetected = r["torn_undetected"].as_u64().unwrap();
        assert_eq!(r["reads"].as_u64().unwrap(), 6000, "{scheme}");
        match scheme {
            "bookend" | "single-read" | "mark-in-place" => {
                assert!(undetected > 0, "{scheme} should be caught tearing")
            }
            "two-read" | "per-line" | "lock" => assert_eq!(undetected, 0, "{scheme}"),
            other => panic!("unknown scheme {other}"),
        }
    }
}

#[test]
fn probe_is_reproducible_from_its_seed() {
    let run = |seed: &str| {
        let o = dtxn(&[
            "probe",
            "--record-size",
            "128",
            "--reads",
            "500",
            "--seed",
            seed,
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        o.stdout
    };
    assert_eq!(run("7"), run("7"));
    assert_ne!(run("7"), run("8"));
}

#[test]
fn bad_input_is_a_one_line_error_and_a_nonzero_exit() {
    let dir = std::env::temp_dir().join(format!("dtxn-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_profile = dir.join("bad.toml");
    std::fs::write(&bad_profile, "one_way_ns = \"fast\"\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["probe", "--backend", "rdma"], "invalid value 'rdma'"),
        (vec!["probe", "--record-size", "100"], "not a multiple of 8"),
        (vec!["probe", "--record-size", "16"], "at least 24"),
        (vec!["probe", "--readers", "0"], "at least 1"),
        (
            vec!["probe", "--profile", bad_profile.to_str().unwrap()],
            "does not parse",
        ),
        (
            vec!["probe", "--profile", "no-such-nic"],
            "neither a preset",
        ),
        (vec!["frobnicate"], "unrecognized subcommand"),
    ];
    for (args, want) in cases {
        let o = dtxn(&args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn help_documents_every_command() {
    let o = dtxn(&["--help"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("probe"));
}

#[test]
fn bench_help_lists_the_protocols_and_the_defaults() {
    let o = dtxn(&["bench", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for want in [
        "[possible values: ford, farm, drtmh, motor",
        "[possible values: smallbank, kv, tatp, tpcc, skew]",
        "[possible values: serializable, snapshot]",
        "tpcc: warehouses [default: 1]",
        "kv: zipf theta of the keys, 0 (uniform) or more [default: 0.99, YCSB's]",
        "tpcc: NewOrder's items drawn zipf(theta) instead of NURand",
        "kv: keys per transaction [default: 4]",
        "[default: cx5-100g]",
    ] {
        assert!(help.contains(want), "{want} not in bench --help");
    }
}

#[test]
fn leases_on_shm_report_their_terms_and_terms_that_fail_the_check_are_refused() {
    let o = dtxn(&[
        "bench",
        "--backend",
        "shm",
        "--workload",
        "smallbank",
        "--accounts",
        "1000",
        "--txns",
        "400",
        "--threads",
        "2",
        "--leases",
        "--verify",
        "--json",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let l = &v["leases"];
    // The defaults: guard twice (flight 50 ms + skew 1 ms), lease four times (guard + stall 200 ms).
    assert_eq!(l["guard_ns"], 102_000_000, "{l}");
    assert_eq!(l["lease_ns"], 1_208_000_000, "{l}");
    assert_eq!(l["flights_ok"], true, "{l}");
    assert!(l["max_flight_ns"].as_u64().unwrap() > 0, "{l}");
    assert_eq!(v["verify"]["ok"], true, "{out}");
    for (args, want) in [
        (
            &["--backend", "sim", "--leases"][..],
            "--leases is for shm and ucx",
        ),
        (&["--leases", "lease=10ms"][..], "must exceed 4/3"),
        (
            &["--leases", "guard=1ms"][..],
            "below the fabric's longest op flight",
        ),
        (&["--leases", "nope=1"][..], "unknown knob 'nope'"),
        (&["--leases", "skew"][..], "not KNOB=VALUE"),
        (
            &["--wait-memnodes", "1s"][..],
            "--wait-memnodes is for --backend ucx",
        ),
    ] {
        let o = dtxn(&[&["bench", "--txns", "10"][..], args].concat());
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    }
}
