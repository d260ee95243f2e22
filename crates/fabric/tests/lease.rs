//! An endpoint's lease: renewals ride on its posts, and once the lease may have expired it is
//! fenced: every post is refused, and nothing it asks for reaches memory.

use dtxn_fabric::sim::{MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, FabricError, Lease, NodeSet, Topology};

const WORD: u64 = 256;
const DATA: u64 = 4096;
/// One coordinator.
const ONE: Topology = Topology {
    compute_nodes: 1,
    threads: 1,
    coroutines: 1,
};

#[test]
fn posts_renew_the_lease_and_a_lapsed_one_fences_every_post() {
    let mut pool = SimPool::new(SimConfig::new(7, 1, 1 << 16)).unwrap();
    let lease = Lease {
        nodes: NodeSet::single(0),
        addr: WORD,
        lease_ns: 1_000_000,
        guard_ns: 100_000,
        incarnation: 3,
    };
    let r = pool
        .run(ONE, None, move |mut ep: Endpoint| async move {
            ep.hold_lease(lease);
            ep.renew_lease().await.unwrap();
            let first = ep.lease().unwrap().1;
            // A quarter of the lease later, an ordinary post renews it on the way.
            ep.sleep(300_000).await;
            ep.write(0, DATA, &[1u8; 8]);
            ep.post().await.unwrap();
            let second = ep.lease().unwrap().1;
            // Past expiry - guard: refused, now and for good, even once "renewed".
            ep.sleep(second - ep.now_ns() - 50_000).await;
            ep.write(0, DATA, &[2u8; 8]);
            let refused = ep.post().await;
            let again = ep.renew_lease().await;
            ep.write(0, DATA, &[3u8; 8]);
            let detached = ep.post_detached();
            (first, second, refused, again, detached, ep.fenced())
        })
        .unwrap();
    let (first, second, refused, again, detached, fenced) = r.outputs[0].clone().unwrap();
    assert!(second >= first + 300_000, "{first} {second}");
    assert_eq!(refused, Err(FabricError::LeaseExpired));
    assert_eq!(again, Err(FabricError::LeaseExpired));
    assert_eq!(detached, Err(FabricError::LeaseExpired));
    assert!(fenced);
    let (word, data) = pool.with_local(0, |m| (m.read_u64(WORD), m.read_u64(DATA)));
    // The pool holds the last renewal, and the last WRITE posted before the fence.
    assert_eq!(Lease::parse(word), (second, false, 3));
    assert_eq!(data, u64::from_le_bytes([1u8; 8]));
}

/// A lease with copies on several memory nodes (the control chain's members): each renewal
/// WRITEs every copy but those on nodes the endpoint saw down. A batch that failed only where
/// it renewed the lease succeeds (its own ops executed; a dead node's copy is never read);
/// one that failed where it did its caller's work too fails, whichever node its error names.
#[test]
fn renewals_write_every_live_copy_and_their_failure_alone_is_not_the_callers() {
    let mut cfg = SimConfig::new(7, 4, 1 << 16);
    for (node, at_ns) in [(1, 500_000), (3, 500_000), (2, 1_500_000)] {
        cfg.faults.memory_crashes.push(MemoryCrash {
            at_ns,
            node,
            down_ns: u64::MAX / 4,
        });
    }
    let mut pool = SimPool::new(cfg).unwrap();
    let lease = Lease {
        nodes: NodeSet::first(3),
        addr: WORD,
        lease_ns: 1_000_000,
        guard_ns: 100_000,
        incarnation: 2,
    };
    let r = pool
        .run(ONE, None, move |mut ep: Endpoint| async move {
            ep.hold_lease(lease);
            ep.renew_lease().await.unwrap();
            // Nodes 1 and 3 died: a WRITE to node 3 with a renewal (node 1 among its copies)
            // fails on both.
            ep.sleep(600_000).await;
            ep.write(3, DATA, &[1u8; 8]);
            let both = (ep.post().await, ep.seen_down());
            // Node 2 alive: a WRITE there renews on nodes 0 and 2 only, and succeeds.
            ep.sleep(300_000).await;
            ep.write(2, DATA, &[2u8; 8]);
            let live = ep.post().await;
            let renewed = ep.lease().unwrap().1;
            // Node 2 died too: a WRITE to node 0 whose renewal fails on node 2 succeeds.
            ep.sleep(700_000).await;
            ep.write(0, DATA, &[3u8; 8]);
            let masked = (ep.post().await, ep.seen_down());
            (both, live, renewed, masked, ep.lease().unwrap().1)
        })
        .unwrap();
    let ((both, seen), live, renewed, (masked, seen_after), last) = r.outputs[0].clone().unwrap();
    assert!(
        matches!(both, Err(FabricError::NodeDown(1 | 3))),
        "{both:?}"
    );
    assert_eq!(seen, [1, 3].into_iter().collect());
    assert_eq!(live, Ok(()));
    assert_eq!(masked, Ok(()));
    assert_eq!(seen_after, [1, 2, 3].into_iter().collect());
    let word = |n| Lease::parse(pool.with_local(n, |m| m.read_u64(WORD)));
    assert_eq!(word(0), (last, false, 2));
    assert!(last > renewed, "{renewed} {last}");
    assert_eq!(
        pool.with_local(0, |m| m.read_u64(DATA)),
        u64::from_le_bytes([3u8; 8])
    );
}

/// A background batch too (FORD's undo log) passes over a failure that hit only its
/// renewals, and reports one on its own ops. A lease whose every copy is on nodes seen down
/// renews nowhere: it runs out, and the endpoint fences itself.
#[test]
fn background_batches_pass_over_renewal_failures_and_a_lease_with_no_copy_left_runs_out() {
    let mut cfg = SimConfig::new(9, 3, 1 << 16);
    for (node, at_ns) in [(1, 100_000), (2, 100_000)] {
        cfg.faults.memory_crashes.push(MemoryCrash {
            at_ns,
            node,
            down_ns: u64::MAX / 4,
        });
    }
    let mut pool = SimPool::new(cfg).unwrap();
    let r = pool
        .run(ONE, None, move |mut ep: Endpoint| async move {
            ep.hold_lease(Lease {
                nodes: NodeSet::first(2),
                addr: WORD,
                lease_ns: 1_000_000,
                guard_ns: 100_000,
                incarnation: 1,
            });
            ep.renew_lease().await.unwrap();
            // Node 1 (a copy) and node 2 (no copy) died. A background WRITE to node 0 with a
            // renewal on nodes 0 and 1: the failure on node 1 is the renewal's alone.
            ep.sleep(300_000).await;
            ep.write(0, DATA, &[1u8; 8]);
            ep.post_background().unwrap();
            let renewal_only = ep.wait_background().await;
            // A background WRITE to node 2: its own op failed.
            ep.write(2, DATA, &[2u8; 8]);
            ep.post_background().unwrap();
            let own = ep.wait_background().await;
            // A lease on node 1 alone: nothing renews it, and a lease later it is fenced.
            ep.hold_lease(Lease {
                nodes: NodeSet::single(1),
                addr: WORD,
                lease_ns: 1_000_000,
                guard_ns: 100_000,
                incarnation: 2,
            });
            let mut posts = 0;
            let fenced = loop {
                ep.write(0, DATA + 8, &[3u8; 8]);
                match ep.post().await {
                    Ok(()) if posts == 50 => break FabricError::Setup("never fenced".into()),
                    Ok(()) => posts += 1,
                    Err(e) => break e,
                }
                ep.sleep(100_000).await;
            };
            (renewal_only, own, posts, fenced)
        })
        .unwrap();
    let (renewal_only, own, posts, fenced) = r.outputs[0].clone().unwrap();
    assert_eq!(renewal_only, Ok(()));
    assert_eq!(own, Err(FabricError::NodeDown(2)));
    // Posts every 100 us until lease - guard (900 us) after it was held.
    assert_eq!((posts, fenced), (9, FabricError::LeaseExpired));
    assert_eq!(
        pool.with_local(0, |m| m.read_u64(DATA)),
        u64::from_le_bytes([1u8; 8])
    );
}

/// On `shm` (and `ucx`) the lease word is on the wall clock, which other processes read; the
/// holder fences itself on its own monotonic clock, `lease - guard` after its last renewal.
#[test]
fn on_shm_the_lease_word_is_on_the_wall_clock_and_fencing_on_the_local_one() {
    use dtxn_fabric::shm::{ShmConfig, ShmPool};
    let pool = ShmPool::create(ShmConfig {
        node_sizes: vec![1 << 16],
        dir: None,
        delay_ns: 0,
    })
    .unwrap();
    let lease = Lease {
        nodes: NodeSet::single(0),
        addr: WORD,
        lease_ns: 40_000_000,
        guard_ns: 10_000_000,
        incarnation: 5,
    };
    let before = dtxn_fabric::wall_clock_ns();
    let r = pool
        .run(ONE, None, move |mut ep: Endpoint| async move {
            ep.hold_lease(lease);
            ep.renew_lease().await.unwrap();
            let granted = ep.lease().unwrap().1;
            let started = ep.now_ns();
            ep.write(0, DATA, &[1u8; 8]);
            ep.post().await.unwrap();
            // Past lease - guard on the local clock, without a renewal: fenced.
            while ep.now_ns() < started + 30_000_001 {
                ep.sleep(1_000_000).await;
            }
            ep.write(0, DATA, &[2u8; 8]);
            (granted, ep.post().await, ep.max_flight_ns())
        })
        .unwrap();
    let after = dtxn_fabric::wall_clock_ns();
    let (granted, refused, flight) = r.outputs[0].clone().unwrap();
    assert!(
        (before + 40_000_000..=after + 40_000_000).contains(&granted),
        "{before} {granted} {after}"
    );
    assert_eq!(refused, Err(FabricError::LeaseExpired));
    assert!(flight > 0 && flight < 30_000_000, "{flight}");
    let (word, data) = pool.with_local(0, |m| (m.read_u64(WORD), m.read_u64(DATA)));
    // The word keeps 48 bits of the expiry; read near the wall clock, it is the expiry.
    assert_eq!(Lease::parse_near(word, after), (granted, false, 5));
    assert_ne!(Lease::parse(word).0, granted);
    assert_eq!(data, u64::from_le_bytes([1u8; 8]));
}

#[test]
fn a_lease_word_read_near_its_expiry_gives_the_expiry_across_a_48_bit_wrap() {
    let span = 1u64 << 48;
    for expiry in [
        5,
        span - 5,
        7 * span + 3,
        7 * span - 3,
        1_764_000_000_000_000_000,
    ] {
        let w = Lease::word(expiry, true, 9);
        for now in [
            expiry - expiry.min(1_000_000_000),
            expiry,
            expiry + 1_000_000_000,
        ] {
            assert_eq!(
                Lease::parse_near(w, now),
                (expiry, true, 9),
                "{expiry} {now}"
            );
        }
    }
    // On sim's clock (below 2^47) it is the word's own value.
    let w = Lease::word(123_456, false, 1);
    assert_eq!(Lease::parse_near(w, 0), Lease::parse(w));
}
