//! Two coordinators' scripts run together on the simulator (no adversary, the `ideal`
//! profile), their steps ordered in virtual time: what `two_pl.rs` and `sundial.rs` share.

use dtxn_check::Txn as HTxn;
use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::TxnConfig;
use dtxn_txn::{AbortReason, Coordinator, HybridCode, MvccOptions, Protocol, RccOptions, Recorder};
use std::cell::RefCell;
use std::rc::Rc;

/// The one table, keys 0..16 loaded (values: the key), room for 64.
pub const T: u32 = 1;

/// What each coordinator saw, step by step: `Ok` or the abort's reason.
pub type Steps = Vec<(&'static str, Result<(), AbortReason>)>;

pub struct Collect(Rc<RefCell<Vec<HTxn>>>);

impl Recorder for Collect {
    fn record(&mut self, t: &HTxn) {
        self.0.borrow_mut().push(t.clone());
    }
}

/// Runs coordinator 0's and coordinator 1's scripts together under `protocol` with RCC's
/// hybrid `code`; returns their steps and the history of both.
pub fn script<F0, F1>(protocol: Protocol, code: u64, s0: F0, s1: F1) -> (Steps, Steps, Vec<HTxn>)
where
    F0: AsyncFn(&mut Coordinator) -> Steps + 'static,
    F1: AsyncFn(&mut Coordinator) -> Steps + 'static,
{
    let mvcc = MvccOptions {
        slots: protocol.copies(),
        ..MvccOptions::default()
    };
    script_with(protocol, code, mvcc, s0, s1)
}

/// [`script`] with MVCC's switches `mvcc` (its version slots: the table laid out with them).
#[allow(dead_code)] // (not every test binary that includes this module uses it)
pub fn script_with<F0, F1>(
    protocol: Protocol,
    code: u64,
    mvcc: MvccOptions,
    s0: F0,
    s1: F1,
) -> (Steps, Steps, Vec<HTxn>)
where
    F0: AsyncFn(&mut Coordinator) -> Steps + 'static,
    F1: AsyncFn(&mut Coordinator) -> Steps + 'static,
{
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let spec = TableSpec::new(T, "t", 8, 64)
        .with_meta_words(protocol.meta_words())
        .with_copies(mvcc.slots);
    let plan = Plan::new(&[spec], &shape).unwrap();
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..16u64 {
        l.insert(&pool, k, &k.to_le_bytes()).unwrap();
    }
    let rcc = RccOptions {
        hybrid: HybridCode::new(code).unwrap(),
    };
    let cfg = Rc::new(TxnConfig {
        protocol,
        rcc: if protocol.options_key() == Some("rcc") {
            rcc
        } else {
            RccOptions::default()
        },
        mvcc: if protocol == Protocol::Mvcc {
            mvcc
        } else {
            MvccOptions::default()
        },
        ..TxnConfig::default()
    });
    let history = Rc::new(RefCell::new(Vec::new()));
    let (s0, s1) = (Rc::new(s0), Rc::new(s1));
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    let two = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 2,
    };
    let r = sim
        .run(two, None, |mut ep: Endpoint| {
            let (cfg, s0, s1, h) = (cfg.clone(), s0.clone(), s1.clone(), history.clone());
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let first = ep.id().index == 0;
                let mut c = Coordinator::new(ep, map, cfg);
                c.set_recorder(Box::new(Collect(h)));
                if first {
                    s0(&mut c).await
                } else {
                    s1(&mut c).await
                }
            }
        })
        .unwrap();
    let mut out = r.outputs.into_iter().map(|o| o.unwrap());
    let h = history.borrow().clone();
    (out.next().unwrap(), out.next().unwrap(), h)
}

pub fn res<T>(r: Result<T, dtxn_txn::Abort>) -> Result<(), AbortReason> {
    r.map(|_| ()).map_err(|a| a.reason)
}
