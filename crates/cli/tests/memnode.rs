//! `dtxn memnode` as a process: serves compute processes that present its token, refuses a
//! second daemon on its file, stops cleanly on SIGTERM. Loopback only.

use dtxn_fabric::ucx::{UcxConfig, UcxPool, AVAILABLE};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn memnode_serves_until_sigterm_and_owns_its_file() {
    if !AVAILABLE {
        eprintln!("skipped: this build has no ucx backend (install libucx-dev)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("dtxn-memnode-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("region");
    let path_s = path.to_str().unwrap();
    let args = [
        "memnode",
        "--listen",
        "127.0.0.1:0",
        "--size",
        "64K",
        "--path",
        path_s,
        "--token",
        "sesame",
        "--ucx-tls",
        "tcp",
        "--ucx-devices",
        "lo",
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_dtxn"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("dtxn memnode starts");
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = lines
        .recv_timeout(WAIT)
        .expect("memnode prints its address");
    let addr: SocketAddr = first
        .rsplit(" at ")
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {first:?}"));

    let pool = UcxPool::connect(&[addr], "sesame", UcxConfig::loopback_tcp()).unwrap();
    assert_eq!(pool.try_with_local(0, |m| m.faa(64, 5)).unwrap(), 0);
    assert_eq!(pool.try_with_local(0, |m| m.read_u64(64)).unwrap(), 5);
    let e = UcxPool::connect(&[addr], "open", UcxConfig::loopback_tcp()).unwrap_err();
    assert!(e.to_string().contains("refused the token"), "{e}");

    // A second daemon on the same file is refused at once.
    let (tx2, second) = mpsc::channel();
    let args2: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    std::thread::spawn(move || {
        let o = Command::new(env!("CARGO_BIN_EXE_dtxn"))
            .args(args2)
            .output()
            .expect("runs");
        let _ = tx2.send(o);
    });
    let o = second.recv_timeout(WAIT).expect("the second daemon exits");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("already served"), "{err}");

    // Disconnect before the daemon goes. Built without UCX, the pool is a stub with nothing to
    // close (and this test skips before it gets here).
    #[allow(clippy::drop_non_drop)]
    drop(pool);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let (tx3, exited) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx3.send(child.wait());
    });
    let status = exited
        .recv_timeout(WAIT)
        .expect("memnode stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let last = lines.recv_timeout(WAIT).expect("a last line");
    assert!(last.contains("stopped"), "{last}");
    // The region outlives the daemon.
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 65536);
    assert_eq!(u64::from_le_bytes(bytes[64..72].try_into().unwrap()), 5);
    std::fs::remove_dir_all(&dir).unwrap();
}
