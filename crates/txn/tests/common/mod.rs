//! What several of this crate's integration tests share.

use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::{PoolMap, TableSpec};
use dtxn_txn::{Coordinator, Protocol, TxnConfig};
use std::future::Future;
use std::rc::Rc;

/// `spec` laid out as `protocol` keeps its records: Motor's CVTs (2 versions), the protocol's
/// own words beside the record (SUNDIAL's lease, MVCC's rts, Scythe's takeout queue) and
/// MVCC's version slots.
#[allow(dead_code)]
pub fn for_protocol(protocol: Protocol, mut spec: TableSpec) -> TableSpec {
    if protocol == Protocol::Motor {
        spec = spec.multi_version(2);
    }
    let words = protocol.meta_words();
    if words > 0 {
        spec = spec.with_meta_words(words);
    }
    let copies = protocol.copies();
    if copies > 1 && protocol != Protocol::Motor {
        spec = spec.with_copies(copies);
    }
    spec
}

/// Runs `body` as the only coordinator (1 compute node x 1 thread x 1 coroutine) of `pool`, a
/// formatted sim pool, under `cfg`; returns its output.
#[allow(dead_code)]
pub fn with_coordinator<R, Fut>(
    mut pool: Pool,
    cfg: TxnConfig,
    body: impl Fn(Coordinator) -> Fut + 'static,
) -> R
where
    R: 'static,
    Fut: Future<Output = R> + 'static,
{
    with_coordinator_in(&mut pool, cfg, body)
}

/// [`with_coordinator`] on a pool the caller keeps (to power it off after, say).
#[allow(dead_code)]
pub fn with_coordinator_in<R, Fut>(
    pool: &mut Pool,
    cfg: TxnConfig,
    body: impl Fn(Coordinator) -> Fut + 'static,
) -> R
where
    R: 'static,
    Fut: Future<Output = R> + 'static,
{
    let Pool::Sim(sim) = pool else {
        panic!("with_coordinator runs on a sim pool")
    };
    let (cfg, body) = (Rc::new(cfg), Rc::new(body));
    let one = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = sim
        .run(one, None, |mut ep: Endpoint| {
            let (cfg, body) = (cfg.clone(), body.clone());
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                body(Coordinator::new(ep, map, cfg)).await
            }
        })
        .unwrap();
    r.outputs.into_iter().next().unwrap().unwrap()
}
