//! Motor corner cases, scripted as deterministic interleavings on the simulator (in the style
//! of `hermitage.rs`): a transaction's own inserts and deletes, its own claimed slots, and
//! what it leaves behind in memory (no lock word may stay set after every transaction ended).

use dtxn_check::{check, Isolation as CheckIsolation, Options, Txn as HTxn};
use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableInfo, TableSpec};
use dtxn_txn::{
    AbortReason, Access, Coordinator, Isolation, MotorOptions, Protocol, Recorder, TxKind,
    TxnConfig, VersionLayout,
};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

const T: u32 = 1;

fn val(x: u64) -> Vec<u8> {
    let mut b = vec![0u8; 72];
    b[..8].copy_from_slice(&x.to_le_bytes());
    b[64..].copy_from_slice(&x.to_le_bytes());
    b
}

fn num(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

struct Collect(Rc<RefCell<Vec<HTxn>>>);

impl Recorder for Collect {
    fn record(&mut self, t: &HTxn) {
        self.0.borrow_mut().push(t.clone());
    }
}

/// Shared by the roles of a scenario: what each role observed.
#[derive(Default)]
struct Board {
    seen: RefCell<Vec<(&'static str, Option<u64>)>>,
}

impl Board {
    fn see(&self, what: &'static str, v: Option<u64>) {
        self.seen.borrow_mut().push((what, v));
    }

    fn get(&self, what: &str) -> Vec<Option<u64>> {
        self.seen
            .borrow()
            .iter()
            .filter(|(w, _)| *w == what)
            .map(|x| x.1)
            .collect()
    }
}

fn reason(r: Result<(), dtxn_txn::Abort>) -> Option<u64> {
    match r {
        Ok(()) => None,
        Err(a) => Some(
            AbortReason::ALL
                .iter()
                .position(|&x| x == a.reason)
                .unwrap() as u64,
        ),
    }
}

fn named(codes: &[Option<u64>]) -> Vec<Option<AbortReason>> {
    codes
        .iter()
        .map(|c| c.map(|c| AbortReason::ALL[c as usize]))
        .collect()
}

fn spec() -> TableSpec {
    let mut spec = TableSpec::new(T, "test", 72, 16).multi_version(4);
    spec.attributes = vec![8, 56, 8];
    spec
}

/// Keys (besides 1 and 2) whose home bucket is `home`.
fn keys_in(t: &TableInfo, home: u64, n: usize) -> Vec<u64> {
    (3..10_000)
        .filter(|&k| t.home_bucket(k) == home)
        .take(n)
        .collect()
}

struct Ran {
    board: Rc<Board>,
    pool: Pool,
    plan: Plan,
}

/// Runs `script(role, coordinator, board)` as `roles` Motor coordinators against keys 1 -> 10
/// and 2 -> 20; asserts that the history satisfies `iso`.
fn scenario<F, Fut>(iso: Isolation, roles: u32, script: F) -> Ran
where
    F: Fn(u32, Coordinator, Rc<Board>) -> Fut + Copy + 'static,
    Fut: Future<Output = ()> + 'static,
{
    scenario_with(iso, roles, false, script)
}

/// [`scenario`], the coordinators sharing a local oracle if `local`.
fn scenario_with<F, Fut>(iso: Isolation, roles: u32, local: bool, script: F) -> Ran
where
    F: Fn(u32, Coordinator, Rc<Board>) -> Fut + Copy + 'static,
    Fut: Future<Output = ()> + 'static,
{
    scenario_over(iso, roles, local, |_| {}, script)
}

/// [`scenario_with`], with Motor's switches set by `options`.
fn scenario_over<F, Fut>(
    iso: Isolation,
    roles: u32,
    local: bool,
    options: impl Fn(&mut MotorOptions),
    script: F,
) -> Ran
where
    F: Fn(u32, Coordinator, Rc<Board>) -> Fut + Copy + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let oracle = local.then(|| std::sync::Arc::new(dtxn_txn::LocalOracle::new(roles)));
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 8,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let plan = Plan::new(&[spec()], &shape).unwrap();
    let mut pool = Pool::Sim(SimPool::new(SimConfig::new(3, 2, plan.region_bytes)).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    l.insert(&pool, 1, &val(10)).unwrap();
    l.insert(&pool, 2, &val(20)).unwrap();
    let board = Rc::new(Board::default());
    let history = Rc::new(RefCell::new(Vec::new()));
    let mut cfg = TxnConfig {
        protocol: Protocol::Motor,
        ..TxnConfig::default()
    };
    cfg.motor.isolation = iso;
    options(&mut cfg.motor);
    let cfg = Rc::new(cfg);
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    let topo = Topology {
        compute_nodes: 1,
        threads: roles,
        coroutines: 1,
    };
    sim.run(topo, None, |mut ep: Endpoint| {
        let (board, history, cfg) = (board.clone(), history.clone(), cfg.clone());
        let oracle = oracle.clone();
        let role = ep.id().thread;
        async move {
            let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
            let mut c = Coordinator::new(ep, map, cfg);
            if let Some(o) = oracle {
                assert!(c.set_local_oracle(o));
            }
            c.set_recorder(Box::new(Collect(history)));
            script(role, c, board).await
        }
    })
    .unwrap();
    let h = history.borrow();
    let report = check(
        h.iter(),
        Options {
            isolation: match iso {
                Isolation::Serializable => CheckIsolation::Serializable,
                Isolation::Snapshot => CheckIsolation::Snapshot,
            },
            real_time: true,
        },
    )
    .unwrap();
    assert!(report.ok(), "{report}");
    Ran { board, pool, plan }
}

/// Every lock word of the table (record slots and chains' insert locks) on its primary that
/// is still set, as (offset, word).
fn locks_left(ran: &Ran) -> Vec<(u64, u64)> {
    let t = ran.plan.table(T).unwrap();
    let buckets = (0..t.bucket_count)
        .map(|b| t.table_off + 64 + b * t.bucket_bytes)
        .chain((0..t.overflow_buckets).map(|i| t.overflow_bucket(i)));
    let mut left = Vec::new();
    for b in buckets {
        let words =
            std::iter::once(t.insert_lock(b)).chain((0..t.slots_per_bucket).map(|s| t.slot(b, s)));
        for off in words {
            let w = ran.pool.with_local(t.primary(), |m| m.read_u64(off));
            if w != 0 {
                left.push((off, w));
            }
        }
    }
    left
}

/// A transaction that inserts a key and deletes it again commits with the key absent, and
/// leaves no lock behind: neither on a deleted key's CVT it re-inserted over (which would
/// lock the key out of every later writer) nor on the free slot it claimed for a new key.
#[test]
fn insert_then_delete_in_one_transaction_releases_its_locks() {
    for iso in [Isolation::Serializable, Isolation::Snapshot] {
        let ran = scenario(iso, 1, |_, mut c, b| async move {
            // Key 1 deleted: its CVT holds a tombstone.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.read_for_update(T, 1).await.unwrap();
            tx.delete(T, 1).await.unwrap();
            tx.commit().await.unwrap();
            // Re-inserted over the tombstone and deleted again; key 3 inserted into a free
            // slot and deleted again.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.insert(T, 1, &val(11)).await.unwrap();
            tx.delete(T, 1).await.unwrap();
            tx.insert(T, 3, &val(33)).await.unwrap();
            tx.delete(T, 3).await.unwrap();
            assert!(tx.get(T, 1).is_none() && tx.get(T, 3).is_none());
            tx.commit().await.unwrap();
            // Inserted, deleted and inserted again: one slot, the last value.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.insert(T, 4, &val(4)).await.unwrap();
            tx.delete(T, 4).await.unwrap();
            tx.insert(T, 4, &val(44)).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = c.begin(TxKind::ReadOnly);
            let v = tx.read(T, 4).await.unwrap().map(num);
            b.see("four", v);
            tx.commit().await.unwrap();
            // Key 1 can be written again.
            let mut tx = c.begin(TxKind::ReadWrite);
            let r = async {
                let v = tx.read_for_update(T, 1).await?.map(num);
                b.see("again", v);
                tx.insert(T, 1, &val(12)).await?;
                tx.commit().await
            }
            .await;
            b.see("reinsert", reason(r));
        });
        assert_eq!(
            ran.board.get("reinsert"),
            [None],
            "{iso:?}: re-insert aborted: {:?}",
            named(&ran.board.get("reinsert"))
        );
        assert_eq!(ran.board.get("again"), [None], "{iso:?}");
        assert_eq!(ran.board.get("four"), [Some(44)], "{iso:?}");
        assert_eq!(locks_left(&ran), [], "{iso:?}: locks left");
    }
}

/// A serializable transaction that saw a key absent and inserts another key of the same
/// chain: at validation its own claimed slot (marked committing) is no other writer's insert,
/// so it commits.
#[test]
fn own_claimed_slot_does_not_fail_validation_of_an_absent_key() {
    let ran = scenario(Isolation::Serializable, 1, |_, mut c, b| async move {
        let t = c.map().table(T).unwrap().clone();
        let keys = keys_in(&t, t.home_bucket(3), 2);
        let (absent, new) = (keys[0], keys[1]);
        let mut tx = c.begin(TxKind::ReadWrite);
        let r = async {
            assert!(tx.read(T, absent).await?.is_none());
            tx.insert(T, new, &val(5)).await?;
            tx.commit().await
        }
        .await;
        b.see("commit", reason(r));
    });
    assert_eq!(
        ran.board.get("commit"),
        [None],
        "{:?}",
        named(&ran.board.get("commit"))
    );
    assert_eq!(locks_left(&ran), []);
}

/// One fetch that names a key twice, read-only then for update (the second wins): the key is
/// locked once and read under its lock, cached address or not.
#[test]
fn a_key_fetched_read_only_and_for_update_at_once_is_locked_once() {
    for iso in [Isolation::Serializable, Isolation::Snapshot] {
        let ran = scenario(iso, 1, |_, mut c, b| async move {
            // First with an empty address cache (bucket reads), then with a warm one.
            for _ in 0..2 {
                let mut tx = c.begin(TxKind::ReadWrite);
                let r = async {
                    tx.fetch(&[Access::read(T, 1), Access::update(T, 1)])
                        .await?;
                    let v = num(tx.get(T, 1).unwrap());
                    tx.update(T, 1, &val(v + 1)).await?;
                    tx.commit().await
                }
                .await;
                b.see("fetch", reason(r));
            }
            let mut tx = c.begin(TxKind::ReadOnly);
            let v = tx.read(T, 1).await.unwrap().map(num);
            b.see("final", v);
            tx.commit().await.unwrap();
        });
        assert_eq!(
            ran.board.get("fetch"),
            [None, None],
            "{iso:?}: {:?}",
            named(&ran.board.get("fetch"))
        );
        assert_eq!(ran.board.get("final"), [Some(12)]);
        assert_eq!(locks_left(&ran), [], "{iso:?}");
    }
}

/// Sleeps (virtual time) until `t`.
async fn until(ep: &mut Endpoint, t: u64) {
    let now = ep.now_ns();
    if t > now {
        ep.sleep(t - now).await;
    }
}

/// With a local oracle, a reader whose timestamp was taken while a writer's commit was under
/// way waits for that commit, not for the writer's coordinator: once the commit is over, a
/// lock the coordinator's next transaction holds on the record does not hold the reader up.
/// (Before commits were counted beside the committing bits, the reader reread the record
/// until its reread limit aborted it.)
#[test]
fn a_local_oracle_reader_waits_for_a_commit_not_for_its_coordinator() {
    const T0: u64 = 1_000_000;
    let ran = scenario_with(
        Isolation::Serializable,
        2,
        true,
        |role, mut c, b| async move {
            if role == 0 {
                // The writer: key 1 -> 11 committed at T0, then its next transaction holds key
                // 1's lock for 2 ms.
                let mut tx = c.begin(TxKind::ReadWrite);
                tx.read_for_update(T, 1).await.unwrap();
                tx.update(T, 1, &val(11)).await.unwrap();
                until(tx.endpoint(), T0).await;
                tx.commit().await.unwrap();
                let mut tx = c.begin(TxKind::ReadWrite);
                tx.read_for_update(T, 1).await.unwrap();
                until(tx.endpoint(), T0 + 2_000_000).await;
                tx.update(T, 1, &val(12)).await.unwrap();
                tx.commit().await.unwrap();
            } else {
                // The reader: its timestamp taken just after the writer's (inside its commit),
                // key 1 read once the commit is over and the next transaction holds the lock.
                until(c.endpoint(), T0 + 300).await;
                let mut tx = c.begin(TxKind::ReadOnly);
                let r = async {
                    tx.read(T, 2).await?;
                    until(tx.endpoint(), T0 + 200_000).await;
                    let v = tx.read(T, 1).await?.map(num);
                    b.see("read", v);
                    tx.commit().await
                }
                .await;
                b.see("reader", reason(r));
            }
        },
    );
    assert_eq!(named(&ran.board.get("reader")), [None]);
    assert_eq!(
        ran.board.get("read"),
        [Some(11)],
        "the commit below the reader's start"
    );
}

/// A snapshot older than every update of a record, under each version layout: the version it
/// reads is the same (the CVT decides it), and the round trips of that one read are the
/// walk's. Key 1 holds 4 versions (the loaded one and three updates of its first attribute,
/// whose pre-images are inline: a CVT rebuilds the old value without a READ). A new-to-old
/// chain walks all 4 nodes from the newest down; an old-to-new one reads 2: the oldest, the
/// version wanted, and the next, above the snapshot.
#[test]
fn an_old_snapshot_walks_a_new_to_old_chain_from_the_newest() {
    const T1: u64 = 1_000_000;
    let read_rts = |versions| {
        let ran = scenario_over(
            Isolation::Serializable,
            2,
            false,
            |m| m.versions = versions,
            |role, mut c, b| async move {
                if role == 0 {
                    // The writer, after the reader's timestamp: three updates of key 1's
                    // first attribute.
                    until(c.endpoint(), 100_000).await;
                    for x in 11..14u64 {
                        let mut tx = c.begin(TxKind::ReadWrite);
                        let mut v = tx.read_for_update(T, 1).await.unwrap().unwrap().to_vec();
                        v[..8].copy_from_slice(&x.to_le_bytes());
                        tx.update(T, 1, &v).await.unwrap();
                        tx.commit().await.unwrap();
                    }
                } else {
                    let mut tx = c.begin(TxKind::ReadOnly);
                    tx.read(T, 2).await.unwrap();
                    until(tx.endpoint(), T1).await;
                    let before = tx.endpoint().stats().round_trips;
                    let v = tx.read(T, 1).await.unwrap().map(num);
                    let rts = tx.endpoint().stats().round_trips - before;
                    b.see("read", v);
                    b.see("round trips", Some(rts));
                    tx.commit().await.unwrap();
                }
            },
        );
        assert_eq!(ran.board.get("read"), [Some(10)], "{versions:?}");
        ran.board.get("round trips")[0].unwrap()
    };
    assert_eq!(read_rts(VersionLayout::Cvt), 1);
    assert_eq!(read_rts(VersionLayout::N2o), 5);
    assert_eq!(read_rts(VersionLayout::O2n), 3);
}

/// Motor's switches a race runs under: Motor's own locks with the first READ, and FaRMv2-DM's
/// (`lock_at_commit`, the backups committed first), each with the pool's oracle and a local one.
const LOCKINGS: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

fn locking(late: bool) -> impl Fn(&mut MotorOptions) {
    move |m| {
        m.lock_at_commit = late;
        m.coalescent_commit = !late;
    }
}

/// Write skew over two keys read for update, each transaction writing one: serializable
/// commits at most one (locked at commit, both may abort: each validates the key it left
/// unwritten, like a read, and finds the other's lock on it). Without that validation both
/// commit.
#[test]
fn write_skew_over_keys_read_for_update_commits_one() {
    for (late, local) in LOCKINGS {
        let ran = scenario_over(
            Isolation::Serializable,
            2,
            local,
            locking(late),
            |role, mut c, b| async move {
                let mut tx = c.begin(TxKind::ReadWrite);
                let r = async {
                    let x = num(tx.read_for_update(T, 1).await?.unwrap());
                    let y = num(tx.read_for_update(T, 2).await?.unwrap());
                    until(tx.endpoint(), 200_000).await;
                    let k = if role == 0 { 1 } else { 2 };
                    tx.update(T, k, &val(x + y)).await?;
                    tx.commit().await
                }
                .await;
                b.see("commit", reason(r));
            },
        );
        let c = named(&ran.board.get("commit"));
        let committed = c.iter().filter(|r| r.is_none()).count();
        assert!(committed <= 1, "{late} {local}: {c:?}");
        assert_eq!(locks_left(&ran), [], "{late} {local}");
    }
}

/// A key read read-only, then fetched for update after another writer committed a newer
/// version of it: first-committer-wins aborts the update under both isolation levels (locked
/// at commit, the version read is no longer the newest).
#[test]
fn an_update_of_a_key_read_before_a_newer_commit_aborts() {
    for iso in [Isolation::Serializable, Isolation::Snapshot] {
        for (late, local) in LOCKINGS {
            let ran = scenario_over(iso, 2, local, locking(late), |role, mut c, b| async move {
                if role == 0 {
                    until(c.endpoint(), 100_000).await;
                    let mut tx = c.begin(TxKind::ReadWrite);
                    let v = num(tx.read_for_update(T, 1).await.unwrap().unwrap());
                    tx.update(T, 1, &val(v + 100)).await.unwrap();
                    tx.commit().await.unwrap();
                } else {
                    let mut tx = c.begin(TxKind::ReadWrite);
                    let r = async {
                        let v = num(tx.read(T, 1).await?.unwrap());
                        until(tx.endpoint(), 400_000).await;
                        tx.read_for_update(T, 1).await?;
                        tx.update(T, 1, &val(v + 1)).await?;
                        tx.commit().await
                    }
                    .await;
                    b.see("commit", reason(r));
                }
            });
            let c = named(&ran.board.get("commit"));
            assert!(
                c[0].is_some(),
                "{iso:?} {late} {local}: a lost update: {c:?}"
            );
            assert_eq!(locks_left(&ran), [], "{iso:?} {late} {local}");
        }
    }
}

/// A delete and an update of one key, both read before either commits: at most one commits.
#[test]
fn a_delete_racing_an_update_commits_one() {
    for iso in [Isolation::Serializable, Isolation::Snapshot] {
        for (late, local) in LOCKINGS {
            let ran = scenario_over(iso, 2, local, locking(late), |role, mut c, b| async move {
                let mut tx = c.begin(TxKind::ReadWrite);
                let r = async {
                    let v = num(tx.read_for_update(T, 1).await?.unwrap());
                    until(tx.endpoint(), 200_000).await;
                    if role == 0 {
                        tx.delete(T, 1).await?;
                    } else {
                        tx.update(T, 1, &val(v + 1)).await?;
                    }
                    tx.commit().await
                }
                .await;
                b.see("commit", reason(r));
            });
            let c = named(&ran.board.get("commit"));
            let committed = c.iter().filter(|r| r.is_none()).count();
            assert!(committed <= 1, "{iso:?} {late} {local}: {c:?}");
            assert_eq!(locks_left(&ran), [], "{iso:?} {late} {local}");
        }
    }
}
