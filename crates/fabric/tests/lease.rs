//! An endpoint's lease: renewals ride on its posts, and once the lease may have expired it is
//! fenced: every post is refused, and nothing it asks for reaches memory.

use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, FabricError, Lease, Topology};

const WORD: u64 = 256;
const DATA: u64 = 4096;

#[test]
fn posts_renew_the_lease_and_a_lapsed_one_fences_every_post() {
    let mut pool = SimPool::new(SimConfig::new(7, 1, 1 << 16)).unwrap();
    let lease = Lease {
        node: 0,
        addr: WORD,
        lease_ns: 1_000_000,
        guard_ns: 100_000,
        incarnation: 3,
    };
    let one = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = pool
        .run(one, None, move |mut ep: Endpoint| async move {
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
