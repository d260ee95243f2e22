//! No allocation per verb: once a coordinator's buffers have grown to its largest batch, posting
//! allocates nothing, on the sim (whose event queue and batch records are reused too).

use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::testing::{allocs, CountingAlloc};
use dtxn_fabric::{Endpoint, Topology};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

async fn traffic(ep: &mut Endpoint, rounds: u32) {
    for i in 0..rounds {
        let a = u64::from(i % 16) * 256;
        let c = ep.cas(0, a, 0, 1);
        let r = ep.read(0, a, 256);
        ep.write(1, a, &[i as u8; 200]);
        ep.faa(1, 8192, 1);
        ep.post().await.unwrap();
        assert!(ep.cas_ok(c) || ep.old(c) == 1);
        assert_eq!(ep.bytes(r).len(), 256);
    }
}

#[test]
fn posting_allocates_nothing_after_warm_up() {
    let mut pool = SimPool::new(SimConfig::new(1, 2, 1 << 16)).unwrap();
    let topo = Topology {
        compute_nodes: 1,
        threads: 2,
        coroutines: 2,
    };
    let r = pool
        .run(topo, None, |mut ep: Endpoint| async move {
            traffic(&mut ep, 1000).await; // warm-up: buffers and queues grow
            let before = allocs();
            traffic(&mut ep, 2000).await;
            allocs() - before
        })
        .unwrap();
    // Coordinators interleave, so each one's window also covers the others' posts.
    let worst = r.outputs.iter().flatten().max().copied().unwrap();
    assert_eq!(worst, 0, "allocations while posting 2000 batches");
}

#[test]
fn posting_on_shm_allocates_nothing_after_warm_up() {
    use dtxn_fabric::shm::{ShmConfig, ShmPool};
    for coroutines in [1, 3] {
        let cfg = ShmConfig {
            node_sizes: vec![1 << 16; 2],
            dir: None,
            delay_ns: 0,
        };
        let pool = ShmPool::create(cfg).unwrap();
        let topo = Topology {
            compute_nodes: 1,
            threads: 1,
            coroutines,
        };
        let r = pool
            .run(topo, None, |mut ep: Endpoint| async move {
                traffic(&mut ep, 1000).await;
                let before = allocs();
                traffic(&mut ep, 2000).await;
                allocs() - before
            })
            .unwrap();
        let worst = r.outputs.iter().flatten().max().copied().unwrap();
        assert_eq!(
            worst, 0,
            "{coroutines} coroutines: allocations while posting"
        );
    }
}
