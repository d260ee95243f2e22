//! Per-verb latency of the ucx backend: one coordinator, one-op batches, each awaited
//! (READ 64 B, WRITE 64 B, CAS, FAA), plus the lock-and-read batch (CAS + READ 64 B) and RPCs
//! (one 16-byte echo, and four packed into one message), through
//! the full `Endpoint` path. The memory node is a thread of this process, reached over UCX's TCP
//! transport on the loopback interface (as a node on another host would be over TCP).
//!
//! Run: `cargo run --release -p dtxn-fabric --example ucx_latency [OPS]`
//! (UCX_TLS / UCX_NET_DEVICES in the environment are overridden with tcp / lo).

use dtxn_fabric::ucx::{UcxConfig, UcxPool};
use dtxn_fabric::{CoordId, Endpoint, LocalMem, NodeId, RpcHandler};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

const REGION: u64 = 1 << 20;

/// Answers a request with itself.
struct Echo;

impl RpcHandler for Echo {
    fn handle(&self, _: NodeId, _: u64, _: &mut dyn LocalMem, req: &[u8], resp: &mut Vec<u8>) {
        resp.extend_from_slice(req);
    }
}

fn measure(name: &str, ops: usize, ep: &mut Endpoint, mut one: impl FnMut(&mut Endpoint, usize)) {
    for i in 0..ops / 10 {
        one(ep, i);
        block_on(ep.post()).expect("warm-up op");
    }
    let mut ns = Vec::with_capacity(ops);
    for i in 0..ops {
        let t = Instant::now();
        one(ep, i);
        block_on(ep.post()).expect("op");
        ns.push(t.elapsed().as_nanos() as u64);
    }
    ns.sort_unstable();
    let pct = |p: f64| ns[((ns.len() as f64 * p) as usize).min(ns.len() - 1)] as f64 / 1000.0;
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1000.0;
    println!(
        "{name:<14} p50 {:>7.1} us   p99 {:>7.1} us   mean {:>7.1} us   ({ops} ops)",
        pct(0.5),
        pct(0.99),
        mean
    );
}

fn main() {
    let ops: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("OPS: a number"))
        .unwrap_or(20_000);
    let mut pool = match UcxPool::spawn_local(&[REGION], UcxConfig::loopback_tcp()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ucx_latency: {e}");
            std::process::exit(1);
        }
    };
    pool.set_rpc_handler(std::sync::Arc::new(Echo));
    let mut ep = pool
        .endpoint(CoordId {
            compute_node: 0,
            thread: 0,
            coroutine: 0,
            index: 0,
        })
        .expect("endpoint");
    let line = |i: usize| (i as u64 * 64) % REGION;
    println!("ucx over tcp on 127.0.0.1, memory node in-process (own progress thread)");
    measure("read 64 B", ops, &mut ep, |ep, i| {
        ep.read(0, line(i), 64);
    });
    measure("write 64 B", ops, &mut ep, |ep, i| {
        ep.write(0, line(i), &[i as u8; 64]);
    });
    let mut next = pool.try_with_local(0, |m| m.read_u64(0)).expect("word");
    measure("cas", ops, &mut ep, |ep, _| {
        ep.cas(0, 0, next, next + 1);
        next += 1;
    });
    measure("faa", ops, &mut ep, |ep, _| {
        ep.faa(0, 8, 1);
    });
    measure("cas+read 64 B", ops, &mut ep, |ep, i| {
        ep.cas(0, 64, 0, 0);
        ep.read(0, 128 + line(i) % (REGION - 128), 64);
    });
    measure("rpc 16 B", ops, &mut ep, |ep, _| {
        ep.rpc(0, &[9u8; 16]);
    });
    measure("rpc 4x16 B", ops, &mut ep, |ep, _| {
        for _ in 0..4 {
            ep.rpc(0, &[9u8; 16]);
        }
    });
}
