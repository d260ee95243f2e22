//! What a coordinator does when memory fails it: a lock batch that fails on one memory node
//! leaves no lock of ours on the others (given back once our earlier releases landed), a
//! corrupt hash chain (a cycle) aborts instead of looping, and an install a failure cuts short
//! is rolled back one restore up.

use dtxn_fabric::sim::{Adversary, MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, OpKind, Pool, Profile, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::{
    Abort, AbortReason, Access, Coordinator, FordOptions, Protocol, ScytheMode, ScytheOptions,
    Stages, TxKind, TxnConfig,
};
use std::rc::Rc;

/// Two tables, one copy each: `A` on memory node 0, `B` on node 1.
const A: u32 = 1;
const B: u32 = 2;
/// Memory node 1 crashes then (virtual time), and stays down.
const CRASH_NS: u64 = 1_000_000;

fn v(x: u64) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

fn reason<T>(r: &Result<T, Abort>) -> Option<AbortReason> {
    r.as_ref().err().map(|a| a.reason)
}

fn plan() -> Plan {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 1,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    Plan::new(
        &[
            TableSpec::new(A, "a", 8, 100),
            TableSpec::new(B, "b", 8, 100),
        ],
        &shape,
    )
    .unwrap()
}

fn sim(plan: &Plan, crash: bool) -> SimPool {
    sim_crashing_at(plan, crash.then_some(CRASH_NS))
}

/// [`sim`], memory node 1 crashing at `crash` (virtual ns), if given.
fn sim_crashing_at(plan: &Plan, crash: Option<u64>) -> SimPool {
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    if let Some(at_ns) = crash {
        cfg.faults.memory_crashes = vec![MemoryCrash {
            at_ns,
            node: 1,
            down_ns: 1_000_000_000,
        }];
    }
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    for t in [A, B] {
        let mut l = Loader::new(plan.table(t).unwrap());
        for k in 0..10 {
            l.insert(&pool, k, &v(k)).unwrap();
        }
    }
    let Pool::Sim(s) = pool else { unreachable!() };
    s
}

/// Runs `script` on one coordinator of a pool whose memory node 1 crashes at `CRASH_NS`.
fn with_crash<F, Fut>(ford: FordOptions, script: F) -> Vec<Option<AbortReason>>
where
    F: Fn(Coordinator) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = Vec<Option<AbortReason>>> + 'static,
{
    let cfg = TxnConfig {
        ford,
        ..TxnConfig::default()
    };
    with_crash_under(cfg, script)
}

/// [`with_crash`] under any configuration.
fn with_crash_under<F, Fut>(cfg: TxnConfig, script: F) -> Vec<Option<AbortReason>>
where
    F: Fn(Coordinator) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = Vec<Option<AbortReason>>> + 'static,
{
    let plan = plan();
    let mut sim = sim(&plan, true);
    let cfg = Rc::new(cfg);
    let one = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = sim
        .run(one, None, move |mut ep: Endpoint| {
            let (cfg, script) = (cfg.clone(), script.clone());
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                assert_eq!(map.table(A).unwrap().primary(), 0);
                assert_eq!(map.table(B).unwrap().primary(), 1);
                script(Coordinator::new(ep, map, cfg)).await
            }
        })
        .unwrap();
    r.outputs.into_iter().next().unwrap().unwrap()
}

/// Caches both keys' addresses, then waits for node 1 to go down.
async fn warm_then_crash(c: &mut Coordinator) {
    let mut tx = c.begin(TxKind::ReadOnly);
    tx.fetch(&[Access::read(A, 1), Access::read(B, 1)])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let now = c.endpoint().now_ns();
    c.endpoint().sleep(2 * CRASH_NS - now.min(CRASH_NS)).await;
}

/// After the failure: can we still lock `A`'s key 1 (is the lock we took on node 0 free)?
async fn lock_a_again(c: &mut Coordinator) -> Option<AbortReason> {
    let mut tx = c.begin(TxKind::ReadWrite);
    let r = tx.read_for_update(A, 1).await.map(|_| ());
    if r.is_ok() {
        tx.rollback().await;
    }
    reason(&r)
}

#[test]
fn a_hitchhiked_lock_batch_failing_on_one_node_leaves_no_lock_on_the_other() {
    let out = with_crash(FordOptions::default(), |mut c| async move {
        warm_then_crash(&mut c).await;
        // CAS + READ on node 0 (succeeds) and on node 1 (down), one batch.
        let mut tx = c.begin(TxKind::ReadWrite);
        let r = tx
            .fetch(&[Access::update(A, 1), Access::update(B, 1)])
            .await;
        vec![reason(&r), lock_a_again(&mut c).await]
    });
    assert_eq!(out, [Some(AbortReason::ReplicaFailure), None]);
}

/// The give-back's CASes wait for a FLUSH to each node still up: a word holding our lock
/// word may be an earlier transaction's of ours whose release (a detached WRITE of 0) has not
/// landed, and the contract orders no CAS after an earlier WRITE, only a FLUSH.
#[test]
fn a_give_back_flushes_the_nodes_still_up_before_its_cases() {
    let out = with_crash(FordOptions::default(), |mut c| async move {
        warm_then_crash(&mut c).await;
        let mut tx = c.begin(TxKind::ReadWrite);
        let r = tx
            .fetch(&[Access::update(A, 1), Access::update(B, 1)])
            .await;
        drop(tx);
        let o = c.last_outcome().expect("the attempt is recorded");
        // A FLUSH to each node the batch locked on (node 1's fails: it is down), then the
        // CASes back.
        assert_eq!(o.fabric.verb(OpKind::Flush), 2);
        assert_eq!(o.fabric.verb(OpKind::Cas), 4, "two locks, two given back");
        // The lock batch, the FLUSHes awaited in a batch of their own (nothing orders a CAS
        // after a FLUSH in its batch), the give-back.
        assert_eq!(o.fabric.round_trips, 3);
        vec![reason(&r), lock_a_again(&mut c).await]
    });
    assert_eq!(out, [Some(AbortReason::ReplicaFailure), None]);
}

/// The give-back keeps only the words the transaction holds through an earlier round: an
/// insert's chain lock held from before does not make the failed batch's own locks "held"
/// (a mutant that compared the chain lock with `!=` gave nothing back, and the batch's lock
/// on node 0 stayed until a lease or recovery freed it).
#[test]
fn a_give_back_after_an_insert_still_frees_the_failed_batchs_locks() {
    let out = with_crash(FordOptions::default(), |mut c| async move {
        warm_then_crash(&mut c).await;
        let mut tx = c.begin(TxKind::ReadWrite);
        // A chain lock on node 0, held from this round on.
        tx.insert(A, 500, &v(5)).await.unwrap();
        let r = tx
            .fetch(&[Access::update(A, 1), Access::update(B, 1)])
            .await;
        drop(tx);
        vec![reason(&r), lock_a_again(&mut c).await]
    });
    assert_eq!(out, [Some(AbortReason::ReplicaFailure), None]);
}

/// A give-back never frees an earlier attempt's lock: where our release of it has not landed
/// (a detached WRITE, or an RPC, which no FLUSH orders), the word still holds that attempt's
/// lock word, and the failed batch's CAS of ours (which lost to it) must not match it. Lock
/// words are unique per attempt; with the owner id alone (as they were), the give-back freed
/// the lock while its holder's release was still to come.
#[test]
fn a_give_back_never_frees_an_earlier_attempts_lock() {
    let release_as_rpc = FordOptions {
        rpc: Stages::parse("release").unwrap(),
        ..FordOptions::default()
    };
    let configs = [
        (Protocol::Ford, FordOptions::default()),
        (Protocol::Ford, release_as_rpc),
        (Protocol::NoWait, FordOptions::default()),
    ];
    for (protocol, ford) in configs {
        let cfg = TxnConfig {
            protocol,
            ford,
            ..TxnConfig::default()
        };
        let out = with_crash_under(cfg, |mut c| async move {
            warm_then_crash(&mut c).await;
            let off = slot_of(&mut c, A, 1).await;
            // An earlier attempt locks A's key 1 ...
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.read_for_update(A, 1).await.unwrap();
            let earlier = word_at(tx.endpoint(), 0, off).await;
            tx.rollback().await;
            // ... and its release has not landed yet: the word holds its lock.
            c.endpoint().write(0, off, &earlier.to_le_bytes());
            c.endpoint().post().await.unwrap();
            // The next attempt's lock batch fails (node 1 is down) and gives back.
            let mut tx = c.begin(TxKind::ReadWrite);
            let r = tx
                .fetch(&[Access::update(A, 1), Access::update(B, 1)])
                .await;
            drop(tx);
            let now = word_at(c.endpoint(), 0, off).await;
            assert_ne!(earlier, 0);
            assert_eq!(now, earlier, "the earlier attempt's lock was given back");
            vec![reason(&r)]
        });
        assert_eq!(out, [Some(AbortReason::ReplicaFailure)], "{protocol:?}");
    }
}

/// The same for an insert's chain lock.
#[test]
fn a_give_back_never_frees_an_earlier_attempts_chain_lock() {
    for protocol in [Protocol::Ford, Protocol::NoWait, Protocol::WaitDie] {
        let cfg = TxnConfig {
            protocol,
            ..TxnConfig::default()
        };
        let out = with_crash_under(cfg, |mut c| async move {
            warm_then_crash(&mut c).await;
            let plan = plan();
            let t = plan.table(A).unwrap();
            let chain = t.insert_lock(t.home_bucket(500));
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.insert(A, 500, &v(5)).await.unwrap();
            let earlier = word_at(tx.endpoint(), 0, chain).await;
            tx.rollback().await;
            c.endpoint().write(0, chain, &earlier.to_le_bytes());
            c.endpoint().post().await.unwrap();
            let mut tx = c.begin(TxKind::ReadWrite);
            let r = tx
                .insert_many(&[(A, 500, &v(5)[..]), (B, 500, &v(5)[..])])
                .await;
            drop(tx);
            let now = word_at(c.endpoint(), 0, chain).await;
            assert_ne!(earlier, 0);
            assert_eq!(
                now, earlier,
                "the earlier attempt's chain lock was given back"
            );
            vec![reason(&r)]
        });
        assert_eq!(out, [Some(AbortReason::ReplicaFailure)], "{protocol:?}");
    }
}

/// The offset of `table`'s `key` on memory node 0 (its home bucket's slots).
async fn slot_of(c: &mut Coordinator, table: u32, key: u64) -> u64 {
    let plan = plan();
    let t = plan.table(table).unwrap();
    let home = t.home_bucket(key);
    let ep = c.endpoint();
    let r = ep.read(0, home, t.bucket_bytes as usize);
    ep.post().await.unwrap();
    let bucket = ep.bytes(r).to_vec();
    (0..t.slots_per_bucket)
        .find(|&s| {
            let h = t.codec().header(t.slot_bytes(&bucket, s));
            h.valid && h.key == key
        })
        .map(|s| t.slot(home, s))
        .expect("the key in its home bucket")
}

/// The word at `off` on `node`.
async fn word_at(ep: &mut Endpoint, node: u16, off: u64) -> u64 {
    let r = ep.read(node, off, 8);
    ep.post().await.unwrap();
    ep.word(r, 0)
}

#[test]
fn a_commit_lock_round_failing_on_one_node_leaves_no_lock_on_the_other() {
    let cold = FordOptions {
        hitchhiked_locking: false,
        ..FordOptions::default()
    };
    let out = with_crash(cold, |mut c| async move {
        // Read for update without locks (hitchhiking off), before the crash; locked at commit,
        // after it.
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.fetch(&[Access::update(A, 1), Access::update(B, 1)])
            .await
            .unwrap();
        tx.update(A, 1, &v(7)).await.unwrap();
        tx.update(B, 1, &v(7)).await.unwrap();
        let now = tx.endpoint().now_ns();
        tx.endpoint().sleep(2 * CRASH_NS - now.min(CRASH_NS)).await;
        let r = tx.commit().await;
        // Hitchhiking off: the lock is taken at commit, so commit a write of A.
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.read_for_update(A, 1).await.unwrap();
        tx.update(A, 1, &v(8)).await.unwrap();
        vec![reason(&r), reason(&tx.commit().await)]
    });
    assert_eq!(out, [Some(AbortReason::ReplicaFailure), None]);
}

#[test]
fn an_insert_batch_failing_on_one_node_leaves_no_chain_lock_on_the_other() {
    let out = with_crash(FordOptions::default(), insert_on_both_then_on_a_again);
    assert_eq!(out, [Some(AbortReason::ReplicaFailure), None]);
}

/// After the failure, an insert on both nodes (node 1 down), then the same chain of `A` again:
/// its insert lock must be free.
async fn insert_on_both_then_on_a_again(mut c: Coordinator) -> Vec<Option<AbortReason>> {
    warm_then_crash(&mut c).await;
    let mut tx = c.begin(TxKind::ReadWrite);
    let r = tx
        .insert_many(&[(A, 500, &v(5)[..]), (B, 500, &v(5)[..])])
        .await;
    drop(tx);
    let mut tx = c.begin(TxKind::ReadWrite);
    let again = match tx.insert(A, 500, &v(5)).await {
        Ok(()) => tx.commit().await,
        Err(a) => Err(a),
    };
    vec![reason(&r), reason(&again)]
}

/// The same under the protocols whose record lock word is a timestamp (WAIT_DIE's and Scythe's
/// TOCC's; MVCC's too): the chain locks are taken with the attempt's word, and the give-back
/// must CAS that back, not the record lock word (it did, and left the chain locked for good).
#[test]
fn an_insert_batch_failing_under_timestamped_lock_words_leaves_no_chain_lock() {
    for protocol in [Protocol::WaitDie, Protocol::Scythe] {
        let cfg = TxnConfig {
            protocol,
            scythe: ScytheOptions {
                mode: ScytheMode::Tocc,
                ..ScytheOptions::default()
            },
            ..TxnConfig::default()
        };
        let out = with_crash_under(cfg, insert_on_both_then_on_a_again);
        assert_eq!(
            out,
            [Some(AbortReason::ReplicaFailure), None],
            "{protocol:?}"
        );
    }
}

/// 2PL upgrades a read share to the exclusive lock by a CAS from the share; a batch with that
/// CAS that fails on another node gives the word back to the share (it was set to 0, and the
/// abort's release of the share then took 0 to all ones: locked for good).
#[test]
fn a_failed_upgrade_of_a_read_share_gives_the_share_back() {
    for protocol in [Protocol::NoWait, Protocol::WaitDie] {
        let cfg = TxnConfig {
            protocol,
            ..TxnConfig::default()
        };
        let out = with_crash_under(cfg, |mut c| async move {
            warm_then_crash(&mut c).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let read = tx.read(A, 1).await.map(|_| ());
            let r = tx
                .fetch(&[Access::update(A, 1), Access::update(B, 1)])
                .await;
            drop(tx);
            vec![reason(&read), reason(&r), lock_a_again(&mut c).await]
        });
        assert_eq!(
            out,
            [None, Some(AbortReason::ReplicaFailure), None],
            "{protocol:?}"
        );
    }
}

/// Links `A`'s home bucket of `key` to overflow bucket 0, and that bucket to itself.
fn cycle_words(plan: &Plan, key: u64) -> [(u64, u64); 2] {
    let t = plan.table(A).unwrap();
    [(t.home_bucket(key), 1), (t.overflow_bucket(0), 1)]
}

#[test]
fn a_cycle_in_a_chain_aborts_instead_of_looping() {
    let plan = plan();
    let mut sim = sim(&plan, false);
    let absent = 777;
    let words = cycle_words(&plan, absent);
    let overflow = plan.table(A).unwrap().overflow_buckets;
    let cfg = Rc::new(TxnConfig::default());
    let one = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = sim
        .run(one, None, move |mut ep: Endpoint| {
            let cfg = cfg.clone();
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let mut c = Coordinator::new(ep, map, cfg);
                let mut out = Vec::new();
                // Absent, chain intact: read, then the chain turns into a cycle before the
                // commit validates the absence.
                let mut tx = c.begin(TxKind::ReadOnly);
                let read = tx.read(A, absent).await.map(|v| v.is_none());
                out.push(reason(&read));
                for (addr, word) in words {
                    tx.endpoint().write(0, addr, &word.to_le_bytes());
                }
                tx.endpoint().post().await.unwrap();
                out.push(reason(&tx.commit().await));
                // And now every walk of it.
                let mut tx = c.begin(TxKind::ReadOnly);
                out.push(reason(&tx.read(A, absent).await));
                // Given up after at most one hop per overflow bucket (and one more).
                let rts = c.last_outcome().unwrap().fabric.round_trips;
                assert!(rts <= overflow + 2, "{rts} round trips");
                let mut tx = c.begin(TxKind::ReadWrite);
                out.push(reason(&tx.insert(A, absent, &v(1)).await));
                out
            }
        })
        .unwrap();
    let out = r.outputs.into_iter().next().unwrap().unwrap();
    let corrupt = Some(AbortReason::CorruptChain);
    assert_eq!(out, [None, corrupt, corrupt, corrupt]);
}

/// A commit whose install fails on one memory node rolls the other back at the old version,
/// one restore up (`dtxn_store::record`): the record's next install, at the version of the
/// one undone, is then stamped apart from it. Memory node 1 crashes at each instant of a
/// commit writing A's key 1 (node 0) and B's (node 1): wherever the transaction aborts, A's
/// record is at its old version, and where its install had reached node 0 and was rolled
/// back, one restore up. (Some instant must cut the install itself.)
#[test]
fn an_install_cut_short_by_a_replica_failure_is_rolled_back_one_restore_up() {
    let plan = plan();
    let mut restores = Vec::new();
    for at in (0..30_000).step_by(100) {
        let mut sim = sim_crashing_at(&plan, Some(at));
        let one = Topology {
            compute_nodes: 1,
            threads: 1,
            coroutines: 1,
        };
        let r = sim
            .run(one, None, |mut ep: Endpoint| async move {
                // (A crash before the bootstrap ends fails it: no transaction.)
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.ok()?);
                let mut c = Coordinator::new(ep, map, Rc::new(TxnConfig::default()));
                let mut tx = c.begin(TxKind::ReadWrite);
                let r = async {
                    tx.fetch(&[Access::update(A, 1), Access::update(B, 1)])
                        .await?;
                    tx.update(A, 1, &v(7)).await?;
                    tx.update(B, 1, &v(7)).await?;
                    tx.commit().await
                };
                Some(reason(&r.await))
            })
            .unwrap();
        if r.outputs[0].unwrap() != Some(Some(AbortReason::ReplicaFailure)) {
            continue;
        }
        let pool = Pool::Sim(sim);
        let t = plan.table(A).unwrap();
        let mut bucket = vec![0u8; t.bucket_bytes as usize];
        pool.with_local(0, |m| m.read(t.home_bucket(1), &mut bucket));
        let h = (0..t.slots_per_bucket)
            .map(|s| t.codec().header(t.slot_bytes(&bucket, s)))
            .find(|h| h.valid && h.key == 1)
            .expect("A's key 1 in its home bucket on node 0");
        assert_eq!((h.version, h.lock), (0, 0), "crash at {at} ns: {h:?}");
        restores.push(h.restores);
    }
    assert!(
        restores.contains(&1),
        "no instant cut the install: {restores:?}"
    );
    assert!(restores.iter().all(|&r| r <= 1), "{restores:?}");
}

/// The give-back keeps a word only if an item holds the lock at that address *on that node*:
/// a record locked on another node at the same offset does not count (tables' slots of
/// different nodes share offsets). A mutant that compared the item's primary with `!=` kept
/// the failed batch's lock on node 0 because a record of node 1 was locked at its offset.
#[test]
fn a_give_back_frees_a_lock_whose_offset_we_hold_on_another_node() {
    let plan = plan();
    let (a, b) = (plan.table(A).unwrap(), plan.table(B).unwrap());
    // B's key 1, alone in its home bucket (slot 0) on node 1; the slot of node 0 at the same
    // offset is slot 1 of one of A's buckets: A's second key in it lands there.
    let target = b.slot(b.home_bucket(1), 0);
    assert!((0..10).all(|k| k == 1 || b.home_bucket(k) != b.home_bucket(1)));
    let bucket = (0..a.bucket_count)
        .map(|i| a.bucket(i))
        .find(|&bk| a.slot(bk, 1) == target)
        .expect("A's slot at B's key 1's offset");
    assert!((0..10).all(|k| a.home_bucket(k) != bucket));
    let mut keys = (10..).filter(|&k| a.home_bucket(k) == bucket);
    let (j1, j2) = (keys.next().unwrap(), keys.next().unwrap());
    let out = with_crash(FordOptions::default(), move |mut c| async move {
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.insert(A, j1, &v(1)).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.insert(A, j2, &v(2)).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(slot_of(&mut c, A, j2).await, target);
        let mut tx = c.begin(TxKind::ReadOnly);
        tx.fetch(&[Access::read(A, j2), Access::read(B, 1), Access::read(B, 2)])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        // B's key 1 locked on node 1 at `target`, before node 1 goes down ...
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.read_for_update(B, 1).await.unwrap();
        let now = tx.endpoint().now_ns();
        tx.endpoint().sleep(2 * CRASH_NS - now.min(CRASH_NS)).await;
        // ... then a batch locking A's key at `target` on node 0 fails on node 1.
        let r = tx
            .fetch(&[Access::update(A, j2), Access::update(B, 2)])
            .await;
        drop(tx);
        let mut again = c.begin(TxKind::ReadWrite);
        let r2 = again.read_for_update(A, j2).await.map(|_| ());
        if r2.is_ok() {
            again.rollback().await;
        }
        vec![reason(&r), reason(&r2)]
    });
    assert_eq!(out, [Some(AbortReason::ReplicaFailure), None]);
}
