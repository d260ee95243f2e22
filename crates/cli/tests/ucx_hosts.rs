//! Pools across processes and hosts: `dtxn memnode` daemons and compute processes connected
//! with `--backend ucx`, over UCX's TCP transport.
//!
//! - `loopback_*`: everything on 127.0.0.1, several processes at once; their runs checked
//!   with `dtxn check` (merged histories) and `dtxn verify` (merged tallies).
//! - `namespaces_*`: "hosts" are Linux network namespaces this test creates, each with one veth
//!   port on a bridge (a "switch", in a namespace of its own), all on 10.77.0.0/24 (addresses
//!   exist only inside those namespaces, nothing is routed outside them); removed at the end,
//!   also when the test fails. Needs root and `ip`; skipped with a message otherwise.
//!
//! Every wait is bounded, and readiness is the daemon's "serving ... at ADDR" line (printed
//! once its listener is bound), never a sleep.

use dtxn_fabric::ucx::AVAILABLE;
use rustix::process::Signal;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

/// Start-up of a daemon.
const READY: Duration = Duration::from_secs(30);
/// A whole compute process.
const RUN: Duration = Duration::from_secs(240);
const TOKEN: &str = "ucx-hosts-test";

fn dtxn() -> &'static str {
    env!("CARGO_BIN_EXE_dtxn")
}

fn skip_without_ucx() -> bool {
    if !AVAILABLE {
        eprintln!("skipped: this build has no ucx backend (install libucx-dev)");
    }
    !AVAILABLE
}

/// A daemon, stopped with SIGTERM (then SIGKILL) when dropped.
struct Daemon {
    child: Child,
    lines: Receiver<String>,
    addr: SocketAddr,
}

impl Daemon {
    /// Runs `prefix... dtxn memnode args...` and waits for its address.
    fn start(prefix: &[&str], args: &[&str]) -> Daemon {
        let (prog, pre) = match prefix.split_first() {
            Some((p, rest)) => (*p, rest.to_vec()),
            None => (dtxn(), Vec::new()),
        };
        let mut cmd = Command::new(prog);
        cmd.args(&pre);
        if !prefix.is_empty() {
            cmd.arg(dtxn());
        }
        let mut child = cmd
            .arg("memnode")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dtxn memnode starts");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut d = Daemon {
            child,
            lines,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        let first = d.lines.recv_timeout(READY).unwrap_or_else(|e| {
            panic!("dtxn memnode {args:?} printed no address within {READY:?}: {e}")
        });
        d.addr = first
            .rsplit(" at ")
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {first:?}"));
        d
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Our own child's pid, which it keeps until we reap it.
        let _ = kill(self.child.id(), Signal::TERM);
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            // Bounded wait for the child to exit (not a readiness wait).
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` memory-node daemons on 127.0.0.1 (TCP on `lo`, 4 MiB each), and their addresses as
/// `--memnodes` takes them. They do not spin: several processes share a few cores here, and
/// spinning progress threads would starve each other.
fn loopback_memnodes(n: usize) -> (Vec<Daemon>, String) {
    let nodes: Vec<Daemon> = (0..n)
        .map(|_| {
            Daemon::start(
                &[],
                &[
                    "--listen",
                    "127.0.0.1:0",
                    "--size",
                    "4M",
                    "--token",
                    TOKEN,
                    "--ucx-tls",
                    "tcp",
                    "--ucx-devices",
                    "lo",
                    "--spin-us",
                    "0",
                ],
            )
        })
        .collect();
    let addrs = nodes
        .iter()
        .map(|d| d.addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    (nodes, addrs)
}

/// Sends `sig` to the process `pid` (a child of ours).
fn kill(pid: u32, sig: Signal) -> rustix::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32).ok_or(rustix::io::Errno::SRCH)?;
    rustix::process::kill_process(pid, sig)
}

/// Runs a command to completion, killing it after `RUN`.
fn run_bounded(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN) {
        Ok(o) => o.expect("the command ran"),
        Err(_) => {
            // A child that has not been reaped (its waiter is blocked).
            let _ = kill(pid, Signal::KILL);
            panic!("{cmd:?} did not finish within {RUN:?}");
        }
    }
}

/// Checks a `dtxn probe --json` run: exit 0, and no torn read accepted by a correct scheme.
fn check_probe(o: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{what}: {}\nstdout: {stdout}\nstderr: {stderr}",
        o.status
    );
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {stdout}"));
    let rows = v["results"].as_array().expect("results");
    assert!(!rows.is_empty(), "{what}: no results");
    for r in rows {
        assert!(r["reads"].as_u64().unwrap() > 0, "{what}: {r}");
        if r["correct_scheme"].as_bool().unwrap() {
            assert_eq!(r["torn_undetected"].as_u64(), Some(0), "{what}: {r}");
        }
    }
}

fn probe_cmd(prefix: &[&str], memnodes: &str, extra: &[&str]) -> Command {
    let mut cmd = match prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg(dtxn());
            c
        }
        None => Command::new(dtxn()),
    };
    cmd.args([
        "probe",
        "--backend",
        "ucx",
        "--memnodes",
        memnodes,
        "--token",
        TOKEN,
        "--record-size",
        "256",
        "--schemes",
        "two-read,per-line,lock,bookend",
        "--reads",
        "1500",
        "--json",
    ])
    .args(extra);
    cmd
}

/// `dtxn bench` against the memory nodes: SmallBank on FORD, small enough for a test.
fn bench_cmd(prefix: &[&str], memnodes: &str, extra: &[&str]) -> Command {
    workload_cmd(
        prefix,
        memnodes,
        &["--workload", "smallbank", "--accounts", "2000"],
        extra,
    )
}

fn workload_cmd(prefix: &[&str], memnodes: &str, workload: &[&str], extra: &[&str]) -> Command {
    let mut cmd = match prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg(dtxn());
            c
        }
        None => Command::new(dtxn()),
    };
    cmd.args([
        "bench",
        "--backend",
        "ucx",
        "--memnodes",
        memnodes,
        "--token",
        TOKEN,
    ])
    .args(workload);
    if !workload.contains(&"--protocol") {
        cmd.args(["--protocol", "ford"]);
    }
    cmd.args(["--threads", "1", "--coroutines", "4"]);
    if !extra.contains(&"--txns") && !extra.contains(&"--duration") {
        cmd.args(["--txns", "1500"]);
    }
    cmd.args(["--warmup", "50ms"]).args(extra);
    cmd
}

/// `dtxn verify` over the tally files of a run on these memory nodes.
fn verify_cmd(memnodes: &str, tallies: &[std::path::PathBuf]) -> Command {
    let files: Vec<&str> = tallies.iter().map(|p| p.to_str().unwrap()).collect();
    let mut cmd = Command::new(dtxn());
    cmd.args(["verify", "--backend", "ucx", "--memnodes", memnodes])
        .args(["--token", TOKEN, "--tallies", &files.join(",")]);
    cmd
}

fn assert_ok(o: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: {}\nstdout: {stdout}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// Checks the union of histories (each file starts with the format header) with `dtxn check`.
fn check_histories(files: &[std::path::PathBuf], merged: &std::path::Path) {
    let mut all = String::new();
    for (i, f) in files.iter().enumerate() {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut lines = text.lines();
        let header = lines.next().expect("a header line");
        if i == 0 {
            all.push_str(header);
            all.push('\n');
        }
        let body: Vec<&str> = lines.collect();
        assert!(!body.is_empty(), "{}: no transactions", f.display());
        for l in body {
            all.push_str(l);
            all.push('\n');
        }
    }
    std::fs::write(merged, all).unwrap();
    let o = run_bounded({
        let mut c = Command::new(dtxn());
        c.arg("check").arg(merged);
        c
    });
    let out = assert_ok(&o, "dtxn check");
    assert!(out.starts_with("serializable:"), "{out}");
}

/// The two tests below each start several busy processes on this 2-core machine; run at once
/// they starve each other's UCX progress (a namespace probe once timed out that way), so they
/// take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn loopback_two_memnodes_two_compute_processes() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    let (nodes, memnodes) = loopback_memnodes(2);

    // A wrong token: one line, exit 2, no rkey.
    let o = run_bounded({
        let mut c = Command::new(dtxn());
        c.args(["probe", "--backend", "ucx", "--memnodes", &memnodes])
            .args(["--token", "wrong"]);
        c
    });
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("refused the token"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // Two compute processes at once on the same memory nodes (loopback: --ucx-tls defaults
    // to tcp on lo), each as its own compute node.
    let spawn = |k: u32| {
        let cmd = probe_cmd(&[], &memnodes, &["--compute-node", &k.to_string()]);
        std::thread::spawn(move || run_bounded(cmd))
    };
    let (a, b) = (spawn(0), spawn(1));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    check_probe(&a, "compute node 0");
    check_probe(&b, "compute node 1");

    // SmallBank on FORD: a compute process that finds no pool says how to load one.
    let o = run_bounded(bench_cmd(&[], &memnodes, &["--compute-nodes", "2"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("memory node 0") && err.contains("has no dtxn pool"),
        "{err}"
    );
    assert!(err.contains("--load-only"), "{err}");
    // Loaded once, then two compute processes at once, each recording its history.
    let out = assert_ok(
        &run_bounded(bench_cmd(
            &[],
            &memnodes,
            &["--compute-nodes", "2", "--load-only"],
        )),
        "--load-only",
    );
    assert!(out.contains("loaded smallbank"), "{out}");
    let dir = std::env::temp_dir().join(format!("dtxn-ucx-hosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hist: Vec<_> = (0..2).map(|k| dir.join(format!("h{k}.jsonl"))).collect();
    let tallies: Vec<_> = (0..2).map(|k| dir.join(format!("t{k}.json"))).collect();
    let runs: Vec<_> = (0..2u32)
        .map(|k| {
            let cmd = bench_cmd(
                &[],
                &memnodes,
                &[
                    "--compute-nodes",
                    "2",
                    "--compute-node",
                    &k.to_string(),
                    "--record",
                    hist[k as usize].to_str().unwrap(),
                    "--tally-out",
                    tallies[k as usize].to_str().unwrap(),
                    "--json",
                ],
            );
            std::thread::spawn(move || run_bounded(cmd))
        })
        .collect();
    for (k, r) in runs.into_iter().enumerate() {
        let out = assert_ok(&r.join().unwrap(), &format!("bench, compute node {k}"));
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
    }
    check_histories(&hist, &dir.join("merged.jsonl"));
    // The invariants over both processes' commits: every balance is its loaded value plus
    // what the two committed together.
    let out = assert_ok(
        &run_bounded(verify_cmd(&memnodes, &tallies)),
        "verify, smallbank",
    );
    assert!(
        out.starts_with("consistent: smallbank under ford (seed 1), 2 compute process(es)"),
        "{out}"
    );
    // One process's tally alone does not account for the pool.
    let o = run_bounded(verify_cmd(&memnodes, &tallies[1..]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no tally file of compute node(s) 0"), "{err}");
    // A tampered tally: one committed change that never happened is caught, naming the
    // account and the invariant (loaded plus committed changes), exit 1.
    let bad = dir.join("t1-tampered.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tallies[1]).unwrap()).unwrap();
    let first = &mut v["tally"]["deltas"][0][1];
    *first = (first.as_i64().unwrap() + 1).into();
    std::fs::write(&bad, v.to_string()).unwrap();
    let o = run_bounded(verify_cmd(&memnodes, &[tallies[0].clone(), bad]));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.starts_with("NOT consistent: smallbank"), "{out}");
    assert!(
        out.contains("FAILED:") && out.contains("but loaded") && out.contains("committed changes"),
        "{out}"
    );
    // kv on FORD the same way: loaded once, two compute processes, histories checked.
    let kv = ["--workload", "kv", "--keys", "5000"];
    assert_ok(
        &run_bounded(workload_cmd(
            &[],
            &memnodes,
            &kv,
            &["--compute-nodes", "2", "--load-only"],
        )),
        "kv --load-only",
    );
    let kv_hist: Vec<_> = (0..2).map(|k| dir.join(format!("kv{k}.jsonl"))).collect();
    let kv_tallies: Vec<_> = (0..2).map(|k| dir.join(format!("kv{k}.json"))).collect();
    let runs: Vec<_> = (0..2u32)
        .map(|k| {
            let cmd = workload_cmd(
                &[],
                &memnodes,
                &kv,
                &[
                    "--compute-nodes",
                    "2",
                    "--compute-node",
                    &k.to_string(),
                    "--record",
                    kv_hist[k as usize].to_str().unwrap(),
                    "--tally-out",
                    kv_tallies[k as usize].to_str().unwrap(),
                ],
            );
            std::thread::spawn(move || run_bounded(cmd))
        })
        .collect();
    for (k, r) in runs.into_iter().enumerate() {
        assert_ok(&r.join().unwrap(), &format!("kv, compute node {k}"));
    }
    check_histories(&kv_hist, &dir.join("kv-merged.jsonl"));
    let out = assert_ok(
        &run_bounded(verify_cmd(&memnodes, &kv_tallies)),
        "verify, kv",
    );
    assert!(out.starts_with("consistent: kv under ford"), "{out}");
    assert!(
        out.contains("each key's write count equals its committed writes"),
        "{out}"
    );
    // Options that describe another pool are refused, not run.
    let o = run_bounded(bench_cmd(&[], &memnodes, &["--compute-nodes", "3"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("loaded with other options"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    drop(nodes);
}

/// Network namespaces named `dtxnt-<pid>-<name>`, deleted on drop.
struct Namespaces {
    names: Vec<String>,
}

impl Namespaces {
    fn prefix() -> String {
        format!("dtxnt-{}-", std::process::id())
    }

    /// Deletes namespaces left by earlier runs whose process is gone (killed mid-test).
    fn sweep_stale() {
        let Ok(o) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let pid = name
                .strip_prefix("dtxnt-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = Command::new("ip").args(["netns", "del", name]).status();
                }
            }
        }
    }

    /// `None` when this process cannot create namespaces (not root, no `ip`, no support).
    fn create(names: &[&str]) -> Result<Namespaces, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not root".into());
        }
        Namespaces::sweep_stale();
        let mut ns = Namespaces { names: Vec::new() };
        for n in names {
            let full = format!("{}{n}", Namespaces::prefix());
            let o = Command::new("ip")
                .args(["netns", "add", &full])
                .output()
                .map_err(|e| format!("cannot run ip: {e}"))?;
            if !o.status.success() {
                return Err(format!(
                    "ip netns add failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
            ns.names.push(full);
        }
        Ok(ns)
    }

    fn name(&self, short: &str) -> String {
        format!("{}{short}", Namespaces::prefix())
    }

    /// Runs `ip ARGS`, panicking (and so tearing down) on failure.
    fn ip(&self, args: &[&str]) {
        let o = Command::new("ip").args(args).output().expect("ip runs");
        assert!(
            o.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
}

impl Namespaces {
    /// Polls `dev`'s operational state in namespace `n` until it is up (at most `READY`).
    fn wait_up(&self, n: &str, dev: &str) {
        let deadline = std::time::Instant::now() + READY;
        loop {
            let o = Command::new("ip")
                .args(["-n", n, "-o", "link", "show", dev])
                .output()
                .expect("ip runs");
            let out = String::from_utf8_lossy(&o.stdout);
            if out.contains("state UP") {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{dev} in {n} is not up after {READY:?}: {out}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends (and so their peers).
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Persistent memory on ucx: memory nodes on files (`--path`), a run with `--set flush=true`
/// (every FLUSH asks the node to write back), both daemons killed with SIGKILL, restarted on
/// their files: `dtxn verify` finds every committed transaction of the run.
#[test]
fn memnodes_killed_and_restarted_on_their_files_lose_no_commit() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dtxn-ucx-kill9-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<String> = (0..2)
        .map(|k| dir.join(format!("node-{k}")).to_str().unwrap().to_string())
        .collect();
    let mem = |k: usize| {
        Daemon::start(
            &[],
            &[
                "--listen",
                "127.0.0.1:0",
                "--size",
                "4M",
                "--path",
                &files[k],
                "--node",
                &k.to_string(),
                "--token",
                TOKEN,
                "--ucx-tls",
                "tcp",
                "--ucx-devices",
                "lo",
                "--spin-us",
                "0",
            ],
        )
    };
    let addrs = |nodes: &[Daemon]| {
        nodes
            .iter()
            .map(|d| d.addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut nodes: Vec<Daemon> = (0..2).map(mem).collect();
    let memnodes = addrs(&nodes);
    assert_ok(
        &run_bounded(bench_cmd(&[], &memnodes, &["--load-only"])),
        "--load-only",
    );
    let tally = dir.join("t.json");
    let out = assert_ok(
        &run_bounded(bench_cmd(
            &[],
            &memnodes,
            &[
                "--set",
                "flush=true",
                "--tally-out",
                tally.to_str().unwrap(),
                "--json",
            ],
        )),
        "bench with flush",
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
    for d in &mut nodes {
        kill(d.child.id(), Signal::KILL).unwrap();
        d.child.wait().unwrap();
    }
    drop(nodes);
    let nodes: Vec<Daemon> = (0..2).map(mem).collect();
    let out = assert_ok(
        &run_bounded(verify_cmd(&addrs(&nodes), std::slice::from_ref(&tally))),
        "verify after kill -9 and restart",
    );
    assert!(
        out.starts_with("consistent: smallbank under ford (seed 1), 1 compute process(es)"),
        "{out}"
    );
    drop(nodes);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn namespaces_memnodes_on_two_hosts_compute_on_a_third() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    let ns = match Namespaces::create(&["m0", "m1", "c", "sw"]) {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!(
                "skipped: cannot create network namespaces ({why}); run as root with iproute2"
            );
            return;
        }
    };
    let (m0, m1, c, sw) = (ns.name("m0"), ns.name("m1"), ns.name("c"), ns.name("sw"));
    // One L2 segment, 10.77.0.0/24: every host's `v0` is a veth whose peer is a port of the
    // bridge `br0` in `sw`. (Two point-to-point links from the compute host, one per memory
    // node, were tried first: then each memory node sees an address of the compute host it
    // cannot reach, and UCX's teardown after such a failed connect sometimes aborted.)
    ns.ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
    for (n, port) in [(&m0, "p0"), (&m1, "p1"), (&c, "p2")] {
        ns.ip(&[
            "link", "add", "v0", "netns", n, "type", "veth", "peer", "name", port, "netns", &sw,
        ]);
        ns.ip(&["-n", &sw, "link", "set", port, "master", "br0"]);
        ns.ip(&["-n", &sw, "link", "set", port, "up"]);
    }
    ns.ip(&["-n", &sw, "link", "set", "br0", "up"]);
    for (n, addr) in [
        (&m0, "10.77.0.1/24"),
        (&m1, "10.77.0.5/24"),
        (&c, "10.77.0.2/24"),
    ] {
        ns.ip(&["-n", n, "addr", "add", addr, "dev", "v0"]);
        ns.ip(&["-n", n, "link", "set", "v0", "up"]);
        ns.ip(&["-n", n, "link", "set", "lo", "up"]);
    }
    // A veth's carrier comes up asynchronously (the kernel's link watch, about a second);
    // UCX ignores devices without one, so wait until every link is up, with a bound.
    for (n, dev) in [(&m0, "v0"), (&m1, "v0"), (&c, "v0"), (&sw, "br0")] {
        ns.wait_up(n, dev);
    }
    let daemon = |n: &str, ip: &str| {
        let listen = format!("{ip}:7000");
        Daemon::start(
            &["ip", "netns", "exec", n],
            &[
                "--listen",
                &listen,
                "--size",
                "1M",
                "--token",
                TOKEN,
                "--ucx-tls",
                "tcp",
                "--ucx-devices",
                "v0",
                "--spin-us",
                "0",
            ],
        )
    };
    let d0 = daemon(&m0, "10.77.0.1");
    let d1 = daemon(&m1, "10.77.0.5");
    let memnodes = format!("{},{}", d0.addr, d1.addr);
    let o = run_bounded(probe_cmd(
        &["ip", "netns", "exec", &c],
        &memnodes,
        &["--ucx-tls", "tcp", "--ucx-devices", "v0"],
    ));
    check_probe(&o, "compute process in its own namespace");

    // SmallBank on FORD from the compute namespace: load, run, verify, record, check.
    let dir = std::env::temp_dir().join(format!("dtxn-ucx-ns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hist = dir.join("h.jsonl");
    let out = assert_ok(
        &run_bounded(bench_cmd(
            &["ip", "netns", "exec", &c],
            &memnodes,
            &[
                "--ucx-tls",
                "tcp",
                "--ucx-devices",
                "v0",
                "--load",
                "--verify",
                "--record",
                hist.to_str().unwrap(),
                "--json",
            ],
        )),
        "bench in the compute namespace",
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["verify"]["ok"].as_bool(), Some(true), "{out}");
    assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
    check_histories(&[hist], &dir.join("merged.jsonl"));
    let _ = std::fs::remove_dir_all(&dir);
    drop((d0, d1));
    drop(ns);
}

/// A process whose stderr is read line by line as it runs, and whose stdout is collected.
struct Watched {
    child: Child,
    lines: Receiver<String>,
    stdout: std::thread::JoinHandle<String>,
}

impl Watched {
    fn spawn(mut cmd: Command) -> Watched {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the command starts");
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut out = child.stdout.take().expect("piped");
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut s);
            s
        });
        Watched {
            child,
            lines,
            stdout,
        }
    }

    /// The next stderr line satisfying `f`, within `RUN`.
    fn wait_line(&self, f: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = std::time::Instant::now() + RUN;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if f(&l) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Waits (at most `RUN`, polling for its exit) and returns its status, stdout and the
    /// stderr lines not read yet.
    fn finish(mut self, what: &str) -> (std::process::ExitStatus, String, Vec<String>) {
        let deadline = std::time::Instant::now() + RUN;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{what} did not finish within {RUN:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.stdout.join().unwrap();
        (status, out, self.lines.try_iter().collect())
    }
}

/// Three compute processes with leases (`--leases`) on two memory nodes; one dies mid-run
/// (after it printed progress, so its coordinators hold leases, and likely locks and pending
/// log entries). The two survivors' recovery service notices its expired leases, recovers
/// its four coordinators during their run, and they finish; `dtxn verify --lost 2` (the
/// dead process's tally died with it) finds no lock word, no pending log slice, replicas
/// identical, and the money of the transfer mix conserved.
///
/// The victim is stopped (SIGSTOP) rather than killed at once, and killed (SIGKILL) once the
/// survivors have recovered all of its coordinators: to the pool a stopped process is a dead
/// one (it never posts again), and recovery starts only once all its ops have executed (the
/// lease argument). Killing it while its PUTs are still queued at a memory node makes UCX
/// 1.13's TCP transport, which emulates RMA in software on the memory node, abort the daemon
/// (`ucp_rma_sw_send_cmpl` on the failed endpoint: "Fatal: unexpected error: Endpoint
/// timeout"); on RDMA NICs the NIC executes the verbs and the daemon sends nothing.
#[test]
fn loopback_a_compute_process_dead_mid_run_is_recovered_by_the_survivors() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    let (nodes, memnodes) = loopback_memnodes(2);
    let workload = [
        "--workload",
        "smallbank",
        "--accounts",
        "2000",
        "--mix",
        "transfer",
    ];
    assert_ok(
        &run_bounded(workload_cmd(
            &[],
            &memnodes,
            &workload,
            &["--compute-nodes", "3", "--load-only"],
        )),
        "--load-only",
    );
    let dir = std::env::temp_dir().join(format!("dtxn-ucx-leases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tallies: Vec<_> = (0..3).map(|k| dir.join(format!("t{k}.json"))).collect();
    // Generous terms for a busy 2-core machine: flights (and preemptions) up to 250 ms.
    let cmd = |k: u32| {
        workload_cmd(
            &[],
            &memnodes,
            &workload,
            &[
                "--compute-nodes",
                "3",
                "--compute-node",
                &k.to_string(),
                "--leases",
                "flight=250ms,skew=0",
                "--progress-lines",
                "--tally-out",
                tallies[k as usize].to_str().unwrap(),
                "--json",
            ],
        )
    };
    let survivors: Vec<Watched> = (0..2).map(|k| Watched::spawn(cmd(k))).collect();
    // The victim, compute node 2 (coordinators 8 to 11).
    let victim = Watched::spawn(cmd(2));
    let progressed = victim.wait_line(|l| l.starts_with("progress: "));
    assert!(progressed.is_some(), "the victim printed no progress");
    kill(victim.child.id(), Signal::STOP).unwrap();
    // Every one of its coordinators recovered by a survivor, as the survivors report it.
    let mut recovered = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + RUN;
    while recovered.len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the survivors recovered only {recovered:?} within {RUN:?}"
        );
        for s in &survivors {
            while let Ok(l) = s.lines.try_recv() {
                if let Some(rest) = l.strip_prefix("recovered: coordinator ") {
                    let c: u64 = rest.split(' ').next().unwrap().parse().unwrap();
                    recovered.insert(c);
                }
            }
        }
        if recovered.len() < 4 {
            // Bounded polling of the survivors' output (an observable event, not a guess).
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_eq!(
        recovered.into_iter().collect::<Vec<_>>(),
        vec![8, 9, 10, 11],
        "the victim's coordinators"
    );
    kill(victim.child.id(), Signal::KILL).unwrap();
    let (status, _, _) = victim.finish("the victim");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status}"
    );
    let mut reported = Vec::new();
    for (k, s) in survivors.into_iter().enumerate() {
        let (status, out, stderr) = s.finish(&format!("survivor {k}"));
        assert!(
            status.success(),
            "survivor {k}: {status}\n{out}\n{stderr:?}"
        );
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
        let l = &v["leases"];
        eprintln!("survivor {k}: {l}");
        assert_eq!(l["flights_ok"], true, "{out}");
        for r in l["recoveries"].as_array().expect("recoveries") {
            reported.push(r["coordinator"].as_u64().unwrap());
        }
    }
    reported.sort_unstable();
    reported.dedup();
    assert_eq!(reported, vec![8, 9, 10, 11], "the reports");
    // The survivors' tallies name the run; the victim's commits are unknown.
    let mut v = verify_cmd(&memnodes, &tallies[..2]);
    v.args(["--lost", "2"]);
    let out = assert_ok(&run_bounded(v), "verify --lost 2");
    assert!(
        out.starts_with("consistent: smallbank under ford (seed 1), 3 compute process(es)"),
        "{out}"
    );
    for check in [
        "no lock word left",
        "no log slice pending",
        "money is conserved",
    ] {
        assert!(out.contains(check), "{check}: {out}");
    }
    // Without --lost the check needs every process's commits.
    let o = run_bounded(verify_cmd(&memnodes, &tallies[..2]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no tally file of compute node(s) 2"), "{err}");
    // A run whose compute node 2 never starts: the liveness phase does not wait for it (its
    // slots hold the recovered incarnations of the dead one), and the others finish.
    let again: Vec<Watched> = (0..2).map(|k| Watched::spawn(cmd(k))).collect();
    for (k, s) in again.into_iter().enumerate() {
        let (status, out, stderr) = s.finish(&format!("second run, compute node {k}"));
        assert!(status.success(), "{k}: {status}\n{out}\n{stderr:?}");
    }
    drop(nodes);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// PM mode (`--set flush=true`, `memnode --path`): memory node 1 is killed with SIGKILL
/// mid-run (once the compute process has printed progress) and restarted on its file at its
/// address; the compute process (`--wait-memnodes`) stops the coordinators that found it
/// down, waits for it, reconnects, recovers them from their logs and finishes; `dtxn verify`
/// with its tally finds every committed transaction (every balance its loaded value plus
/// the committed changes), no lock left.
#[test]
fn loopback_a_memnode_killed_mid_run_and_restarted_loses_no_commit() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dtxn-ucx-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<String> = (0..2)
        .map(|k| dir.join(format!("node-{k}")).to_str().unwrap().to_string())
        .collect();
    let mem = |k: usize, listen: &str| {
        Daemon::start(
            &[],
            &[
                "--listen",
                listen,
                "--size",
                "4M",
                "--path",
                &files[k],
                "--node",
                &k.to_string(),
                "--token",
                TOKEN,
                "--ucx-tls",
                "tcp",
                "--ucx-devices",
                "lo",
                "--spin-us",
                "0",
            ],
        )
    };
    let mut nodes: Vec<Daemon> = (0..2).map(|k| mem(k, "127.0.0.1:0")).collect();
    let memnodes = nodes
        .iter()
        .map(|d| d.addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_ok(
        &run_bounded(bench_cmd(&[], &memnodes, &["--load-only"])),
        "--load-only",
    );
    let tally = dir.join("t.json");
    let bench = Watched::spawn(bench_cmd(
        &[],
        &memnodes,
        &[
            "--set",
            "flush=true",
            "--wait-memnodes",
            "60s",
            "--progress-lines",
            "--tally-out",
            tally.to_str().unwrap(),
            "--json",
        ],
    ));
    assert!(
        bench.wait_line(|l| l.starts_with("progress: ")).is_some(),
        "the run printed no progress"
    );
    let addr = nodes[1].addr.to_string();
    kill(nodes[1].child.id(), Signal::KILL).unwrap();
    nodes[1].child.wait().unwrap();
    nodes[1] = mem(1, &addr);
    let (status, out, stderr) = bench.finish("the run");
    assert!(status.success(), "{status}\n{out}\n{stderr:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let o = &v["memnode_outage"];
    eprintln!("outage: {o}");
    assert!(o["coordinators_stopped"].as_u64().unwrap() > 0, "{out}");
    assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
    let out = assert_ok(
        &run_bounded(verify_cmd(&memnodes, std::slice::from_ref(&tally))),
        "verify after the memory node's restart",
    );
    assert!(
        out.starts_with("consistent: smallbank under ford (seed 1), 1 compute process(es)"),
        "{out}"
    );
    drop(nodes);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Memory-node failover on ucx: three memory nodes, every table on two of them, one compute
/// process with leases. Memory node 1, the primary of a table, is killed (SIGKILL) for good
/// mid-run: a coordinator whose transaction fails on it probes the nodes, changes the pool's
/// view, every coordinator adopts it, the leader repairs the promoted backup, and the run goes
/// on and finishes. `dtxn verify` then reads the live replicas of the view (node 1 is gone)
/// and finds every committed transfer; a second run bootstraps from the view with node 1 still
/// down, and commits.
#[test]
fn loopback_a_memnode_dies_for_good_its_backup_takes_over_and_the_run_verifies() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    for protocol in ["ford", "motor"] {
        a_memnode_dies_for_good_under(protocol);
    }
}

/// [`loopback_a_memnode_dies_for_good_its_backup_takes_over_and_the_run_verifies`] under
/// `protocol`.
fn a_memnode_dies_for_good_under(protocol: &str) {
    let (mut nodes, memnodes) = loopback_memnodes(3);
    let workload = [
        "--protocol",
        protocol,
        "--workload",
        "smallbank",
        "--accounts",
        "2000",
        "--mix",
        "transfer",
        "--memory-nodes",
        "3",
        "--replicas",
        "2",
    ];
    assert_ok(
        &run_bounded(workload_cmd(&[], &memnodes, &workload, &["--load-only"])),
        "--load-only",
    );
    let dir = std::env::temp_dir().join(format!(
        "dtxn-ucx-failover-{protocol}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let tally = dir.join("t.json");
    // 1,500 transactions (`workload_cmd`): node 1 dies after the first hundred.
    let run = |tally: &std::path::Path| {
        workload_cmd(
            &[],
            &memnodes,
            &workload,
            &[
                "--leases",
                "flight=250ms,skew=0",
                "--progress-lines",
                "--tally-out",
                tally.to_str().unwrap(),
                "--json",
            ],
        )
    };
    let bench = Watched::spawn(run(&tally));
    assert!(
        bench.wait_line(|l| l.starts_with("progress: ")).is_some(),
        "the run printed no progress"
    );
    kill(nodes[1].child.id(), Signal::KILL).unwrap();
    nodes[1].child.wait().unwrap();
    let (status, out, stderr) = bench.finish("the run");
    assert!(status.success(), "{status}\n{out}\n{stderr:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let l = &v["leases"];
    eprintln!("leases: {l}");
    assert_eq!(l["final_view"], "view 1 (memory node 1 failed)", "{out}");
    let views = l["views"].as_array().expect("views");
    assert_eq!(views.len(), 1, "{out}");
    // Node 1 held a table's primary: its backup was promoted and repaired, by this process
    // (the run's only one).
    assert!(views[0]["promoted_tables"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(views[0]["coordinators"], 4, "{out}");
    assert_eq!(l["flights_ok"], true, "{out}");
    assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
    let out = assert_ok(
        &run_bounded(verify_cmd(&memnodes, std::slice::from_ref(&tally))),
        "verify after the failover",
    );
    assert!(
        out.starts_with(&format!("consistent: smallbank under {protocol}")),
        "{out}"
    );
    for check in [
        "every one of 4000 balances equals its initial value plus the committed changes",
        "money is conserved",
    ] {
        assert!(out.contains(check), "{check}: {out}");
    }
    // A new run on the pool whose node 1 is still gone: bootstrap reads the view and serves
    // every table from its live replica.
    let again = dir.join("t2.json");
    let out = assert_ok(&run_bounded(run(&again)), "a run in view 1");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
    assert_eq!(
        v["leases"]["final_view"], "view 1 (memory node 1 failed)",
        "{out}"
    );
    // No new view: its coordinators adopt view 1 as they start (acknowledge it; it is
    // already repaired), nothing more.
    for view in v["leases"]["views"].as_array().expect("views") {
        assert_eq!(view["view"], "view 1 (memory node 1 failed)", "{out}");
        assert_eq!(view["promoted_tables"], 0, "{out}");
    }
    drop(nodes);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Re-replication on ucx (`--leases ...,rejoin=true`): three memory nodes, every table on two
/// of them; node 1 is killed (SIGKILL) once the run printed progress, and a NEW blank daemon
/// is started at its address (same port, no file). The run's recovery service fails node 1
/// over (view 1), finds the replacement at a probe (a bootstrap), formats it and makes it
/// join (view 2), copies its tables to it and makes it a full replica (view 3); this process
/// (the run's only one) does it all and reports it (FORD, Motor, and CALVIN, whose copy
/// waits for its schedule to be held). The bench's own checks (`--verify`:
/// balances, every backup, the rejoined node's too, identical to its primary) and `dtxn
/// verify` then pass on the pool with the replacement.
#[test]
fn loopback_a_memnode_replaced_blank_mid_run_is_re_replicated_and_the_run_verifies() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    for protocol in ["ford", "motor", "calvin"] {
        a_memnode_replaced_blank_under(protocol, 1);
    }
}

/// The same with two compute processes: each runs the recovery service, so both probe the
/// failed node and either may lead the join and the copy; both end in view 3, the copy is
/// done once (the joins the processes report add up to node 1's slots), and `dtxn verify`
/// over both tallies finds every balance and every backup as it should be.
#[test]
fn loopback_two_compute_processes_re_replicate_a_memnode_replaced_blank() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if skip_without_ucx() {
        return;
    }
    a_memnode_replaced_blank_under("ford", 2);
}

fn a_memnode_replaced_blank_under(protocol: &str, processes: u32) {
    let (mut nodes, memnodes) = loopback_memnodes(3);
    let processes_arg = processes.to_string();
    let workload = [
        "--protocol",
        protocol,
        "--workload",
        "smallbank",
        "--accounts",
        "2000",
        "--mix",
        "transfer",
        "--memory-nodes",
        "3",
        "--replicas",
        "2",
        "--compute-nodes",
        &processes_arg,
    ];
    assert_ok(
        &run_bounded(workload_cmd(&[], &memnodes, &workload, &["--load-only"])),
        "--load-only",
    );
    let dir = std::env::temp_dir().join(format!(
        "dtxn-ucx-rejoin-{protocol}-{processes}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let tallies: Vec<_> = (0..processes)
        .map(|k| dir.join(format!("t{k}.json")))
        .collect();
    // A run long enough for the replacement to be probed (here at most every 200 ms per
    // thread) and copied to while transactions run.
    let benches: Vec<Watched> = (0..processes)
        .map(|k| {
            let k_arg = k.to_string();
            let mut extra = vec![
                "--compute-node",
                &k_arg,
                "--duration",
                "6s",
                "--leases",
                "flight=250ms,skew=0,rejoin=true,probe=200ms",
                "--progress-lines",
                "--tally-out",
                tallies[k as usize].to_str().unwrap(),
                "--json",
            ];
            // (--verify is one process's: with several, `dtxn verify` below.)
            if processes == 1 {
                extra.push("--verify");
            }
            Watched::spawn(workload_cmd(&[], &memnodes, &workload, &extra))
        })
        .collect();
    for (k, b) in benches.iter().enumerate() {
        assert!(
            b.wait_line(|l| l.starts_with("progress: ")).is_some(),
            "compute process {k} printed no progress"
        );
    }
    let addr = nodes[1].addr.to_string();
    kill(nodes[1].child.id(), Signal::KILL).unwrap();
    nodes[1].child.wait().unwrap();
    // A new, blank daemon at node 1's address.
    nodes[1] = Daemon::start(
        &[],
        &[
            "--listen",
            &addr,
            "--size",
            "4M",
            "--token",
            TOKEN,
            "--ucx-tls",
            "tcp",
            "--ucx-devices",
            "lo",
            "--spin-us",
            "0",
        ],
    );
    assert_eq!(nodes[1].addr.to_string(), addr);
    let (mut copied, mut joins, mut seen) = (0, 0, std::collections::BTreeSet::new());
    for (k, bench) in benches.into_iter().enumerate() {
        let (status, out, stderr) = bench.finish(&format!("compute process {k}"));
        assert!(status.success(), "{k}: {status}\n{out}\n{stderr:?}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        let l = &v["leases"];
        eprintln!("compute process {k}: leases: {l}");
        assert_eq!(l["final_view"], "view 3 (memory node 1 rejoined)", "{out}");
        // The views this process saw become active, in order: all three, or (another
        // process leading) a later one before this process found the earlier one active.
        let views: Vec<&str> = l["views"]
            .as_array()
            .expect("views")
            .iter()
            .map(|v| v["view"].as_str().unwrap())
            .collect();
        let all = [
            "view 1 (memory node 1 failed)",
            "view 2 (memory node 1 joining)",
            "view 3 (memory node 1 rejoined)",
        ];
        assert!(
            views.last() == Some(&all[2]) && views.iter().all(|v| all.contains(v)),
            "{out}"
        );
        assert!(views.windows(2).all(|w| w[0] < w[1]), "{out}");
        if processes == 1 {
            assert_eq!(views, all, "{out}");
        }
        seen.extend(views.iter().map(|v| v.to_string()));
        for j in l["joins"].as_array().expect("joins") {
            assert_eq!(j["nodes"], serde_json::json!([1]), "{out}");
            assert!(j["passes"].as_u64().unwrap() >= 1, "{out}");
            copied += j["slots"].as_u64().unwrap();
            joins += 1;
        }
        assert_eq!(l["flights_ok"], true, "{out}");
        assert!(v["all"]["committed"].as_u64().unwrap() > 0, "{out}");
        if processes == 1 {
            let checks: Vec<&str> = v["verify"]["checks"]
                .as_array()
                .expect("checks")
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            assert_eq!(v["verify"]["ok"], true, "{checks:?}");
            for check in [
                "every backup holds what its primary holds",
                "balances equals its initial value plus the committed changes",
            ] {
                assert!(
                    checks.iter().any(|c| c.contains(check)),
                    "{check}: {checks:?}"
                );
            }
        }
    }
    assert_eq!(seen.len(), 3, "the processes saw {seen:?} active");
    // Node 1 held replicas of 2000 accounts' rows at least, copied once: by one leader,
    // which keeps the leader word across its passes.
    assert_eq!(joins, 1, "joins reported");
    assert!(copied >= 2000, "{copied} slots copied");
    let out = assert_ok(
        &run_bounded(verify_cmd(&memnodes, &tallies)),
        "verify after the rejoin",
    );
    assert!(
        out.starts_with(&format!(
            "consistent: smallbank under {protocol} (seed 1), {processes} compute process(es)"
        )),
        "{out}"
    );
    for check in [
        "every one of 4000 balances equals its initial value plus the committed changes",
        "money is conserved",
        "every backup holds what its primary holds",
    ] {
        assert!(out.contains(check), "{check}: {out}");
    }
    drop(nodes);
    std::fs::remove_dir_all(&dir).unwrap();
}
