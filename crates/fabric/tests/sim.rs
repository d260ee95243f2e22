//! The simulator's own promises: determinism, the adversary's freedoms actually exercised, faults.

use dtxn_fabric::sim::{Adversary, ComputeCrash, MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, FabricError, Profile, RunReport, Topology};
use rand::Rng;

fn topo(compute_nodes: u32, threads: u32, coroutines: u32) -> Topology {
    Topology {
        compute_nodes,
        threads,
        coroutines,
    }
}

/// A busy mixed workload: multi-line READs and WRITEs, CAS and FAA on shared words.
async fn mixed(mut ep: Endpoint, ops: u32) -> u64 {
    let mut sum = 0u64;
    for i in 0..ops {
        let node = ep.rng().random_range(0..2u16);
        let rec = ep.rng().random_range(0..32u64) * 256;
        match i % 4 {
            0 => {
                let r = ep.read(node, rec, 256);
                ep.post().await.unwrap();
                sum = sum.wrapping_add(ep.word(r, 64));
            }
            1 => {
                let v = u64::from(ep.id().index) << 20 | u64::from(i);
                ep.write_with(node, rec, 256, |b| {
                    for w in b.chunks_mut(8) {
                        w.copy_from_slice(&v.to_le_bytes());
                    }
                });
                ep.post().await.unwrap();
            }
            2 => {
                let c = ep.cas(node, 8192 + rec / 32, 0, 1);
                let r = ep.read(node, rec, 128);
                ep.post().await.unwrap();
                sum = sum.wrapping_add(ep.old(c) ^ ep.word(r, 0));
            }
            _ => {
                let f = ep.faa(node, 8192, 1);
                ep.post().await.unwrap();
                sum = sum.wrapping_add(ep.old(f));
            }
        }
    }
    sum
}

fn run_mixed(cfg: SimConfig) -> RunReport<u64> {
    let mut pool = SimPool::new(cfg).unwrap();
    pool.run(topo(2, 2, 4), None, |ep| mixed(ep, 200)).unwrap()
}

#[test]
fn same_seed_same_run_bit_for_bit() {
    let mut cfg = SimConfig::new(42, 2, 1 << 16);
    cfg.keep_trace = true;
    let a = run_mixed(cfg.clone());
    let b = run_mixed(cfg.clone());
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.elapsed_ns, b.elapsed_ns);
    assert_eq!(a.outputs, b.outputs);
    // The full traces agree too, not just their hashes.
    let trace = |cfg: SimConfig| {
        let mut p = SimPool::new(cfg).unwrap();
        p.run(topo(2, 2, 4), None, |ep| mixed(ep, 50)).unwrap();
        p.trace()
    };
    let (ta, tb) = (trace(cfg.clone()), trace(cfg.clone()));
    assert!(ta.len() > 1000);
    assert_eq!(ta, tb);
    cfg.seed = 43;
    let c = run_mixed(cfg);
    assert_ne!(
        a.trace_hash, c.trace_hash,
        "different seeds, different runs"
    );
}

/// G2: a multi-line READ concurrent with WRITEs comes back torn across lines, under the
/// adversary only.
#[test]
fn the_adversary_tears_multi_line_reads() {
    let count_torn = |adv: Adversary| {
        let mut cfg = SimConfig::new(7, 1, 4096);
        cfg.adversary = adv;
        let mut pool = SimPool::new(cfg).unwrap();
        let r = pool
            .run(topo(1, 3, 1), None, |mut ep: Endpoint| async move {
                let mut torn = 0;
                for i in 1..=500u64 {
                    if ep.id().thread == 0 {
                        ep.write_with(0, 0, 512, |b| {
                            for w in b.chunks_mut(8) {
                                w.copy_from_slice(&i.to_le_bytes());
                            }
                        });
                        ep.post().await.unwrap();
                    } else {
                        let r = ep.read(0, 0, 512);
                        ep.post().await.unwrap();
                        let b = ep.bytes(r);
                        if b.chunks(64).any(|l| l[..8] != b[..8]) {
                            torn += 1;
                        }
                    }
                }
                torn
            })
            .unwrap();
        r.outputs.iter().flatten().sum::<u32>()
    };
    assert!(count_torn(Adversary::hostile()) > 0);
    assert_eq!(count_torn(Adversary::off()), 0);
}

/// G5: two READs in one batch on one QP may execute in either order. The writer bumps X, then
/// Y (ordered, G4); a reader that reads Y then X in one batch can see the new Y with the old X
/// only if its READs were reordered.
#[test]
fn the_adversary_reorders_reads_on_one_qp() {
    let reordered = |adv: Adversary| {
        let mut cfg = SimConfig::new(3, 1, 4096);
        cfg.adversary = adv;
        cfg.profile = Profile::ideal();
        let mut pool = SimPool::new(cfg).unwrap();
        let r = pool
            .run(topo(1, 2, 1), None, |mut ep: Endpoint| async move {
                let mut seen = 0;
                for v in 1..=2000u64 {
                    if ep.id().thread == 0 {
                        ep.write(0, 0, &v.to_le_bytes());
                        ep.write(0, 1024, &v.to_le_bytes());
                        ep.post().await.unwrap();
                    } else {
                        let y = ep.read(0, 1024, 8);
                        let x = ep.read(0, 0, 8);
                        ep.post().await.unwrap();
                        if ep.word(x, 0) < ep.word(y, 0) {
                            seen += 1;
                        }
                    }
                }
                seen
            })
            .unwrap();
        r.outputs.iter().flatten().sum::<u32>()
    };
    assert!(reordered(Adversary::hostile()) > 0);
    assert_eq!(reordered(Adversary::off()), 0);
}

/// G8 (PF-4): a WRITE that lands while an FAA holds the word is lost, if the knob is on.
#[test]
fn a_write_under_a_concurrent_faa_can_be_lost() {
    let lost_in = |lose: bool| {
        let mut lost = 0;
        for seed in 0..40 {
            let mut cfg = SimConfig::new(seed, 1, 4096);
            cfg.adversary.lose_write_under_faa = lose;
            let mut pool = SimPool::new(cfg).unwrap();
            pool.run(topo(1, 2, 1), None, |mut ep: Endpoint| async move {
                if ep.id().thread == 0 {
                    for _ in 0..40 {
                        ep.faa(0, 0, 1);
                        ep.post().await.unwrap();
                    }
                } else {
                    let wait = ep.rng().random_range(0..40_000);
                    ep.sleep(wait).await;
                    ep.write(0, 0, &(1u64 << 40).to_le_bytes());
                    ep.post().await.unwrap();
                }
            })
            .unwrap();
            if pool.with_local(0, |m| m.read_u64(0)) < 1 << 40 {
                lost += 1;
            }
        }
        lost
    };
    assert!(lost_in(true) > 0);
    assert_eq!(lost_in(false), 0);
}

/// Persistent-memory mode: a memory-node crash keeps flushed WRITEs and drops unflushed lines
/// at random.
#[test]
fn a_memory_crash_drops_only_unflushed_lines() {
    let survivors = |flush: bool| {
        let mut kept = 0;
        for seed in 0..8 {
            let mut cfg = SimConfig::new(seed, 1, 1 << 16);
            cfg.persistent = true;
            cfg.faults.memory_crashes.push(MemoryCrash {
                at_ns: 1_000_000,
                node: 0,
                down_ns: 1000,
            });
            let mut pool = SimPool::new(cfg).unwrap();
            pool.run(topo(1, 1, 1), None, |mut ep: Endpoint| async move {
                for l in 0..64u64 {
                    ep.write(0, l * 64, &[0xab; 64]);
                }
                if flush {
                    ep.flush(0);
                }
                ep.post().await.unwrap();
                ep.sleep(2_000_000).await;
            })
            .unwrap();
            kept += (0..64)
                .filter(|l| pool.with_local(0, |m| m.read_u64(l * 64)) == 0xabab_abab_abab_abab)
                .count();
        }
        kept
    };
    assert_eq!(survivors(true), 8 * 64);
    let unflushed = survivors(false);
    assert!(unflushed > 0 && unflushed < 8 * 64, "{unflushed}");
}

/// A FLUSH persists its own QP's WRITEs only (the contract's promise, no more): another
/// thread's FLUSH to the same node leaves this thread's lines volatile, and a power loss after
/// the run drops some of them.
#[test]
fn a_flush_persists_its_own_qps_writes_not_another_threads() {
    let survivors = |owner_flushes: bool| {
        let mut kept = 0;
        for seed in 0..8 {
            let mut cfg = SimConfig::new(seed, 1, 1 << 16);
            cfg.persistent = true;
            let mut pool = SimPool::new(cfg).unwrap();
            // Two threads: thread 0 writes 64 lines; thread 1 writes one line of its own and
            // flushes after thread 0 is done.
            pool.run(topo(1, 2, 1), None, move |mut ep: Endpoint| async move {
                if ep.id().thread == 0 {
                    for l in 0..64u64 {
                        ep.write(0, l * 64, &[0xab; 64]);
                    }
                    if owner_flushes {
                        ep.flush(0);
                    }
                    ep.post().await.unwrap();
                } else {
                    ep.sleep(1_000_000).await;
                    ep.write(0, 64 * 100, &[0xcd; 64]);
                    ep.flush(0);
                    ep.post().await.unwrap();
                }
            })
            .unwrap();
            pool.power_loss();
            assert_eq!(
                pool.with_local(0, |m| m.read_u64(64 * 100)),
                0xcdcd_cdcd_cdcd_cdcd,
                "the flushing thread's own line is durable"
            );
            kept += (0..64)
                .filter(|l| pool.with_local(0, |m| m.read_u64(l * 64)) == 0xabab_abab_abab_abab)
                .count();
        }
        kept
    };
    assert_eq!(survivors(true), 8 * 64);
    let other = survivors(false);
    assert!(other > 0 && other < 8 * 64, "{other}");
}

/// A crashed memory node fails the ops sent to it; after its restart it serves again (DRAM
/// mode: empty).
#[test]
fn ops_to_a_crashed_memory_node_fail_until_it_restarts() {
    let mut cfg = SimConfig::new(5, 2, 4096);
    cfg.faults.memory_crashes.push(MemoryCrash {
        at_ns: 50_000,
        node: 1,
        down_ns: 100_000,
    });
    let mut pool = SimPool::new(cfg).unwrap();
    pool.with_local(1, |m| m.write_u64(0, 77));
    let r = pool
        .run(topo(1, 1, 1), None, |mut ep: Endpoint| async move {
            let mut seen = Vec::new();
            for _ in 0..100 {
                let r = ep.read(1, 0, 8);
                match ep.post().await {
                    Ok(()) => seen.push(Some(ep.word(r, 0))),
                    Err(e) => {
                        assert_eq!(e, FabricError::NodeDown(1));
                        seen.push(None)
                    }
                }
                ep.sleep(2000).await;
            }
            seen
        })
        .unwrap();
    let seen = r.outputs[0].clone().unwrap();
    assert_eq!(seen[0], Some(77));
    assert!(seen.contains(&None));
    assert_eq!(*seen.last().unwrap(), Some(0), "DRAM comes back empty");
}

/// The fault plan ends with the run: a failure drawn after the coordinators are done does not
/// strike the idle pool (the next run would find a node down in a view that lists it), and a
/// node failed for good during a run stays down, without a restart at `FOREVER` that the
/// drained run would step to (virtual time jumping by a century, the node back blank).
#[test]
fn faults_end_with_the_run_and_a_failed_node_stays_down() {
    let mut cfg = SimConfig::new(5, 3, 4096);
    for (at_ns, node) in [(10_000, 1), (10_000_000, 2)] {
        cfg.faults.memory_crashes.push(MemoryCrash {
            at_ns,
            node,
            down_ns: MemoryCrash::FOREVER,
        });
    }
    let mut pool = SimPool::new(cfg).unwrap();
    pool.with_local(1, |m| m.write_u64(0, 77));
    pool.with_local(2, |m| m.write_u64(0, 88));
    let r = pool
        .run(topo(1, 1, 1), None, |mut ep: Endpoint| async move {
            ep.sleep(20_000).await;
            let r = ep.read(1, 0, 8);
            (ep.post().await, ep.word(r, 0))
        })
        .unwrap();
    assert_eq!(
        r.outputs[0].clone().unwrap().0,
        Err(FabricError::NodeDown(1))
    );
    assert!(
        r.elapsed_ns < 1_000_000,
        "the run drained to {} ns",
        r.elapsed_ns
    );
    pool.set_faults(Default::default());
    let r = pool
        .run(topo(1, 1, 1), None, |mut ep: Endpoint| async move {
            ep.read(1, 0, 8);
            let down = ep.post().await;
            let two = ep.read(2, 0, 8);
            ep.post().await.unwrap();
            (down, ep.word(two, 0))
        })
        .unwrap();
    let (down, two) = r.outputs[0].clone().unwrap();
    assert_eq!(
        down,
        Err(FabricError::NodeDown(1)),
        "node 1 failed for good"
    );
    assert_eq!(two, 88, "node 2's failure fell after the run: never struck");
}

/// A compute-node crash drops its coordinators mid-flight; the others finish.
#[test]
fn a_compute_crash_drops_its_coordinators_only() {
    let mut cfg = SimConfig::new(9, 2, 1 << 16);
    cfg.faults.compute_crashes.push(ComputeCrash {
        at_ns: 30_000,
        compute_node: 1,
    });
    let mut pool = SimPool::new(cfg).unwrap();
    let r = pool
        .run(
            topo(3, 2, 2),
            None,
            |ep| async move { mixed(ep, 100).await },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    for (i, o) in r.outputs.iter().enumerate() {
        let cn = i / 4;
        assert_eq!(o.is_some(), cn != 1, "coordinator {i}");
    }
    // They did post ops before they died.
    assert!(r.stats[4].round_trips > 0 && r.stats[4].round_trips < 100);
}

/// The papers' cluster scale on one core: 6 compute nodes x 20 threads x 8 coroutines.
#[test]
fn thousands_of_coordinators() {
    let mut pool = SimPool::new(SimConfig::new(1, 2, 1 << 16)).unwrap();
    let r = pool
        .run(topo(6, 20, 8), None, |ep| async move { mixed(ep, 8).await })
        .unwrap();
    assert_eq!(r.outputs.iter().flatten().count(), 960);
    assert_eq!(r.total_stats().round_trips, 960 * 8);
    assert_eq!(r.verbs_executed, r.total_stats().verbs_total());
}

/// A run can be cut off at a virtual time; the coordinators still running are dropped.
#[test]
fn stop_at_ends_the_run() {
    let mut pool = SimPool::new(SimConfig::new(1, 1, 4096)).unwrap();
    let r = pool
        .run(
            topo(1, 1, 2),
            Some(100_000),
            |mut ep: Endpoint| async move {
                loop {
                    ep.faa(0, 0, 1);
                    ep.post().await.unwrap();
                }
            },
        )
        .unwrap();
    assert!(r.outputs.iter().all(Option::is_none));
    assert_eq!(r.elapsed_ns, 100_000);
    let n = pool.with_local(0, |m| m.read_u64(0));
    // About one FAA per 2-us round trip per coordinator.
    assert!((60..=110).contains(&n), "{n}");
}

/// A round trip costs what the profile says.
#[test]
fn a_round_trip_on_cx5_takes_about_two_microseconds() {
    let mut pool = SimPool::new(SimConfig::new(1, 1, 4096)).unwrap();
    let r = pool
        .run(topo(1, 1, 1), None, |mut ep: Endpoint| async move {
            let t0 = ep.now_ns();
            for _ in 0..100 {
                ep.read(0, 0, 64);
                ep.post().await.unwrap();
            }
            ep.now_ns() - t0
        })
        .unwrap();
    let per = r.outputs[0].unwrap() / 100;
    assert!((2000..2900).contains(&per), "{per} ns per round trip");
}

/// The harsh knobs (overtaking, coordinator stalls, late completions) stretch a run in virtual
/// time, stay deterministic, and leave the default adversary's runs as they were.
#[test]
fn the_harsh_adversary_stalls_overtakes_and_delays_deterministically() {
    let cfg = SimConfig::new(7, 2, 1 << 16);
    let base = run_mixed(cfg.clone());
    let mut harsh = cfg.clone();
    harsh.adversary = Adversary::harsh(20_000);
    let a = run_mixed(harsh.clone());
    let b = run_mixed(harsh.clone());
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.elapsed_ns, b.elapsed_ns);
    assert_ne!(a.trace_hash, base.trace_hash);
    // Each knob alone slows the run down against the same window without it.
    let wide = Adversary {
        window_ns: 20_000,
        ..Adversary::hostile()
    };
    let mut plain = cfg.clone();
    plain.adversary = wide.clone();
    let plain = run_mixed(plain).elapsed_ns;
    for knob in [
        Adversary {
            stall_prob: 0.05,
            stall_max_ns: 100_000,
            ..wide.clone()
        },
        Adversary {
            overtake_prob: 0.5,
            ..wide.clone()
        },
        Adversary {
            completion_delay_prob: 0.5,
            completion_delay_max_ns: 100_000,
            ..wide.clone()
        },
    ] {
        let mut c = cfg.clone();
        c.adversary = knob.clone();
        let slow = run_mixed(c).elapsed_ns;
        assert!(slow > plain, "{knob:?}: {slow} ns, {plain} ns without it");
    }
    // Knobs at zero draw nothing: the default adversary's run is unchanged.
    let mut zero = cfg.clone();
    zero.adversary = Adversary {
        stall_max_ns: 100_000,
        completion_delay_max_ns: 100_000,
        ..Adversary::hostile()
    };
    assert_eq!(run_mixed(zero).trace_hash, base.trace_hash);
}

/// Many coordinators posting READs back to back on `profile`: (reads per second of virtual
/// time, the run's trace hash).
fn read_rate(profile: Profile, compute_nodes: u32) -> (f64, u64) {
    let mut cfg = SimConfig::new(3, 2, 1 << 16);
    cfg.profile = profile;
    cfg.adversary = Adversary::off();
    let mut pool = SimPool::new(cfg).unwrap();
    let r = pool
        .run(
            topo(compute_nodes, 4, 8),
            None,
            |mut ep: Endpoint| async move {
                for i in 0..50u64 {
                    // Four READs per batch, spread over both memory nodes.
                    for k in 0..4u64 {
                        ep.read((k % 2) as u16, (i * 4 + k) % 64 * 64, 64);
                    }
                    ep.post().await.unwrap();
                }
            },
        )
        .unwrap();
    let reads = f64::from(compute_nodes * 4 * 8 * 50 * 4);
    (reads * 1e9 / r.elapsed_ns as f64, r.trace_hash)
}

/// A compute node's NIC op rate bounds what its coordinators post: 32 coordinators that
/// alone would post ~50 M READs/s get 10 M/s through a 10 Mops NIC, and two compute nodes
/// (two NICs) get twice that. Without the fields (an older profile), the run is unchanged.
#[test]
fn a_compute_nic_op_rate_bounds_the_compute_nodes_op_rate() {
    let free = Profile {
        cpu_per_verb_ns: 10,
        ..Profile::ideal()
    };
    let (unbounded, h0) = read_rate(free.clone(), 1);
    assert!(unbounded > 40e6, "{unbounded}");
    let capped = Profile {
        cn_nic_mops: 10.0,
        ..free.clone()
    };
    let (one, h1) = read_rate(capped.clone(), 1);
    assert!(
        (9.0e6..=10.0e6).contains(&one),
        "{one} reads/s through a 10 Mops NIC"
    );
    assert_ne!(h0, h1);
    let (two, _) = read_rate(capped, 2);
    assert!(
        (18.0e6..=20.0e6).contains(&two),
        "{two} reads/s through two NICs"
    );
    // Bandwidth: 64-byte READs through a 1.024 Gb/s link take 500 ns each: 2 M/s.
    let thin = Profile {
        cn_link_gbps: 1.024,
        ..free.clone()
    };
    let (bw, _) = read_rate(thin, 1);
    assert!(
        (1.9e6..=2.0e6).contains(&bw),
        "{bw} reads/s through a thin link"
    );
    // An older profile's run, bit for bit: zero means no compute NIC.
    let (again, h2) = read_rate(free, 1);
    assert_eq!((again, h2), (unbounded, h0));
}

/// The transaction-logic CPU charge moves the coordinator's clock by exactly what it
/// charges on `ideal`, and delays the thread's next post by as much.
#[test]
fn logic_cpu_is_charged_exactly_on_the_threads_clock() {
    let run = |per_txn: u64, per_item: u64| {
        let mut cfg = SimConfig::new(1, 1, 4096);
        cfg.profile = Profile {
            cpu_per_txn_ns: per_txn,
            cpu_per_item_ns: per_item,
            ..Profile::ideal()
        };
        cfg.adversary = Adversary::off();
        let mut pool = SimPool::new(cfg).unwrap();
        let r = pool
            .run(topo(1, 1, 1), None, |mut ep: Endpoint| async move {
                let t0 = ep.now_ns();
                ep.charge_logic(1, 3);
                let t1 = ep.now_ns();
                ep.read(0, 0, 64);
                ep.post().await.unwrap();
                (t1 - t0, ep.now_ns() - t0)
            })
            .unwrap();
        r.outputs[0].unwrap()
    };
    assert_eq!(run(0, 0), (0, 1000));
    assert_eq!(run(700, 0), (700, 1700));
    assert_eq!(run(700, 50), (850, 1850));
}

/// Each memory node's NIC busy time (`RunReport::mn_nic_busy_ns`) counts the ops served by
/// that node alone, in this run alone: READs to node 1 only leave node 0 idle, and twice the
/// READs take node 1 twice the time.
#[test]
fn nic_busy_time_is_per_memory_node_and_per_run() {
    let mut pool = SimPool::new(SimConfig::new(3, 2, 1 << 16)).unwrap();
    let mut busy = |reads: u64| {
        let r = pool
            .run(topo(1, 1, 1), None, move |mut ep: Endpoint| async move {
                for i in 0..reads {
                    ep.read(1, (i % 64) * 64, 64);
                    ep.post().await.unwrap();
                }
            })
            .unwrap();
        r.mn_nic_busy_ns
    };
    let once = busy(100);
    assert_eq!(once.len(), 2);
    assert_eq!(once[0], 0, "node 0 served nothing");
    assert!(once[1] > 0);
    let twice = busy(200);
    assert_eq!(twice, vec![0, 2 * once[1]]);
}

/// In persistent-memory mode a FLUSH holds its QP for the profile's `pm_flush_ns` (every
/// later op on it waits), so a FLUSH after every WRITE costs one such wait per WRITE
/// where one FLUSH after the last costs one; in DRAM mode a FLUSH costs no more than an op.
#[test]
fn a_pm_flush_holds_its_qp_for_the_profiles_flush_time() {
    let run = |persistent: bool, writes: u64, flush_each: bool, read_after: bool| {
        let mut cfg = SimConfig::new(3, 1, 1 << 16);
        cfg.persistent = persistent;
        cfg.adversary = Adversary::off();
        cfg.profile = Profile {
            pm_flush_ns: 5_000,
            ..Profile::ideal()
        };
        let mut pool = SimPool::new(cfg).unwrap();
        let r = pool
            .run(topo(1, 1, 1), None, move |mut ep: Endpoint| async move {
                let t0 = ep.now_ns();
                for l in 0..writes {
                    ep.write(0, l * 64, &[1; 64]);
                    if flush_each {
                        ep.flush(0);
                    }
                }
                if !flush_each {
                    ep.flush(0);
                }
                if read_after {
                    ep.read(0, 4096, 64);
                }
                ep.post().await.unwrap();
                ep.now_ns() - t0
            })
            .unwrap();
        r.outputs[0].unwrap()
    };
    // `ideal`: a round trip is 1 us and nothing else costs.
    assert_eq!(run(false, 4, true, false), 1_000);
    assert_eq!(run(true, 4, false, false), 1_000 + 5_000);
    assert_eq!(run(true, 4, true, false), 1_000 + 4 * 5_000);
    assert_eq!(run(true, 1, true, false), run(true, 1, false, false));
    // A READ behind a FLUSH on the QP answers after it (RC answers in order).
    assert_eq!(run(true, 1, true, true), 1_000 + 5_000);
    assert_eq!(run(false, 1, true, true), 1_000);
}

/// An op's results are read while its batch is the endpoint's: once the next batch has
/// begun, its id is refused. (It would name the op at its index in the new batch: here a
/// READ of another address, whose bytes it returned before ids carried their batch.)
#[test]
fn results_of_an_earlier_batch_are_refused() {
    let mut pool = SimPool::new(SimConfig::new(1, 1, 4096)).unwrap();
    let r = pool
        .run(topo(1, 1, 1), None, |mut ep: Endpoint| async move {
            ep.write(0, 64, &7u64.to_le_bytes());
            ep.post().await.unwrap();
            let _ = ep.read(0, 0, 8);
            let second = ep.read(0, 64, 8);
            ep.post().await.unwrap();
            let read = ep.word(second, 0);
            let _ = ep.read(0, 128, 8);
            let _ = ep.read(0, 192, 8);
            ep.post().await.unwrap();
            let stale =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ep.word(second, 0)));
            (read, stale.is_err())
        })
        .unwrap();
    assert_eq!(r.outputs, vec![Some((7, true))]);
}
