//! No allocation per verb: once a coordinator's buffers have grown to its largest batch, posting
//! allocates nothing, on the sim (whose event queue and batch records are reused too).

use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Topology};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

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
            let before = ALLOCS.load(Ordering::Relaxed);
            traffic(&mut ep, 2000).await;
            ALLOCS.load(Ordering::Relaxed) - before
        })
        .unwrap();
    // Coordinators interleave, so each one's window also covers the others' posts.
    let worst = r.outputs.iter().flatten().max().copied().unwrap();
    assert_eq!(worst, 0, "allocations while posting 2000 batches");
}
