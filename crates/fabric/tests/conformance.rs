//! The conformance suite: one set of tests that pins the fabric contract, run against every
//! backend. A backend that passes may carry any protocol of dtxn.

use dtxn_fabric::shm::{ShmConfig, ShmPool};
use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::ucx::{UcxConfig, UcxPool};
use dtxn_fabric::{Endpoint, FabricError, LocalMem, NodeId, OpKind, Pool, RpcHandler, Topology};
use rand::Rng;
use std::sync::Arc;

fn topo(threads: u32, coroutines: u32) -> Topology {
    Topology {
        compute_nodes: 1,
        threads,
        coroutines,
    }
}

/// Runs `f` against a fresh pool of each backend.
fn each_backend(nodes: usize, size: u64, mut f: impl FnMut(&str, &mut Pool)) {
    for seed in [1, 2, 3] {
        let mut pool = Pool::Sim(SimPool::new(SimConfig::new(seed, nodes, size)).unwrap());
        f(&format!("sim seed {seed}"), &mut pool);
    }
    let cfg = ShmConfig {
        node_sizes: vec![size; nodes],
        dir: None,
        delay_ns: 0,
    };
    let mut pool = Pool::Shm(ShmPool::create(cfg).unwrap());
    f("shm", &mut pool);
    // Memory nodes served by threads of this process, reached over UCX's TCP transport on
    // the loopback interface, as another host's would be.
    if dtxn_fabric::ucx::AVAILABLE {
        let pool = UcxPool::spawn_local(&vec![size; nodes], UcxConfig::loopback_tcp());
        let mut pool = Pool::Ucx(pool.expect("ucx memory nodes on 127.0.0.1 over tcp"));
        f("ucx/tcp", &mut pool);
    }
}

fn read_word(pool: &Pool, node: NodeId, addr: u64) -> u64 {
    pool.with_local(node, |m| m.read_u64(addr))
}

#[test]
fn cas_counter_reaches_exactly_n() {
    each_backend(2, 4096, |name, pool| {
        let per = 200u64;
        let t = topo(2, 3);
        let r = pool
            .run(t, None, |mut ep: Endpoint| async move {
                for _ in 0..per {
                    let mut seen = 0;
                    loop {
                        let c = ep.cas(1, 64, seen, seen + 1);
                        ep.post().await.unwrap();
                        if ep.cas_ok(c) {
                            break;
                        }
                        seen = ep.old(c);
                    }
                }
            })
            .unwrap();
        assert_eq!(r.outputs.iter().flatten().count(), 6, "{name}");
        assert_eq!(read_word(pool, 1, 64), per * 6, "{name}");
    });
}

#[test]
fn faa_counter_reaches_exactly_n_and_returns_distinct_old_values() {
    each_backend(1, 4096, |name, pool| {
        let per = 300u64;
        let r = pool
            .run(topo(2, 2), None, |mut ep: Endpoint| async move {
                let mut olds = Vec::new();
                for _ in 0..per {
                    let f = ep.faa(0, 8, 1);
                    ep.post().await.unwrap();
                    olds.push(ep.old(f));
                }
                olds
            })
            .unwrap();
        assert_eq!(read_word(pool, 0, 8), per * 4, "{name}");
        let mut all: Vec<u64> = r.outputs.into_iter().flatten().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..per * 4).collect::<Vec<_>>(), "{name}");
    });
}

#[test]
fn lock_then_read_in_one_batch_sees_its_own_lock() {
    each_backend(1, 4096, |name, pool| {
        let r = pool
            .run(topo(2, 3), None, |mut ep: Endpoint| async move {
                let me = 1 + u64::from(ep.id().index);
                let (mut acquired, mut wrong) = (0u32, 0u32);
                while acquired < 50 {
                    // G6: the CAS executes before the READ posted after it on the same QP.
                    let c = ep.cas(0, 128, 0, me);
                    let rd = ep.read(0, 128, 64);
                    ep.post().await.unwrap();
                    if !ep.cas_ok(c) {
                        continue;
                    }
                    acquired += 1;
                    if ep.word(rd, 0) != me {
                        wrong += 1;
                    }
                    // Mutual exclusion check: a plain counter under the lock.
                    let w = ep.read(0, 136, 8);
                    ep.post().await.unwrap();
                    let n = ep.word(w, 0);
                    ep.write(0, 192, &n.to_le_bytes());
                    ep.write(0, 136, &(n + 1).to_le_bytes());
                    ep.post().await.unwrap();
                    ep.write(0, 128, &0u64.to_le_bytes()); // write-unlatch: CAS-only word
                    ep.post().await.unwrap();
                }
                wrong
            })
            .unwrap();
        let wrong: u32 = r.outputs.iter().flatten().sum();
        assert_eq!(
            wrong, 0,
            "{name}: a lock+read batch did not see its own lock"
        );
        assert_eq!(
            read_word(pool, 0, 136),
            6 * 50,
            "{name}: mutual exclusion broken"
        );
    });
}

/// Writers write 4-line records whose every word is the write's value; readers check that no
/// line they read mixes two writes (lines may mix; a line may not).
#[test]
fn no_read_returns_a_torn_line() {
    each_backend(1, 1 << 16, |name, pool| {
        let r = pool
            .run(topo(2, 2), None, |mut ep: Endpoint| async move {
                let writer = ep.id().coroutine == 0;
                let mut torn_lines = 0u32;
                let mut lines_mixed = 0u32;
                for i in 0..400u64 {
                    let rec = ep.rng().random_range(0..4u64) * 256;
                    if writer {
                        let v = (u64::from(ep.id().index) << 32) | i;
                        ep.write_with(0, rec, 256, |b| {
                            for w in b.chunks_mut(8) {
                                w.copy_from_slice(&v.to_le_bytes());
                            }
                        });
                    } else {
                        let rd = ep.read(0, rec, 256);
                        ep.post().await.unwrap();
                        let b = ep.bytes(rd);
                        let mut firsts = Vec::new();
                        for line in b.chunks(64) {
                            let w0 = &line[..8];
                            if line.chunks(8).any(|w| w != w0) {
                                torn_lines += 1;
                            }
                            firsts.push(w0.to_vec());
                        }
                        if firsts.iter().any(|f| *f != firsts[0]) {
                            lines_mixed += 1;
                        }
                        continue;
                    }
                    ep.post().await.unwrap();
                }
                (torn_lines, lines_mixed)
            })
            .unwrap();
        let torn: u32 = r.outputs.iter().flatten().map(|o| o.0).sum();
        assert_eq!(torn, 0, "{name}: a READ returned a torn line");
    });
}

/// G4: WRITEs on one QP apply in post order. A writer bumps X then Y (same batch, and batch
/// after batch without waiting for each other's visibility); a reader that sees Y = v and then
/// reads X must see X >= v.
#[test]
fn writes_on_one_qp_apply_in_post_order() {
    each_backend(1, 4096, |name, pool| {
        let r = pool
            .run(topo(2, 1), None, |mut ep: Endpoint| async move {
                let mut violations = 0;
                for v in 1..=300u64 {
                    if ep.id().thread == 0 {
                        ep.write(0, 0, &v.to_le_bytes()); // X
                        ep.write(0, 512, &v.to_le_bytes()); // Y, another line
                        ep.post().await.unwrap();
                    } else {
                        let y = ep.read(0, 512, 8);
                        ep.post().await.unwrap();
                        let yv = ep.word(y, 0);
                        // Only after Y's completion (G5: READs are not ordered).
                        let x = ep.read(0, 0, 8);
                        ep.post().await.unwrap();
                        if ep.word(x, 0) < yv {
                            violations += 1;
                        }
                    }
                }
                violations
            })
            .unwrap();
        assert_eq!(r.outputs.iter().flatten().sum::<u32>(), 0, "{name}");
    });
}

#[test]
fn a_batch_is_one_round_trip_and_counts_are_exact() {
    each_backend(2, 4096, |name, pool| {
        let r = pool
            .run(topo(1, 1), None, |mut ep: Endpoint| async move {
                ep.read(0, 0, 100);
                ep.write(1, 64, &[7u8; 40]);
                ep.cas(0, 8, 0, 1);
                ep.faa(1, 0, 5);
                ep.post().await.unwrap();
                let one = ep.stats();
                ep.write(0, 256, &[1u8; 8]);
                ep.post_detached().unwrap();
                // An empty batch costs nothing.
                ep.post().await.unwrap();
                (one, ep.stats())
            })
            .unwrap();
        let (one, two) = r.outputs[0].unwrap();
        assert_eq!(one.round_trips, 1, "{name}");
        assert_eq!(one.verbs_total(), 4, "{name}");
        assert_eq!(one.verb(OpKind::Read), 1, "{name}");
        assert_eq!(one.verb(OpKind::Faa), 1, "{name}");
        assert_eq!(one.bytes_in, 100 + 8 + 8, "{name}");
        assert_eq!(one.bytes_out, 40 + 16 + 8, "{name}");
        assert_eq!(
            two.round_trips, 1,
            "{name}: detached batches are off the critical path"
        );
        assert_eq!(two.batches, 2, "{name}");
        assert_eq!(two.verb(OpKind::Write), 2, "{name}");
        assert_eq!(r.total_stats(), two, "{name}");
    });
}

#[test]
fn bad_ops_are_errors_not_panics() {
    each_backend(2, 4096, |name, pool| {
        let r = pool
            .run(topo(1, 1), None, |mut ep: Endpoint| async move {
                let mut errs = Vec::new();
                ep.read(0, 4090, 16);
                errs.push(ep.post().await.unwrap_err());
                ep.cas(1, 12, 0, 1);
                errs.push(ep.post().await.unwrap_err());
                ep.write(5, 0, &[0]);
                errs.push(ep.post().await.unwrap_err());
                ep.rpc(0, b"hi");
                errs.push(ep.post().await.unwrap_err());
                // The endpoint still works afterwards.
                let f = ep.faa(0, 0, 1);
                ep.post().await.unwrap();
                (errs, ep.old(f))
            })
            .unwrap();
        let (errs, old) = r.outputs[0].clone().unwrap();
        assert!(
            matches!(errs[0], FabricError::OutOfBounds { node: 0, .. }),
            "{name}"
        );
        assert!(
            matches!(errs[1], FabricError::Misaligned { node: 1, addr: 12 }),
            "{name}"
        );
        assert!(
            matches!(errs[2], FabricError::NoSuchNode { node: 5, nodes: 2 }),
            "{name}"
        );
        assert_eq!(errs[3], FabricError::NoRpcHandler(0), "{name}");
        assert_eq!(old, 0, "{name}");
    });
}

struct Counter;

impl RpcHandler for Counter {
    fn handle(&self, node: NodeId, mem: &mut dyn LocalMem, req: &[u8], resp: &mut Vec<u8>) {
        let add = u64::from(req[0]);
        let old = mem.faa(0, add);
        resp.extend_from_slice(&old.to_le_bytes());
        resp.push(node as u8);
    }
}

#[test]
fn rpc_is_served_by_the_memory_node_handler() {
    each_backend(2, 4096, |name, pool| {
        pool.set_rpc_handler(Arc::new(Counter));
        let r = pool
            .run(topo(2, 2), None, |mut ep: Endpoint| async move {
                let mut olds = Vec::new();
                for _ in 0..50 {
                    let a = ep.rpc(1, &[2]);
                    let b = ep.read(0, 0, 8);
                    ep.post().await.unwrap();
                    assert_eq!(ep.bytes(a).len(), 9);
                    assert_eq!(ep.bytes(a)[8], 1);
                    assert_eq!(ep.bytes(b).len(), 8);
                    olds.push(u64::from_le_bytes(ep.bytes(a)[..8].try_into().unwrap()));
                }
                olds
            })
            .unwrap();
        assert_eq!(read_word(pool, 1, 0), 4 * 50 * 2, "{name}");
        let mut all: Vec<u64> = r.outputs.into_iter().flatten().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..200).map(|i| i * 2).collect::<Vec<_>>(), "{name}");
    });
}

#[test]
fn a_background_batch_completes_before_its_wait_resolves() {
    each_backend(2, 4096, |name, pool| {
        let r = pool
            .run(topo(1, 2), None, |mut ep: Endpoint| async move {
                let me = u64::from(ep.id().index) * 512;
                let mut bad = 0;
                for v in 1..=50u64 {
                    ep.write(0, me, &v.to_le_bytes());
                    ep.write(1, me, &v.to_le_bytes());
                    ep.post_background().unwrap();
                    assert!(
                        ep.post_background().is_ok(),
                        "an empty batch is no second batch"
                    );
                    ep.faa(0, 2048, 1);
                    ep.post().await.unwrap();
                    ep.wait_background().await.unwrap();
                    // Completion means executed: both WRITEs are visible now.
                    let a = ep.read(0, me, 8);
                    let b = ep.read(1, me, 8);
                    ep.post().await.unwrap();
                    if ep.word(a, 0) != v || ep.word(b, 0) != v {
                        bad += 1;
                    }
                }
                ep.write(0, me, &[0; 8]);
                ep.post_background().unwrap();
                ep.write(0, me, &[0; 8]);
                let second = ep.post_background().is_err();
                ep.wait_background().await.unwrap();
                (bad, second, ep.stats())
            })
            .unwrap();
        for (bad, second, stats) in r.outputs.into_iter().flatten() {
            assert_eq!(bad, 0, "{name}");
            assert!(
                second,
                "{name}: two background batches at once must be refused"
            );
            assert_eq!(
                stats.round_trips, 100,
                "{name}: background batches cost no round trip"
            );
            assert_eq!(stats.batches, 151, "{name}");
        }
    });
}

#[test]
fn an_op_too_large_for_one_verb_is_refused_not_truncated() {
    each_backend(1, 4096, |name, pool| {
        let r = pool
            .run(topo(1, 1), None, |mut ep: Endpoint| async move {
                ep.read(0, 0, 8);
                ep.read(0, 0, 1 << 32);
                let e = ep.post().await.unwrap_err();
                let f = ep.faa(0, 0, 1);
                ep.post().await.unwrap();
                (e, ep.old(f), ep.stats().verbs_total())
            })
            .unwrap();
        let (e, old, verbs) = r.outputs[0].clone().unwrap();
        assert_eq!(e, FabricError::TooLarge(1 << 32), "{name}");
        assert_eq!(
            (old, verbs),
            (0, 1),
            "{name}: nothing of the refused batch ran"
        );
    });
}

#[test]
fn verb_execution_is_timed_only_when_asked() {
    let cfg = ShmConfig {
        node_sizes: vec![1 << 16; 2],
        dir: None,
        delay_ns: 0,
    };
    let pool = ShmPool::create(cfg).unwrap();
    let r = pool
        .run(topo(1, 1), None, |mut ep: Endpoint| async move {
            let batches = |ep: &mut Endpoint| {
                for i in 0..100u64 {
                    ep.read(0, i * 64, 512);
                    ep.write(1, i * 64, &[1u8; 256]);
                }
            };
            batches(&mut ep);
            ep.post().await.unwrap();
            let untimed = ep.stats();
            ep.time_fabric(true);
            for _ in 0..10 {
                batches(&mut ep);
                ep.post().await.unwrap();
                batches(&mut ep);
                ep.post_detached().unwrap();
            }
            (untimed, ep.stats())
        })
        .unwrap();
    let (untimed, timed) = r.outputs[0].unwrap();
    assert_eq!(untimed.fabric_ns, 0, "off by default");
    assert!(timed.fabric_ns > 0, "20 batches of 200 verbs took no time");
    assert_eq!(timed.batches, 21, "timing changes no count");
}
