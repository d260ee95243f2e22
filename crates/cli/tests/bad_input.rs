//! Bad input never panics: every case is one line on stderr naming the problem, and exit
//! code 2, before any run starts (issue #19's list, and more).

use std::path::{Path, PathBuf};
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

/// A directory of this test process's own, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("dtxn-bad-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
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

/// Runs every case and asserts: exit 2, exactly one line on stderr, that line holds `want`,
/// no panic.
fn refused(cases: &[(Vec<&str>, &str)]) {
    for (args, want) in cases {
        let o = dtxn(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("dtxn: error: "), "{args:?}: {err}");
        assert!(!err.contains("error: error:"), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Usage:"), "{args:?}: {err}");
    }
}

#[test]
fn negative_numbers_say_so() {
    refused(&[
        (
            vec!["bench", "--threads", "-1"],
            "invalid value '-1' for '--threads <THREADS>': --threads cannot be negative",
        ),
        (
            vec!["bench", "--coroutines=-4"],
            "--coroutines cannot be negative",
        ),
        (
            vec!["bench", "--workload", "kv", "--keys", "-1"],
            "--keys cannot be negative",
        ),
        (
            vec!["probe", "--readers", "-2"],
            "--readers cannot be negative",
        ),
        (
            vec!["torture", "--seeds", "-1"],
            "--seeds cannot be negative",
        ),
        (
            vec!["bench", "--node-memory", "-1"],
            "--node-memory cannot be negative",
        ),
        (vec!["bench", "--warmup=-1s"], "'-1s' is negative"),
        (
            vec!["bench", "--duration", "-1ms"],
            "invalid value '-1ms' for '--duration <DURATION>': '-1ms' is negative",
        ),
        (
            vec!["bench", "--duration", "--json"],
            "'--json' is not a duration (e.g. 5s, 200ms)",
        ),
        (
            vec!["bench", "--workload", "kv", "--theta", "-1"],
            "kv: --theta must be 0 (uniform) or positive, got -1",
        ),
        (
            vec!["bench", "--workload", "smallbank", "--theta", "-1"],
            "smallbank: --theta must be 0 (uniform) or positive, got -1",
        ),
        (
            vec!["bench", "--workload", "tpcc", "--theta", "NaN"],
            "tpcc: --theta must be 0 (uniform) or positive, got NaN",
        ),
        (
            vec!["bench", "--workload", "tpcc", "--tpcc-variant", "dbx1000"],
            "tpcc: the dbx1000 variant runs NewOrder and Payment only",
        ),
        (
            vec!["bench", "--workload", "kv", "--tpcc-variant", "dbx1000"],
            "--tpcc-variant",
        ),
        (
            vec![
                "bench",
                "--workload",
                "smallbank",
                "--theta",
                "1",
                "--hot-pct",
                "5",
            ],
            "smallbank: --theta replaces the hot set (--hot-accounts, --hot-pct)",
        ),
        (
            vec![
                "bench",
                "--workload",
                "kv",
                "--theta",
                "1",
                "--hot-keys",
                "5",
            ],
            "kv: --hot-keys replaces zipf (--theta)",
        ),
        (
            vec!["bench", "--workload", "kv", "--hot-pct", "5"],
            "kv: --hot-pct needs --hot-keys",
        ),
        (
            vec!["bench", "--retry-backoff", "10us"],
            "--retry-backoff is an option of --retry",
        ),
        (
            vec![
                "bench",
                "--workload",
                "kv",
                "--keys",
                "100",
                "--hot-keys",
                "100",
            ],
            "kv: --hot-keys (100) must be below --keys (100)",
        ),
    ]);
}

#[test]
fn numbers_out_of_range_are_refused() {
    refused(&[
        (
            vec!["bench", "--threads", "100000"],
            "make 100000 coordinators; at most 4096",
        ),
        (
            vec![
                "bench",
                "--backend",
                "sim",
                "--compute-nodes",
                "64",
                "--threads",
                "64",
            ],
            "at most 4096",
        ),
        (
            vec!["bench", "--threads", "99999999999"],
            "invalid value '99999999999' for '--threads <THREADS>'",
        ),
        (
            vec!["bench", "--accounts", "99999999999999"],
            "--accounts 99999999999999: at most 1,099,511,627,776",
        ),
        (
            vec!["bench", "--log-slice-bytes", "1"],
            "--log-slice-bytes 1: 4096 to 1073741824 bytes",
        ),
        (
            vec!["bench", "--memory-nodes", "60000", "--replicas", "1"],
            "--memory-nodes 60000: at most 256",
        ),
        (
            vec!["bench", "--replicas", "1", "--set", "ford.flush=true"],
            "--set flush=true persists the backups (a lost primary is rebuilt from them): it \
             needs --replicas 2 or more, not 1",
        ),
        (
            vec!["bench", "--backend", "shm", "--set", "flush=true"],
            "--set flush=true on shm needs --shm-dir DIR (the memory nodes' files, written back \
             at each FLUSH): anonymous memory dies with the process",
        ),
        (
            vec!["bench", "--txns", "18446744073709551615"],
            "--txns 18446744073709551615: at most",
        ),
        (
            vec!["bench", "--duration", "100000m"],
            "--duration: at most a day",
        ),
        (
            vec!["bench", "--backend", "shm", "--delay-ns", "5000000000"],
            "--delay-ns 5000000000: at most 1000000000",
        ),
        (
            vec!["bench", "--set", "addr_cache_entries=999999999999"],
            "at most 16777216 per coordinator",
        ),
        (
            vec!["bench", "--backend", "sim", "--node-memory", "1000T"],
            "of memory",
        ),
        (
            vec!["torture", "--first-seed", "18446744073709551615"],
            "is past the last seed",
        ),
        (
            vec!["torture", "--seeds", "99999999"],
            "--seeds 99999999: at most",
        ),
        (vec!["probe", "--reads", "0"], "--reads 0: 1 to 100,000,000"),
        (
            vec!["probe", "--readers", "4294967295", "--writers", "2"],
            "--readers and --writers: at most 1,024 coordinators in all",
        ),
        (vec!["probe", "--duration-ms", "0"], "--duration-ms 0: 1 to"),
        (
            vec!["probe", "--records", "9999999999"],
            "--records 9999999999: at most",
        ),
        (
            vec!["layout", "--coordinators", "999999"],
            "--coordinators 999999: at most 4,096",
        ),
        (vec!["layout", "--txns", "99999999999999999"], "--txns"),
    ]);
}

#[test]
fn durations_need_a_unit_and_sizes_take_binary_units() {
    // A unitless duration is refused at once (it ran 124 s of wall time on sim as seconds).
    refused(&[
        (
            vec!["bench", "--backend", "sim", "--duration", "5"],
            "'5' has no unit: write 5s for seconds or 5ms for milliseconds",
        ),
        (vec!["bench", "--warmup", "2"], "'2' has no unit"),
        (
            vec!["bench", "--duration", "5 parsecs"],
            "unknown unit 'parsecs'",
        ),
        (
            vec!["bench", "--node-memory", "4XB"],
            "'4XB' is not a size (e.g. 4096, 64K, 512M, 512MiB, 4G)",
        ),
        (
            vec![
                "memnode",
                "--listen",
                "127.0.0.1:0",
                "--token",
                "t",
                "--size",
                "lots",
            ],
            "'lots' is not a size",
        ),
    ]);
    // MiB and GiB as well as M and G, and `0` needs no unit.
    for size in ["64MiB", "64M", "64mb", "0.0625GiB"] {
        let o = dtxn(&[
            "layout",
            "--workload",
            "smallbank",
            "--accounts",
            "1000",
            "--node-memory",
            size,
            "--json",
        ]);
        assert_eq!(o.status.code(), Some(0), "{size}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["nodes"][0]["region_bytes"], 64 << 20, "{size}");
    }
}

#[test]
fn config_type_errors_name_the_file_and_line() {
    let d = Dir::new("config");
    let threads = d.file("threads.toml", "workload = \"kv\"\nthreads = \"many\"\n");
    let float = d.file("float.toml", "\n\ncoroutines = 2.5\n");
    let switch = d.file("switch.toml", "verify = 1\n");
    let txn = d.file("txn.toml", "[txn]\nford.flush = \"yes\"\n");
    let nested = d.file(
        "nested.toml",
        "threads = 2\n\n[txn.ford]\nbackup_reads = 3\n",
    );
    let dur = d.file("dur.toml", "duration = 5\n");
    refused(&[
        (
            vec!["bench", "--config", &threads],
            "threads.toml: line 2: 'threads': invalid value 'many' for '--threads <THREADS>': \
             not a whole number",
        ),
        (
            vec!["bench", "--config", &float],
            "float.toml: line 3: 'coroutines': invalid value '2.5'",
        ),
        (
            vec!["bench", "--config", &switch],
            "switch.toml: line 1: 'verify' is a switch: true or false",
        ),
        (
            vec!["bench", "--config", &txn],
            "txn.toml: line 2: [txn] --set ford.flush=yes: expected true or false",
        ),
        (
            vec!["bench", "--config", &nested],
            "nested.toml: line 4: [txn] --set ford.backup_reads=3: expected true or false",
        ),
        (
            vec!["bench", "--config", &dur],
            "dur.toml: line 1: 'duration': invalid value '5' for '--duration <DURATION>': '5' \
             has no unit",
        ),
        (
            vec!["sweep", "--vary", "threads=1,2", "--config", &threads],
            "threads.toml: line 2",
        ),
    ]);
}

#[test]
fn sweep_values_and_protocol_switches_are_checked_before_running() {
    refused(&[
        (
            vec!["sweep", "--vary", "coroutines=1,x"],
            "--vary coroutines=1,x: invalid value 'x' for '--coroutines <COROUTINES>'",
        ),
        (
            vec!["sweep", "--vary", "protocol=ford,silo"],
            "[possible values: ford, farm, drtmh, motor",
        ),
        (
            vec!["sweep", "--vary", "verify=yes,no"],
            "--verify is a switch: its values are true and false",
        ),
        (
            vec![
                "sweep",
                "--retry-backoff",
                "10us",
                "--vary",
                "protocol=nowait,ford",
            ],
            "protocol=nowait: --retry-backoff is an option of --retry",
        ),
        (
            vec!["sweep", "--vary", "threads=1,2", "--csv", "x.csv"],
            "--csv is an option of a single dtxn bench run, not of a sweep",
        ),
        (
            vec!["bench", "--protocol", "ford", "--set", "motor.oracle=local"],
            "--set motor.oracle=local: a switch of motor (--protocol motor); this run's \
             protocol is ford",
        ),
        (
            vec![
                "bench",
                "--protocol",
                "farm",
                "--set",
                "motor.start_clock_ns=100",
            ],
            "a switch of motor",
        ),
    ]);
}

#[test]
fn options_of_another_backend_are_refused_naming_theirs() {
    refused(&[
        (
            vec!["bench", "--backend", "shm", "--benign"],
            "--benign is an option of --backend sim, not of shm",
        ),
        (
            vec!["bench", "--profile", "ideal"],
            "--profile is an option of --backend sim, not of shm",
        ),
        (
            vec!["bench", "--profile-set", "mn_cores=10"],
            "--profile-set is an option of --backend sim, not of shm",
        ),
        (
            vec!["bench", "--backend", "sim", "--profile-set", "mn_core=10"],
            "--profile-set: `mn_core` is not a profile field (fields: atomic_slot_ns,",
        ),
        (
            vec!["bench", "--backend", "sim", "--profile-set", "mn_cores=1.5"],
            "--profile-set: `mn_cores=1.5`: ",
        ),
        (
            vec!["bench", "--backend", "sim", "--delay-ns", "100"],
            "--delay-ns is an option of --backend shm, not of sim",
        ),
        (
            vec!["bench", "--backend", "sim", "--shm-dir", "/tmp"],
            "--shm-dir is an option of --backend shm, not of sim",
        ),
        (
            vec!["bench", "--backend", "sim", "--record-warmup"],
            "--record-warmup is an option of --record FILE",
        ),
        (
            vec![
                "bench",
                "--protocol",
                "drtmh",
                "--set",
                "ford.backup_reads=true",
            ],
            "--set ford.backup_reads=true: a switch of ford and farm; drtmh reads the primary",
        ),
        (
            vec!["probe", "--delay-ns", "100"],
            "--delay-ns is an option of --backend shm, not of sim",
        ),
        (
            vec!["probe", "--backend", "shm", "--benign"],
            "--benign is an option of --backend sim, not of shm",
        ),
        (
            vec!["probe", "--duration-ms", "5", "--reads", "10"],
            "'--duration-ms <DURATION_MS>' cannot be used with '--reads <READS>'",
        ),
        (
            vec!["bench", "--backend", "sim", "--token", "t"],
            "--token is an option of --backend ucx, not of sim",
        ),
        (
            vec!["verify", "--tallies", "t.json"],
            "dtxn verify needs the run's pool: --memnodes HOST:PORT,... and --token",
        ),
        (
            vec!["verify", "--tallies", "t.json", "--shm-dir", "/tmp"],
            "--shm-dir is an option of --backend shm, not of ucx",
        ),
    ]);
}

#[test]
fn shm_dir_does_not_create_missing_parents() {
    let d = Dir::new("shmdir");
    let missing = d.path("missing");
    let deep = Path::new(&missing).join("x");
    let deep = deep.to_str().unwrap();
    refused(&[
        (
            vec!["bench", "--shm-dir", deep],
            &format!(
                "--shm-dir {deep}: {missing} does not exist (dtxn creates the directory, not \
                 its parents)"
            ),
        ),
        (
            vec![
                "sweep",
                "--vary",
                "threads=1,2",
                "--out",
                deep,
                "--backend",
                "sim",
            ],
            &format!("--out {deep}: {missing} does not exist"),
        ),
    ]);
    assert!(!Path::new(&missing).exists(), "nothing created");
    let file = d.file("a-file", "");
    refused(&[(vec!["bench", "--shm-dir", &file], "not a directory")]);
}

#[test]
fn output_paths_are_checked_before_the_run() {
    let d = Dir::new("out");
    let missing = Path::new(&d.path("no-such-dir")).join("r.csv");
    let missing = missing.to_str().unwrap();
    let dir = d.path("");
    // A run of several seconds (TPC-C's load and 5 s), refused before it starts.
    let tpcc = [
        "--workload",
        "tpcc",
        "--warehouses",
        "4",
        "--duration",
        "5s",
    ];
    let with = |flag: &'static str, path: &str| -> Vec<String> {
        let mut v: Vec<String> = vec!["bench".into()];
        v.extend(tpcc.iter().map(|s| s.to_string()));
        v.extend([flag.to_string(), path.to_string()]);
        v
    };
    let cases = [
        (with("--csv", missing), "--csv"),
        (with("--record", missing), "--record"),
        (with("--csv", &dir), "a directory, not a file"),
    ];
    for (args, want) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&[(args.clone(), want)]);
        // Refused before the run: it printed no report.
        assert!(dtxn(&args).stdout.is_empty(), "{args:?} ran");
    }
    // A writable path is not left behind by the check when the run is refused later.
    let ok = d.path("later.csv");
    refused(&[(
        vec!["bench", "--csv", &ok, "--threads", "0"],
        "--threads must be at least 1",
    )]);
    assert!(!Path::new(&ok).exists());
}
