//! Verb throughput through the full `Endpoint` path.
//!
//! - `shm/read64`, `shm/cas`: one thread, one coordinator, one-op batches (build the batch,
//!   `post().await`, read the result). Target: at least 10 M/s each in release.
//! - `shm/rpc16`: one thread, one coordinator, one-RPC batches (16-byte request, echoed) served
//!   by the memory node's server thread: the two-sided round trip (queue, wake-up, handler,
//!   response) to compare with `shm/read64`.
//! - `shm/batch`: one doorbell batch shaped like a TPC-C NewOrder round: 8 READs of a 576-byte
//!   bucket and 8 WRITEs of a 320-byte record at random lines of a 64 MiB region (beyond the
//!   L2 cache, as the workloads' regions are). Measures the shm data path per batch.
//! - `sim/mixed`: wall-clock speed of the simulator: 64 coordinators posting batches of
//!   READ(256 B) + WRITE(64 B) + CAS at random addresses, hostile adversary, cx5-100g profile.
//!   Target: at least 2 M verbs per wall second.
//!
//! Run: `cargo bench -p dtxn-fabric --bench verbs -- --quick`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dtxn_fabric::shm::{ShmConfig, ShmPool};
use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{CoordId, Endpoint, LocalMem, NodeId, Profile, RpcHandler, Topology};
use rand::Rng;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// The smallest executor: shm completes at once, so this polls once per post.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// `block_on` for a completion that another thread produces (an RPC served by a memory-node
/// thread): spins a little, then yields the core, as the runtime's executor does, so that on a
/// busy host the server thread gets to run.
fn block_on_yielding<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    let mut idle = 0u32;
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        idle += 1;
        if idle < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

const SHM_BYTES: u64 = 1 << 16;

/// An anonymous one-node pool of `bytes`, and its first coordinator's endpoint.
fn shm_pool(bytes: u64) -> (ShmPool, Endpoint) {
    let pool = ShmPool::create(ShmConfig {
        node_sizes: vec![bytes],
        dir: None,
        delay_ns: 0,
    })
    .expect("pool");
    let ep = pool.endpoint(CoordId {
        compute_node: 0,
        thread: 0,
        coroutine: 0,
        index: 0,
    });
    (pool, ep)
}

fn shm(c: &mut Criterion) {
    let (pool, mut ep) = shm_pool(SHM_BYTES);
    let mut g = c.benchmark_group("shm");
    g.throughput(Throughput::Elements(1));

    let mut addr = 0u64;
    g.bench_function("read64", |b| {
        b.iter(|| {
            // Walks a cache-resident region line by line, so the READ is not one hot line.
            addr = (addr + 64) % SHM_BYTES;
            let id = ep.read(0, addr, 64);
            block_on(ep.post()).expect("read");
            black_box(ep.word(id, 0))
        })
    });

    let mut next = pool.with_local(0, |m| m.read_u64(0));
    g.bench_function("cas", |b| {
        b.iter(|| {
            let id = ep.cas(0, 0, next, next + 1);
            block_on(ep.post()).expect("cas");
            assert!(ep.cas_ok(id), "uncontended CAS failed");
            next += 1;
        })
    });

    g.finish();
}

/// Answers a request with itself.
struct Echo;

impl RpcHandler for Echo {
    fn handle(&self, _: NodeId, _: u64, _: &mut dyn LocalMem, req: &[u8], resp: &mut Vec<u8>) {
        resp.extend_from_slice(req);
    }
}

fn shm_rpc(c: &mut Criterion) {
    let mut pool = ShmPool::create(ShmConfig {
        node_sizes: vec![SHM_BYTES],
        dir: None,
        delay_ns: 0,
    })
    .expect("pool");
    pool.set_rpc_handler(std::sync::Arc::new(Echo));
    let mut ep = pool.endpoint(CoordId {
        compute_node: 0,
        thread: 0,
        coroutine: 0,
        index: 0,
    });
    let mut g = c.benchmark_group("shm");
    g.throughput(Throughput::Elements(1));
    g.bench_function("rpc16", |b| {
        b.iter(|| {
            let id = ep.rpc(0, &[9u8; 16]);
            block_on_yielding(ep.post()).expect("rpc");
            black_box(ep.bytes(id)[0])
        })
    });
    g.finish();
}

const BATCH_BYTES: u64 = 64 << 20;

fn shm_batch(c: &mut Criterion) {
    let (_pool, mut ep) = shm_pool(BATCH_BYTES);
    let record = [7u8; 320];
    let mut rng = rand::rng();
    let mut g = c.benchmark_group("shm");
    g.throughput(Throughput::Elements(16));
    g.bench_function("batch", |b| {
        b.iter(|| {
            let lines = BATCH_BYTES / 64 - 16;
            let first = ep.read(0, rng.random_range(0..lines) * 64, 576);
            for _ in 1..8 {
                ep.read(0, rng.random_range(0..lines) * 64, 576);
            }
            for _ in 0..8 {
                ep.write(0, rng.random_range(0..lines) * 64, &record);
            }
            block_on(ep.post()).expect("batch");
            black_box(ep.bytes(first)[0])
        })
    });
    g.finish();
}

const SIM_BATCHES: u64 = 100;
const SIM_VERBS_PER_BATCH: u64 = 3;
const SIM_TOPO: Topology = Topology {
    compute_nodes: 2,
    threads: 4,
    coroutines: 8,
};

async fn mixed(mut ep: Endpoint) -> u64 {
    let nodes = ep.node_sizes().len() as u16;
    let size = ep.node_sizes()[0];
    let mut swapped = 0;
    for _ in 0..SIM_BATCHES {
        let rng = ep.rng();
        let (rn, wn, cn) = (
            rng.random_range(0..nodes),
            rng.random_range(0..nodes),
            rng.random_range(0..nodes),
        );
        let ra = rng.random_range(0..size / 64 - 4) * 64;
        let wa = rng.random_range(0..size / 64) * 64;
        let ca = rng.random_range(0..size / 8) * 8;
        let v: u64 = rng.random();
        ep.read(rn, ra, 256);
        ep.write(wn, wa, &v.to_le_bytes().repeat(8));
        let c = ep.cas(cn, ca, 0, v);
        ep.post().await.expect("mixed batch");
        swapped += u64::from(ep.cas_ok(c));
    }
    swapped
}

fn sim(c: &mut Criterion) {
    let mut cfg = SimConfig::new(1, 4, 1 << 20);
    cfg.profile = Profile::cx5_100g();
    cfg.adversary = Adversary::hostile();
    let mut pool = SimPool::new(cfg).expect("sim pool");
    let verbs = u64::from(SIM_TOPO.coordinators()) * SIM_BATCHES * SIM_VERBS_PER_BATCH;
    let mut g = c.benchmark_group("sim");
    g.throughput(Throughput::Elements(verbs));
    g.sample_size(10);
    g.bench_function("mixed", |b| {
        b.iter(|| {
            let r = pool.run(SIM_TOPO, None, mixed).expect("sim run");
            // Not `verbs_executed`: sim accumulates it over the pool's runs.
            assert_eq!(r.total_stats().verbs_total(), verbs);
            black_box(r.trace_hash)
        })
    });
    g.finish();
}

criterion_group!(benches, shm, shm_rpc, shm_batch, sim);
criterion_main!(benches);
