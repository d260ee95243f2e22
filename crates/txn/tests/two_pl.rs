//! RCC's two-phase locking, scripted: two coordinators on the simulator (no adversary, the
//! `ideal` profile) whose steps are ordered in virtual time. Read locks are shared; NO_WAIT
//! aborts on a conflict; WAIT_DIE's older transaction waits for the younger holder, and the
//! younger one dies.

use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::{AbortReason, Access, Coordinator, HybridCode, Protocol, RccOptions};
use dtxn_txn::{TxKind, TxnConfig};
use std::rc::Rc;

const T: u32 = 1;

/// What each coordinator saw, step by step: `Ok` or the abort's reason.
type Steps = Vec<(&'static str, Result<(), AbortReason>)>;

/// Runs coordinator 0's and coordinator 1's scripts together under `protocol` with RCC's
/// hybrid `code`; returns their steps.
fn script<F0, F1>(protocol: Protocol, code: u64, s0: F0, s1: F1) -> (Steps, Steps)
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
    let plan = Plan::new(&[TableSpec::new(T, "t", 8, 16)], &shape).unwrap();
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
    let cfg = Rc::new(TxnConfig {
        protocol,
        rcc: RccOptions {
            hybrid: HybridCode::new(code).unwrap(),
        },
        ..TxnConfig::default()
    });
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
            let (cfg, s0, s1) = (cfg.clone(), s0.clone(), s1.clone());
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let first = ep.id().index == 0;
                let mut c = Coordinator::new(ep, map, cfg);
                // Both start their scripts at the same virtual instant.
                c.endpoint().sleep(100_000).await;
                if first {
                    s0(&mut c).await
                } else {
                    s1(&mut c).await
                }
            }
        })
        .unwrap();
    let mut out = r.outputs.into_iter().map(|o| o.unwrap());
    (out.next().unwrap(), out.next().unwrap())
}

fn res<T>(r: Result<T, dtxn_txn::Abort>) -> Result<(), AbortReason> {
    r.map(|_| ()).map_err(|a| a.reason)
}

/// Coordinator 0 holds a read share of key 1 for a while; coordinator 1 reads key 1 meanwhile
/// (it shares), then tries to write it (a conflict: the share is 0's), then again once 0 has
/// committed.
fn shares(protocol: Protocol, code: u64) -> (Steps, Steps) {
    script(
        protocol,
        code,
        async |c: &mut Coordinator| {
            let mut tx = c.begin(TxKind::ReadOnly);
            let read = res(tx.read(T, 1).await);
            tx.endpoint().sleep(50_000).await;
            vec![("read", read), ("commit", res(tx.commit().await))]
        },
        async |c: &mut Coordinator| {
            c.endpoint().sleep(10_000).await;
            let mut tx = c.begin(TxKind::ReadOnly);
            let read = res(tx.read(T, 1).await);
            let commit = res(tx.commit().await);
            let mut tx = c.begin(TxKind::ReadWrite);
            let write = res(tx.fetch(&[Access::update(T, 1)]).await);
            if write.is_ok() {
                tx.rollback().await;
            }
            c.endpoint().sleep(100_000).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let later = res(tx.fetch(&[Access::update(T, 1)]).await);
            let _ = tx.update(T, 1, &7u64.to_le_bytes()).await;
            let later_commit = res(tx.commit().await);
            vec![
                ("read", read),
                ("commit", commit),
                ("write", write),
                ("write later", later),
                ("commit later", later_commit),
            ]
        },
    )
}

#[test]
fn read_locks_are_shared_and_a_writer_meets_them() {
    for p in [Protocol::NoWait, Protocol::WaitDie] {
        for code in [511, 0, 28] {
            let (a, b) = shares(p, code);
            let what = format!("{} hybrid {code}", p.name());
            assert_eq!(a, [("read", Ok(())), ("commit", Ok(()))], "{what}");
            assert_eq!(
                b,
                [
                    // Two readers hold key 1 at once.
                    ("read", Ok(())),
                    ("commit", Ok(())),
                    // A writer meeting a read share: NO_WAIT aborts; WAIT_DIE's writer dies
                    // too (a share count does not say whose it is, so it never waits on one).
                    ("write", Err(AbortReason::LockConflict)),
                    // Every share given back: the word is free again.
                    ("write later", Ok(())),
                    ("commit later", Ok(())),
                ],
                "{what}"
            );
        }
    }
}

/// Coordinator 0 begins first (the older) and locks key 1; coordinator 1 (the younger) locks
/// key 2; then 0 asks for key 2 while 1 asks for key 1.
fn crossing(protocol: Protocol, code: u64) -> (Steps, Steps) {
    script(
        protocol,
        code,
        async |c: &mut Coordinator| {
            let mut tx = c.begin(TxKind::ReadWrite);
            let first = res(tx.fetch(&[Access::update(T, 1)]).await);
            tx.endpoint().sleep(20_000).await;
            let second = res(tx.fetch(&[Access::update(T, 2)]).await);
            let commit = if second.is_ok() {
                let _ = tx.update(T, 2, &9u64.to_le_bytes()).await;
                res(tx.commit().await)
            } else {
                Err(AbortReason::LockConflict)
            };
            vec![("key 1", first), ("key 2", second), ("commit", commit)]
        },
        async |c: &mut Coordinator| {
            c.endpoint().sleep(5_000).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let first = res(tx.fetch(&[Access::update(T, 2)]).await);
            tx.endpoint().sleep(25_000).await;
            let second = res(tx.fetch(&[Access::update(T, 1)]).await);
            if second.is_ok() {
                tx.rollback().await;
            }
            vec![("key 2", first), ("key 1", second)]
        },
    )
}

#[test]
fn wait_die_lets_the_older_wait_and_the_younger_die() {
    for code in [511, 0, 28] {
        let (old, young) = crossing(Protocol::WaitDie, code);
        // The older waits for key 2 (it never aborts); the younger, asking for the older's
        // key 1, dies, which frees key 2 for the older.
        assert_eq!(
            old,
            [("key 1", Ok(())), ("key 2", Ok(())), ("commit", Ok(()))],
            "hybrid {code}"
        );
        assert_eq!(
            young,
            [("key 2", Ok(())), ("key 1", Err(AbortReason::LockConflict))],
            "hybrid {code}"
        );
    }
}

#[test]
fn no_wait_aborts_on_the_first_conflict() {
    let (old, young) = crossing(Protocol::NoWait, 511);
    // 0 asks for key 2 while 1 holds it: it aborts at once (and frees key 1, so 1 gets it).
    assert_eq!(
        old,
        [
            ("key 1", Ok(())),
            ("key 2", Err(AbortReason::LockConflict)),
            ("commit", Err(AbortReason::LockConflict)),
        ]
    );
    assert_eq!(young, [("key 2", Ok(())), ("key 1", Ok(()))]);
}
