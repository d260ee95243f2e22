//! `dtxn verify` end to end on file-backed shm pools (one process at a time; the ucx test in
//! `ucx_hosts.rs` runs two compute processes at once): `dtxn bench --tally-out`, then the
//! check over the files, a tampered file caught, and files that are not one run refused.

use std::path::{Path, PathBuf};
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

/// A directory for one test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("dtxn-verify-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self, f: &str) -> String {
        self.0.join(f).to_str().unwrap().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One shm run in `pool_dir`, writing its tallies to `tally`.
fn bench(pool_dir: &str, tally: &str, workload: &[&str]) {
    let mut args = vec![
        "bench",
        "--shm-dir",
        pool_dir,
        "--tally-out",
        tally,
        "--txns",
        "2000",
        "--warmup",
        "0",
        "--json",
    ];
    args.extend_from_slice(workload);
    let o = dtxn(&args);
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
}

fn verify(pool_dir: &str, tallies: &str) -> Output {
    dtxn(&on_shm(pool_dir, tallies))
}

/// Rewrites a tally file through `f`.
fn tamper(path: &str, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, v.to_string()).unwrap();
}

#[test]
fn a_runs_tally_file_verifies_and_a_tampered_one_fails_naming_the_invariant() {
    let d = Dir::new("shm");
    let (pool, t) = (d.path("pool"), d.path("t.json"));
    bench(&pool, &t, &["--workload", "smallbank", "--accounts", "500"]);
    let o = verify(&pool, &t);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.starts_with("consistent: smallbank under ford (seed 1), 1 compute process(es)"),
        "{out}"
    );
    assert!(
        out.contains("equals its initial value plus the committed changes"),
        "{out}"
    );

    // One committed change more than the run made: the balance no longer adds up.
    let bad = d.path("bad.json");
    std::fs::copy(&t, &bad).unwrap();
    tamper(&bad, |v| {
        let first = &mut v["tally"]["deltas"][0][1];
        *first = (first.as_i64().unwrap() + 100).into();
    });
    let o = verify(&pool, &bad);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}{}", text(&o.stderr));
    assert!(out.starts_with("NOT consistent: smallbank"), "{out}");
    assert!(
        out.contains("FAILED:") && out.contains("but loaded") && out.contains("committed changes"),
        "{out}"
    );

    // JSON says the same.
    let o = dtxn(&[
        "verify",
        "--backend",
        "shm",
        "--shm-dir",
        &pool,
        "--tallies",
        &bad,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["workload"], "smallbank");
    assert_eq!(v["files"][0], bad.as_str());
}

/// A backup that no longer holds what its primary holds fails `dtxn verify`, though the
/// workload's check (which reads primaries) passes: here SmallBank's savings table, primary
/// on memory node 0, zeroed in node 1's file; under FORD (records) and Motor (CVTs).
#[test]
fn a_backup_that_differs_from_its_primary_fails_verify() {
    for (protocol, says) in [
        (
            "ford",
            "savings: bucket 0 slot 0: memory node 1 holds None, the primary Some",
        ),
        (
            "motor",
            "memory node 1 holds version None, the primary Some",
        ),
    ] {
        a_backup_differs_under(protocol, says);
    }
}

fn a_backup_differs_under(protocol: &str, says: &str) {
    use dtxn_workloads::Workload;
    let d = Dir::new(&format!("backup-{protocol}"));
    let (pool, t) = (d.path("pool"), d.path("t.json"));
    bench(&pool, &t, &["--protocol", protocol, "--accounts", "500"]);
    let o = verify(&pool, &t);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    for check in [
        "no log slice pending",
        "every backup holds what its primary holds",
    ] {
        // (Motor's op logs stay pending by design: no slice check.)
        if protocol == "ford" || !check.contains("log") {
            assert!(out.contains(check), "{protocol}: {out}");
        }
    }

    // Where the run's savings table is: the layout verify itself rebuilds from the file.
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&t).unwrap()).unwrap();
    let shape = &run["run"]["pool"];
    let n = |k: &str| shape[k].as_u64().unwrap();
    let shape = dtxn_store::PoolShape {
        memory_nodes: n("memory_nodes") as u16,
        replicas: n("replicas") as usize,
        log_slices: n("log_slices") as u32,
        log_slice_bytes: n("log_slice_bytes"),
        region_bytes: None,
    };
    let options = serde_json::from_value(run["run"]["options"].clone()).unwrap();
    let sb = dtxn_workloads::smallbank::SmallBank::new(options).unwrap();
    let vnum = run["run"]["vnum"].as_u64().map(|v| v as u8);
    let p = dtxn_txn::Protocol::from_name(protocol).unwrap();
    let plan = dtxn_store::Plan::new(&sb.tables_for(p, vnum), &shape).unwrap();
    let savings = plan.tables.iter().find(|t| t.name == "savings").unwrap();
    assert_eq!(savings.replicas, vec![0, 1], "savings' primary is node 0");
    let file = Path::new(&pool).join("node-1.dtxn");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = savings.table_off as usize + 64;
    bytes[at..at + (savings.bytes() - 64) as usize].fill(0);
    std::fs::write(&file, bytes).unwrap();

    let o = verify(&pool, &t);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}{}", text(&o.stderr));
    assert!(out.contains(says), "{protocol}: {out}");
}

#[test]
fn kv_and_tatp_verify_from_their_files() {
    let d = Dir::new("kv");
    for (w, opts) in [
        ("kv", ["--keys", "2000"]),
        ("tatp", ["--subscribers", "500"]),
    ] {
        let (pool, t) = (d.path(&format!("{w}-pool")), d.path(&format!("{w}.json")));
        let mut args = vec!["--workload", w];
        args.extend_from_slice(&opts);
        bench(&pool, &t, &args);
        let o = verify(&pool, &t);
        assert!(
            o.status.success(),
            "{w}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        if w == "kv" {
            // A write the run never made.
            tamper(&t, |v| v["tally"]["writes"][0][1] = 1_000_000.into());
            let o = verify(&pool, &t);
            let out = text(&o.stdout);
            assert_eq!(o.status.code(), Some(1), "{out}");
            assert!(
                out.contains("committed transactions wrote it 1000000 times"),
                "{out}"
            );
        }
    }
}

/// Every wrong input is one line on stderr and exit 2: nothing is verified.
#[test]
fn files_that_are_not_one_whole_run_and_bad_options_are_refused() {
    let d = Dir::new("bad");
    let (pool, t) = (d.path("pool"), d.path("t.json"));
    bench(&pool, &t, &["--accounts", "300"]);
    let other = d.path("other.json");
    tamper_copy(&t, &other, |v| v["run"]["seed"] = 9.into());
    let node1 = d.path("node1.json");
    tamper_copy(&t, &node1, |v| v["compute_node"] = 1.into());
    let two = d.path("two.json");
    tamper_copy(&t, &two, |v| v["run"]["compute_nodes"] = 2.into());
    let garbage = d.path("garbage.json");
    std::fs::write(&garbage, "{\"hello\": 1}").unwrap();
    let both = format!("{t},{other}");
    let twice = format!("{t},{t}");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["verify"], "--tallies"),
        (on_shm(&pool, &both), "is not from the run of"),
        (on_shm(&pool, &twice), "are both compute node 0's tallies"),
        (on_shm(&pool, &node1), "but its run has --compute-nodes 1"),
        (
            on_shm(&pool, &two),
            "no tally file of compute node(s) 1 of --compute-nodes 2",
        ),
        (on_shm(&pool, &garbage), "not a dtxn tally file"),
        (
            vec!["verify", "--backend", "shm", "--tallies", &t],
            "needs --shm-dir",
        ),
        (
            vec!["verify", "--backend", "sim", "--tallies", &t],
            "dtxn bench --backend sim --verify",
        ),
        (
            vec!["verify", "--tallies", &t],
            "dtxn verify needs the run's pool: --memnodes HOST:PORT,... and --token",
        ),
        (
            vec!["bench", "--backend", "sim", "--tally-out", &t],
            "--tally-out is for pools that outlive this process",
        ),
        (
            vec!["bench", "--tally-out", &t],
            "--tally-out is for pools that outlive this process",
        ),
        (
            vec![
                "bench",
                "--backend",
                "ucx",
                "--memnodes",
                "127.0.0.1:9",
                "--token",
                "t",
                "--compute-nodes",
                "2",
                "--verify",
            ],
            "--tally-out FILE",
        ),
        (
            vec!["sweep", "--vary", "threads=1,2", "--tally-out", &t],
            "not of a sweep",
        ),
    ];
    for (args, want) in cases {
        let o = dtxn(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // A pool other than the run's: another workload's.
    let kv_pool = d.path("kv-pool");
    bench(
        &kv_pool,
        &d.path("kv.json"),
        &["--workload", "kv", "--keys", "500"],
    );
    let o = verify(&kv_pool, &t);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("loaded with other options"), "{err}");
}

/// `dtxn verify` arguments for `tallies` on the shm pool in `pool`.
fn on_shm<'a>(pool: &'a str, tallies: &'a str) -> Vec<&'a str> {
    vec![
        "verify",
        "--backend",
        "shm",
        "--shm-dir",
        pool,
        "--tallies",
        tallies,
    ]
}

fn tamper_copy(from: &str, to: &str, f: impl FnOnce(&mut serde_json::Value)) {
    std::fs::copy(Path::new(from), Path::new(to)).unwrap();
    tamper(to, f);
}
