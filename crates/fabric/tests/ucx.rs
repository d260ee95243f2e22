//! The ucx backend beyond the conformance suite: bootstrap, refusals, remote `with_local`,
//! large verbs cut into line-aligned pieces, failures. Memory nodes run as threads of this
//! process; every byte goes over 127.0.0.1 (or no network at all).

#![cfg(test)]

use dtxn_fabric::ucx::{MemNode, MemNodeConfig, UcxConfig, UcxPool, AVAILABLE};
use dtxn_fabric::{CoordId, Endpoint, FabricError, Pool, Topology};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn node(size: u64, token: &str) -> MemNode {
    MemNode::start(
        MemNodeConfig {
            size,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: token.into(),
            file: None,
            ucx: UcxConfig::loopback_tcp(),
            spin: MemNodeConfig::DEFAULT_SPIN,
        },
        0,
    )
    .expect("memory node")
}

fn topo(threads: u32, coroutines: u32) -> Topology {
    Topology {
        compute_nodes: 1,
        threads,
        coroutines,
    }
}

/// Drives a future on this thread; ucx ports progress their worker when polled. Fails loudly
/// instead of hanging.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "a ucx op did not complete in 30 s"
        );
    }
}

const ID: CoordId = CoordId {
    compute_node: 0,
    thread: 0,
    coroutine: 0,
    index: 0,
};

#[test]
// AVAILABLE is a build-time constant; what is asserted is the build matching this machine.
#[allow(clippy::assertions_on_constants)]
fn available_where_pkg_config_finds_ucx() {
    let found = std::process::Command::new("pkg-config")
        .args(["--exists", "ucx"])
        .status()
        .is_ok_and(|s| s.success());
    if found && cfg!(feature = "ucx") && std::env::var_os("DTXN_NO_UCX").is_none() {
        assert!(
            AVAILABLE,
            "UCX is installed but the ucx backend was not built"
        );
    }
    if !AVAILABLE {
        let e = UcxPool::spawn_local(&[4096], UcxConfig::loopback_tcp()).unwrap_err();
        assert!(e.to_string().contains("no ucx backend"), "{e}");
    }
}

#[test]
fn no_token_no_rkey() {
    if !AVAILABLE {
        return;
    }
    let n = node(4096, "right");
    let e = UcxPool::connect(&[n.addr()], "wrong", UcxConfig::loopback_tcp()).unwrap_err();
    assert!(e.to_string().contains("refused the token"), "{e}");
    let e = UcxPool::connect(&[n.addr()], "", UcxConfig::loopback_tcp()).unwrap_err();
    assert!(e.to_string().contains("refused the token"), "{e}");
    assert!(UcxPool::connect(&[n.addr()], "right", UcxConfig::loopback_tcp()).is_ok());
}

#[test]
fn memory_nodes_refuse_bad_setups() {
    if !AVAILABLE {
        return;
    }
    let cfg = |size, token: &str| MemNodeConfig {
        size,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: token.into(),
        file: None,
        ucx: UcxConfig::loopback_tcp(),
        spin: MemNodeConfig::DEFAULT_SPIN,
    };
    assert!(MemNode::start(cfg(100, "t"), 0).is_err());
    assert!(MemNode::start(cfg(4096, ""), 0).is_err());
}

/// With UCX's shared-memory transport and UCX-allocated memory, the client maps the region
/// and READ is a plain memcpy: refused unless allowed.
#[test]
fn directly_mapped_regions_are_refused_unless_allowed() {
    if !AVAILABLE {
        return;
    }
    let shm = UcxConfig {
        // The first endpoint attempt (with peer failure detection) is refused by posix: quiet.
        settings: vec![
            ("TLS".into(), "posix".into()),
            ("LOG_LEVEL".into(), "fatal".into()),
        ],
        allow_direct: false,
        allow_down: false,
    };
    let n = MemNode::start(
        MemNodeConfig {
            size: 4096,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: "t".into(),
            file: None,
            ucx: shm.clone(),
            spin: MemNodeConfig::DEFAULT_SPIN,
        },
        0,
    )
    .expect("memory node on posix");
    let e = UcxPool::connect(&[n.addr()], "t", shm.clone()).unwrap_err();
    assert!(e.to_string().contains("not atomic per"), "{e}");
    let allowed = UcxConfig {
        allow_direct: true,
        ..shm
    };
    let pool = UcxPool::connect(&[n.addr()], "t", allowed).expect("allowed knowingly");
    let mut ep = pool.endpoint(ID).unwrap();
    let f = ep.faa(0, 8, 5);
    block_on(ep.post()).unwrap();
    assert_eq!(ep.old(f), 0);
    assert_eq!(n.with_local(|m| m.read_u64(8)), 5);
}

/// A compute process that does not serve the node reaches it with blocking verbs.
#[test]
fn with_local_from_a_compute_process() {
    if !AVAILABLE {
        return;
    }
    let n = node(1 << 16, "tok");
    let pool = Pool::Ucx(UcxPool::connect(&[n.addr()], "tok", UcxConfig::loopback_tcp()).unwrap());
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let (old_cas, old_faa, back) = pool
        .try_with_local(0, |m| {
            m.write(100, &big);
            m.write_u64(16_384, 7);
            let c = m.cas(16_384, 7, 9);
            let f = m.faa(16_384, 1);
            let mut back = vec![0u8; big.len()];
            m.read(100, &mut back);
            (c, f, back)
        })
        .unwrap();
    assert_eq!((old_cas, old_faa), (7, 9));
    assert_eq!(back, big);
    // The node's own CPU sees the same bytes.
    let mut here = vec![0u8; big.len()];
    n.with_local(|m| m.read(100, &mut here));
    assert_eq!(here, big);
    assert_eq!(n.with_local(|m| m.read_u64(16_384)), 10);
    // Bad accesses are errors, not panics, and later calls work again.
    let e = pool
        .try_with_local(0, |m| m.read_u64((1 << 16) - 4))
        .unwrap_err();
    assert!(matches!(e, FabricError::OutOfBounds { node: 0, .. }), "{e}");
    let e = pool.try_with_local(0, |m| m.faa(3, 1)).unwrap_err();
    assert!(
        matches!(e, FabricError::Misaligned { node: 0, addr: 3 }),
        "{e}"
    );
    assert!(matches!(
        pool.try_with_local(1, |m| m.size()),
        Err(FabricError::NoSuchNode { node: 1, nodes: 1 })
    ));
    assert_eq!(pool.try_with_local(0, |m| m.read_u64(16_384)).unwrap(), 10);
}

/// Records of 12 KiB (three UCX pieces each) written whole by writers: no READ sees a line
/// mixing two writes.
#[test]
fn large_verbs_keep_lines_whole() {
    if !AVAILABLE {
        return;
    }
    const REC: usize = 12 * 1024 + 64 * 3;
    let pool = Pool::Ucx(UcxPool::spawn_local(&[1 << 17], UcxConfig::loopback_tcp()).unwrap());
    let r = pool_run(&pool, topo(2, 2), |mut ep: Endpoint| async move {
        let writer = ep.id().coroutine == 0;
        let mut torn = 0u32;
        for i in 0..60u64 {
            // Records start mid-line so that the pieces do not start on CHUNK boundaries.
            let at = 32 + (i % 3) * REC as u64;
            if writer {
                let v = (u64::from(ep.id().index) << 32) | i;
                ep.write_with(0, at, REC, |b| {
                    for w in b.chunks_mut(8) {
                        w.copy_from_slice(&v.to_le_bytes());
                    }
                });
                ep.post().await.unwrap();
            } else {
                let rd = ep.read(0, at, REC);
                ep.post().await.unwrap();
                let b = ep.bytes(rd);
                // Whole lines only: the first and last partial lines hold 32 bytes each.
                for line in b[32..REC - 32].chunks(64) {
                    if line.chunks(8).any(|w| w != &line[..8]) {
                        torn += 1;
                    }
                }
            }
        }
        torn
    });
    assert_eq!(r.iter().sum::<u32>(), 0, "a READ returned a torn line");
}

fn pool_run<F, Fut, R>(pool: &Pool, t: Topology, f: F) -> Vec<R>
where
    F: Fn(Endpoint) -> Fut + Sync,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    let Pool::Ucx(p) = pool else { unreachable!() };
    p.run(t, None, f)
        .unwrap()
        .outputs
        .into_iter()
        .map(|o| o.expect("every coordinator finishes"))
        .collect()
}

/// Detached batches land, and a run stopped mid-flight drops its coordinators cleanly.
#[test]
fn detached_batches_and_stopped_runs() {
    if !AVAILABLE {
        return;
    }
    let pool = UcxPool::spawn_local(&[4096], UcxConfig::loopback_tcp()).unwrap();
    pool.run(topo(1, 2), None, |mut ep: Endpoint| async move {
        for _ in 0..100 {
            ep.faa(0, 0, 1);
            ep.post_detached().unwrap();
        }
        // A later awaited FAA on the same QP, then everything is flushed at the end of the run.
        ep.faa(0, 0, 1);
        ep.post().await.unwrap();
    })
    .unwrap();
    assert_eq!(pool.try_with_local(0, |m| m.read_u64(0)).unwrap(), 202);
    let r = pool
        .run(
            topo(2, 2),
            Some(50_000_000),
            |mut ep: Endpoint| async move {
                loop {
                    ep.faa(0, 8, 1);
                    ep.read(0, 64, 128);
                    ep.post().await.unwrap();
                }
            },
        )
        .unwrap();
    assert!(r.outputs.iter().all(Option::is_none));
    let n = pool.try_with_local(0, |m| m.read_u64(8)).unwrap();
    let posted = r.total_stats().verbs[dtxn_fabric::OpKind::Faa as usize];
    // Every awaited FAA executed; the ones in flight at the stop may or may not have.
    assert!(n > 0 && n <= posted && posted - n <= 4, "{n} of {posted}");
}

/// A memory node that goes away makes verbs fail with NodeDown, not hang.
#[test]
fn a_vanished_memory_node_is_an_error() {
    if !AVAILABLE {
        return;
    }
    let n = node(4096, "t");
    let pool = UcxPool::connect(&[n.addr()], "t", UcxConfig::loopback_tcp()).unwrap();
    let mut ep = pool.endpoint(ID).unwrap();
    let f = ep.faa(0, 0, 1);
    block_on(ep.post()).unwrap();
    assert_eq!(ep.old(f), 0);
    n.shutdown();
    ep.read(0, 0, 64);
    let e = block_on(ep.post()).unwrap_err();
    assert_eq!(e, FabricError::NodeDown(0));
}

/// A file-backed region keeps its bytes across memory nodes, and one file has one node.
#[test]
fn file_regions_persist_and_are_served_once() {
    if !AVAILABLE {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dtxn-ucx-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("region");
    let cfg = MemNodeConfig {
        size: 1 << 16,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: "t".into(),
        file: Some(path.clone()),
        ucx: UcxConfig::loopback_tcp(),
        spin: MemNodeConfig::DEFAULT_SPIN,
    };
    let n = MemNode::start(cfg.clone(), 0).unwrap();
    let e = MemNode::start(cfg.clone(), 0).unwrap_err();
    assert!(e.to_string().contains("already served"), "{e}");
    {
        // Disconnects at the end of the block, before the node stops.
        let pool = UcxPool::connect(&[n.addr()], "t", UcxConfig::loopback_tcp()).unwrap();
        pool.try_with_local(0, |m| m.write_u64(4096, 0xfeed))
            .unwrap();
    }
    n.shutdown();
    let n = MemNode::start(cfg, 0).unwrap();
    assert_eq!(n.with_local(|m| m.read_u64(4096)), 0xfeed);
    n.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A FLUSH to a file-backed memory node writes back the pages the QP wrote there since its
/// last FLUSH (the node's `msync`, asked for after the PUTs landed), and only then completes;
/// an RPC's stores are written back before its answer; a node UCX allocated has no file and
/// is asked nothing.
#[test]
fn a_flush_to_a_file_backed_node_writes_its_pages_back() {
    if !AVAILABLE {
        return;
    }
    struct Store;
    impl dtxn_fabric::RpcHandler for Store {
        fn handle(
            &self,
            _node: dtxn_fabric::NodeId,
            _now_ns: u64,
            mem: &mut dyn dtxn_fabric::LocalMem,
            req: &[u8],
            _resp: &mut Vec<u8>,
        ) {
            mem.write(8 * 4096, req);
        }
    }
    let dir = std::env::temp_dir().join(format!("dtxn-ucx-persist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let filed = MemNode::start(
        MemNodeConfig {
            size: 1 << 16,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: "t".into(),
            file: Some(dir.join("region")),
            ucx: UcxConfig::loopback_tcp(),
            spin: MemNodeConfig::DEFAULT_SPIN,
        },
        0,
    )
    .unwrap();
    filed.set_rpc_handler(std::sync::Arc::new(Store));
    let anon = node(1 << 16, "t");
    let pool =
        UcxPool::connect(&[filed.addr(), anon.addr()], "t", UcxConfig::loopback_tcp()).unwrap();
    let mut ep = pool.endpoint(ID).unwrap();
    ep.write(0, 100, &[1; 64]);
    ep.write(0, 3 * 4096 - 32, &[2; 64]);
    ep.write(1, 0, &[3; 64]);
    block_on(ep.post()).unwrap();
    assert_eq!(filed.persisted_bytes(), 0, "no FLUSH yet");
    ep.flush(0);
    ep.flush(1);
    block_on(ep.post()).unwrap();
    assert_eq!(filed.persisted_bytes(), 3 * 4096, "pages 0, 2 and 3");
    assert_eq!(anon.persisted_bytes(), 0, "no file");
    ep.flush(0);
    block_on(ep.post()).unwrap();
    assert_eq!(filed.persisted_bytes(), 3 * 4096, "nothing new");
    ep.rpc(0, &[7; 16]);
    block_on(ep.post()).unwrap();
    assert_eq!(filed.persisted_bytes(), 4 * 4096, "the handler's store");
    drop((ep, pool));
    filed.shutdown();
    anon.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}
