//! `dtxn bench` fed random flag values never panics: it runs (exit 0) or refuses in one line
//! (exit 2), never exit 101 or a signal. Runs are kept short (a few ms of virtual time, or a
//! few hundred transactions) and tables small, so that a case takes a fraction of a second;
//! the values come from edge cases of each option (0, 1, negative, huge, not a number) and
//! ordinary ones.

use proptest::prelude::*;
use proptest::sample::select;
use std::process::Command;

/// One `--flag value`: mostly one of `good` (values a run takes), now and then one of `bad`
/// (edge cases: 0, negative, huge, not a number), so that many cases run and many refuse.
fn flag(
    name: &'static str,
    good: &'static [&'static str],
    bad: &'static [&'static str],
) -> BoxedStrategy<Vec<String>> {
    let value = if bad.is_empty() {
        select(good).boxed()
    } else {
        prop_oneof![3 => select(good), 1 => select(bad)].boxed()
    };
    value
        .prop_map(move |v| vec![format!("--{name}"), v.to_string()])
        .boxed()
}

fn switch(name: &'static str) -> BoxedStrategy<Vec<String>> {
    Just(vec![format!("--{name}")]).boxed()
}

/// The options of every workload: protocol, pool, coordinators, switches.
fn common_option() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        flag(
            "protocol",
            &["ford", "farm", "drtmh", "motor"],
            &["silo", ""]
        ),
        flag(
            "isolation",
            &["serializable", "snapshot"],
            &["read-committed"]
        ),
        flag(
            "vnum",
            &["1", "2", "4", "15"],
            &["0", "16", "255", "256", "-1"]
        ),
        flag(
            "threads",
            &["1", "2", "3"],
            &["0", "-1", "4097", "4294967296", "x", "1.5"]
        ),
        flag("coroutines", &["1", "3", "8"], &["0", "-1", "100000"]),
        flag("compute-nodes", &["1", "2", "3"], &["0", "5000", "-1"]),
        flag("compute-node", &["0"], &["1", "7"]),
        flag(
            "memory-nodes",
            &["1", "2", "3", "4"],
            &["0", "300", "65536"]
        ),
        flag("replicas", &["1", "2"], &["0", "3", "4", "-1"]),
        flag(
            "node-memory",
            &["64M", "1GiB", "0.1G"],
            &["0", "1K", "1T", "-1", "4x"]
        ),
        flag(
            "log-slice-bytes",
            &["64KiB", "1M"],
            &["0", "4K", "2G", "-4K"]
        ),
        flag(
            "seed",
            &["0", "1", "7", "18446744073709551615"],
            &["-1", "x"]
        ),
        flag(
            "warmup",
            &["0", "1ms", "100us"],
            &["2", "-1ms", "1e30s", "soon"]
        ),
        flag(
            "set",
            &[
                "ford.backup_reads=true",
                "ford.hitchhiked_locking=false",
                "ford.coalescent_commit=false",
                "ford.rpc=lock,validate,commit",
                "reread_limit=0",
                "reread_limit=1",
                "addr_cache_entries=0",
                "addr_cache_entries=16",
            ],
            &[
                "ford.flush=maybe",
                "ford.rpc=log",
                "motor.oracle=local",
                "motor.oracle=remote",
                "motor.start_clock_ns=1000",
                "motor.start_clock_ns=-1",
                "addr_cache_entries=99999999999",
                "protocol=farm",
                "nonsense",
            ]
        ),
        flag(
            "profile",
            &[
                "cx5-100g",
                "ideal",
                "cx5-100g-pm",
                "cx5-100g-papers",
                "cx5-100g-papers-pm",
            ],
            &["nope"]
        ),
        flag(
            "slots-per-bucket",
            &["1", "22", "64", "8,savings=2"],
            &["0", "65", "-1", "x", "2,2", "nosuch=3", "savings="]
        ),
        switch("warm-caches"),
        switch("benign"),
        flag("delay-ns", &["0", "100"], &["-1", "2000000000"]),
        switch("verify"),
        switch("localized-validation"),
        switch("json"),
        switch("quiet"),
        switch("fabric-time"),
        switch("load"),
    ]
    .boxed()
}

/// An option of `workload` (`other`: of any workload, mostly refused).
fn workload_option(workload: &str) -> BoxedStrategy<Vec<String>> {
    match workload {
        "smallbank" => smallbank_option(),
        "kv" => kv_option(),
        "tatp" => tatp_option(),
        _ => prop_oneof![
            smallbank_option(),
            kv_option(),
            tatp_option(),
            tpcc_option()
        ]
        .boxed(),
    }
}

/// SmallBank's options.
fn smallbank_option() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        flag(
            "mix",
            &["standard", "transfer"],
            &["1,1,1,1,1", "0,0,0,0,0", "x"]
        ),
        flag(
            "accounts",
            &["2", "3", "100", "2000"],
            &["0", "1", "1099511627777"]
        ),
        flag("hot-accounts", &["2", "50"], &["0", "1", "5000", "-1"]),
        flag("hot-pct", &["0", "50", "100"], &["101", "-1"]),
    ]
    .boxed()
}

/// kv's options.
fn kv_option() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        flag("keys", &["4", "100", "3000"], &["0", "1", "1099511627777"]),
        flag("hot-keys", &["1", "3"], &["-1", "1099511627777"]),
        flag("value-size", &["24", "40", "4096"], &["0", "8", "2097152"]),
        flag(
            "theta",
            &["0", "0.5", "0.99", "1", "3"],
            &["-1", "NaN", "inf"]
        ),
        flag("read-only-pct", &["0", "100"], &["101"]),
        flag("items", &["1", "4"], &["0", "64", "100000"]),
    ]
    .boxed()
}

/// TATP's options.
fn tatp_option() -> BoxedStrategy<Vec<String>> {
    flag("subscribers", &["1", "10", "1000"], &["0", "2199023255552"])
}

/// TPC-C's options (refused under the workloads run here).
fn tpcc_option() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        flag("warehouses", &["1"], &["0", "4294967295", "-1"]),
        flag("new-orders-per-district", &["100"], &["0", "99999999999"]),
        switch("spec-sizes"),
        flag("tpcc-order", &["batched", "ford"], &["lines", ""]),
        flag(
            "mix",
            &["standard", "1,1,0,0,0"],
            &["45,43,4,4", "0,0,0,0,0"]
        ),
    ]
    .boxed()
}

/// A short run: a few ms of (virtual on sim) time, or a few transactions.
fn length() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        2 => flag("duration", &["1ms", "5ms", "20ms", "500us"], &["0", "5", "-1ms", "x", "--json"]),
        1 => flag("txns", &["1", "50", "500"], &["0", "-1", "1e3"]),
    ]
    .boxed()
}

/// A workload with small tables (its name, and its options), and now and then one that does
/// not exist. TPC-C is left out: its smallest load takes seconds.
fn workload() -> BoxedStrategy<(&'static str, Vec<String>)> {
    const WORKLOADS: &[(&str, &[&str])] = &[
        (
            "smallbank",
            &["--workload", "smallbank", "--accounts", "1000"],
        ),
        ("smallbank", &["--accounts", "300"]),
        ("kv", &["--workload", "kv", "--keys", "2000"]),
        ("kv", &["--workload", "kv", "--keys", "500", "--items", "2"]),
        ("tatp", &["--workload", "tatp", "--subscribers", "500"]),
        ("tatp", &["--workload", "tatp", "--subscribers", "100"]),
    ];
    let unknown: (&str, &[&str]) = ("other", &["--workload", "ycsb"]);
    prop_oneof![12 => select(WORKLOADS), 1 => Just(unknown)]
        .prop_map(|(w, v)| (w, v.iter().map(|s| s.to_string()).collect()))
        .boxed()
}

/// A workload, and options: mostly common ones and the workload's own, now and then one of
/// another workload.
fn case() -> BoxedStrategy<(Vec<String>, Vec<Vec<String>>)> {
    workload()
        .prop_flat_map(|(w, base)| {
            let option = prop_oneof![
                4 => common_option(),
                2 => workload_option(w),
                1 => workload_option("other"),
            ];
            (Just(base), proptest::collection::vec(option, 0..4))
        })
        .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig {
        // PROPTEST_CASES=1000 for a longer hunt.
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(96),
        // A failing case is printed with its command line; no regression files.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn bench_never_panics(
        backend in prop_oneof![6 => Just("sim"), 2 => Just("shm"), 1 => select(&["ucx", "rdma"][..])],
        (w, options) in case(),
        len in length(),
    ) {
        let mut args = vec!["bench".to_string(), "--backend".into(), backend.into()];
        args.extend(w);
        args.extend(len);
        // Each option once (given twice, clap refuses it: true but not worth most cases).
        for o in options {
            if o[0] == "--set" || !args.contains(&o[0]) {
                args.extend(o);
            }
        }
        let o = Command::new(env!("CARGO_BIN_EXE_dtxn"))
            .args(&args)
            .output()
            .expect("dtxn runs");
        let err = String::from_utf8_lossy(&o.stderr);
        let cmd = args.join(" ");
        prop_assert!(!err.contains("panicked"), "dtxn {cmd}: {err}");
        match o.status.code() {
            Some(0) => {}
            Some(2) => {
                prop_assert_eq!(err.trim_end().lines().count(), 1, "dtxn {}: {}", cmd, err);
                prop_assert!(err.starts_with("dtxn: error: "), "dtxn {cmd}: {err}");
            }
            other => prop_assert!(false, "dtxn {cmd}: exit {other:?}: {err}"),
        }
    }
}
