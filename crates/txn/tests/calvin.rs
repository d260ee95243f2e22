//! RCC's CALVIN, scripted: two coordinators on the simulator (no adversary, the `ideal`
//! profile) whose steps are ordered in virtual time, their histories checked. Two transactions
//! that conflict in one epoch both commit, in the epoch's order (coordinator index), the
//! later one waiting for the earlier one's done word rather than aborting; a transaction that
//! learns a key late (OLLP) moves to a later epoch and still commits.

use dtxn_check::{check, Isolation, Options, Status, Txn as HTxn};
use dtxn_txn::TxKind;
use dtxn_txn::{Access, Coordinator, Protocol};
use std::cell::RefCell;
use std::rc::Rc;

mod scripted;
use scripted::{res, script, Steps, T};

/// When the scripts' transactions start (virtual ns): after the bootstrap.
const T0: u64 = 400_000;

async fn until(c: &mut Coordinator, t: u64) {
    let now = c.endpoint().now_ns();
    if t > now {
        c.endpoint().sleep(t - now).await;
    }
}

fn value(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

/// Reads `key`, computes for `think` ns, writes `f(value)`; the value read is the step's name
/// (as a check of the order) through `seen`.
async fn bump(
    c: &mut Coordinator,
    key: u64,
    think: u64,
    f: fn(u64) -> u64,
) -> (Result<(), dtxn_txn::AbortReason>, u64) {
    let mut tx = c.begin(TxKind::ReadWrite);
    if let Err(a) = tx.fetch(&[Access::update(T, key)]).await {
        return (Err(a.reason), 0);
    }
    let v = value(tx.get(T, key).unwrap());
    tx.endpoint().sleep(think).await;
    if let Err(a) = tx.update(T, key, &f(v).to_le_bytes()).await {
        return (Err(a.reason), v);
    }
    (res(tx.commit().await), v)
}

fn serializable(h: &[HTxn]) -> bool {
    let opts = Options {
        isolation: Isolation::Serializable,
        real_time: true,
    };
    check(h, opts).unwrap().ok()
}

fn committed_writer_version(h: &[HTxn], session: u64, key: u64) -> u64 {
    h.iter()
        .filter(|t| t.status == Status::Committed && t.session == session)
        .find_map(|t| t.writes.iter().find(|w| w.key == key).map(|w| w.version))
        .unwrap()
}

fn read_version(h: &[HTxn], session: u64, key: u64) -> u64 {
    h.iter()
        .filter(|t| t.status == Status::Committed && t.session == session)
        .find_map(|t| t.reads.iter().find(|r| r.key == key).map(|r| r.version))
        .unwrap()
}

/// Both coordinators start a read-write transaction on key 5 at the same instant: both are
/// in the first epoch, coordinator 0 first. Coordinator 1, though its fetch was posted at the
/// same time, reads key 5 only once coordinator 0 has installed (it computes 20 us first):
/// both commit, nothing aborts, and the result is 1's function of 0's result.
#[test]
fn two_conflicting_transactions_in_one_epoch_commit_in_sequence_order() {
    for code in [511, 0] {
        let s0 = async |c: &mut Coordinator| -> Steps {
            until(c, T0).await;
            let (r, v) = bump(c, 5, 20_000, |v| v + 1).await;
            assert_eq!(v, 5, "coordinator 0 goes first: it reads the loaded value");
            let end = c.endpoint().now_ns();
            c.retire().await;
            assert!(end > T0 + 20_000);
            vec![("add one", r)]
        };
        let s1 = async |c: &mut Coordinator| -> Steps {
            until(c, T0).await;
            let (r, v) = bump(c, 5, 0, |v| v * 10).await;
            assert_eq!(v, 6, "coordinator 1 waited for coordinator 0's write");
            assert!(
                c.endpoint().now_ns() > T0 + 20_000,
                "it waited for the other's think time"
            );
            let mut tx = c.begin(TxKind::ReadOnly);
            let after = value(tx.read(T, 5).await.unwrap().unwrap());
            tx.commit().await.unwrap();
            c.retire().await;
            assert_eq!(after, 60, "(5 + 1) * 10: 0's function, then 1's");
            vec![("times ten", r)]
        };
        let (a, b, h) = script(Protocol::Calvin, code, s0, s1);
        assert_eq!(a, [("add one", Ok(()))], "hybrid {code}");
        assert_eq!(b, [("times ten", Ok(()))], "hybrid {code}");
        assert!(h.iter().all(|t| t.status == Status::Committed));
        assert_eq!(
            read_version(&h, 1, 5),
            committed_writer_version(&h, 0, 5),
            "hybrid {code}: 1 read what 0 installed"
        );
        assert!(serializable(&h), "hybrid {code}");
    }
}

/// Read-only transactions of one epoch share their keys: neither waits for the other.
#[test]
fn readers_of_one_key_do_not_wait_for_each_other() {
    let reader = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let mut tx = c.begin(TxKind::ReadOnly);
        let r = res(tx.fetch(&[Access::read(T, 3)]).await);
        tx.endpoint().sleep(50_000).await;
        let r2 = res(tx.commit().await);
        let took = c.endpoint().now_ns() - T0;
        c.retire().await;
        assert!(took < 60_000, "{took} ns: a reader waited for the other");
        vec![("read", r), ("commit", r2)]
    };
    let (a, b, h) = script(Protocol::Calvin, 511, reader, reader);
    assert_eq!(a, [("read", Ok(())), ("commit", Ok(()))]);
    assert_eq!(b, a);
    assert!(serializable(&h));
}

/// OLLP: a transaction that reads key 1 and then, learning it from the value, key 2 gives up
/// its place and takes the next epoch, where key 1 is validated. Alone, it commits. With a
/// writer of key 1 that joins meanwhile, and so shares that next epoch, ordered first there
/// (coordinator 0): the stale prediction aborts (`validation`). Ordered after it (the writer
/// coordinator 1), the writer waits instead, and both commit.
#[test]
fn a_key_learned_late_moves_the_transaction_to_a_later_epoch() {
    use dtxn_txn::AbortReason;
    let late = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let mut tx = c.begin(TxKind::ReadWrite);
        let a = res(tx.fetch(&[Access::read(T, 1)]).await);
        tx.endpoint().sleep(30_000).await;
        let b = res(tx.fetch(&[Access::update(T, 2)]).await);
        let r = if b.is_ok() {
            match tx.update(T, 2, &9u64.to_le_bytes()).await {
                Ok(()) => res(tx.commit().await),
                Err(e) => Err(e.reason),
            }
        } else {
            b
        };
        c.retire().await;
        vec![("read 1", a), ("then 2, commit", r)]
    };
    // Alone.
    let idle = async |c: &mut Coordinator| -> Steps {
        c.retire().await;
        vec![]
    };
    let (a, _, h) = script(Protocol::Calvin, 511, late, idle);
    assert_eq!(a, [("read 1", Ok(())), ("then 2, commit", Ok(()))]);
    assert!(serializable(&h));
    // With a writer of key 1 in between.
    let writer = async |c: &mut Coordinator| -> Steps {
        until(c, T0 + 10_000).await;
        let (r, _) = bump(c, 1, 0, |v| v + 100).await;
        c.retire().await;
        vec![("write 1", r)]
    };
    // The writer is coordinator 0: in the epoch both share, it goes first.
    let (b, a, h) = script(Protocol::Calvin, 511, writer, late);
    assert_eq!(b, [("write 1", Ok(()))]);
    assert_eq!(
        a,
        [
            ("read 1", Ok(())),
            ("then 2, commit", Err(AbortReason::Validation))
        ]
    );
    assert!(serializable(&h));
    let (a, b, h) = script(Protocol::Calvin, 511, late, writer);
    assert_eq!(a, [("read 1", Ok(())), ("then 2, commit", Ok(()))]);
    assert_eq!(b, [("write 1", Ok(()))]);
    assert!(serializable(&h));
}

/// A coordinator that left (`retire`) and runs a transaction again joins again: its epoch word
/// goes RETIRED -> JOINING -> past the newest epoch, so it never enters an epoch the others
/// closed while it was away, and its done word (RETIRED while away: done with everything) is
/// reset, or a successor would not wait for it (a lost update, found by this test). Meanwhile
/// the other coordinator keeps incrementing key 7; the returning one increments it too:
/// every increment counts, and the history is serializable.
#[test]
fn a_retired_coordinator_joins_again() {
    fn inc(v: u64) -> u64 {
        v + 1
    }
    let back = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let (a, _) = bump(c, 7, 0, inc).await;
        c.retire().await;
        c.endpoint().sleep(40_000).await;
        let (b, _) = bump(c, 7, 0, inc).await;
        c.retire().await;
        vec![("before", a), ("after", b)]
    };
    let busy = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let mut out = Steps::new();
        for _ in 0..20 {
            out.push(("bump", bump(c, 7, 5_000, inc).await.0));
        }
        let mut tx = c.begin(TxKind::ReadOnly);
        let v = value(tx.read(T, 7).await.unwrap().unwrap());
        tx.commit().await.unwrap();
        c.retire().await;
        assert_eq!(v, 7 + 22, "every increment counted");
        out
    };
    for code in [511, 0] {
        let (a, b, h) = script(Protocol::Calvin, code, back, busy);
        assert_eq!(a, [("before", Ok(())), ("after", Ok(()))], "hybrid {code}");
        assert!(b.iter().all(|s| s.1.is_ok()), "hybrid {code}: {b:?}");
        assert!(serializable(&h), "hybrid {code}");
    }
}

/// Epochs closed by a coordinator that has left stay closed: coordinator 0 runs alone through
/// six epochs (closing each: the closed-epoch word reaches 6) and leaves; then both
/// coordinators join, seeing no member's word, and increment key 9 together. Were they to
/// start again at epoch 1, the closed word would tell each of them, at its second poll, that
/// epochs 1 to 6 were closed already, and coordinator 0 would run ahead into epochs that
/// coordinator 1 had not dispatched yet, reading under 1's install (lost updates: found by
/// `dtxn torture` with harsh delays and a view change that held every coordinator but one
/// back from joining; fails without the fix). Joiners start past the closed word.
#[test]
fn epochs_closed_by_a_coordinator_that_left_stay_closed() {
    fn inc(v: u64) -> u64 {
        v + 1
    }
    const TOGETHER: u64 = T0 + 400_000;
    let ahead = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let mut out = Steps::new();
        for _ in 0..6 {
            out.push(("alone", bump(c, 9, 0, inc).await.0));
        }
        c.retire().await;
        assert!(c.endpoint().now_ns() < TOGETHER, "the solo run ends first");
        until(c, TOGETHER).await;
        for _ in 0..10 {
            out.push(("together", bump(c, 9, 0, inc).await.0));
        }
        c.retire().await;
        out
    };
    let late = async |c: &mut Coordinator| -> Steps {
        until(c, TOGETHER).await;
        let mut out = Steps::new();
        for _ in 0..10 {
            out.push(("together", bump(c, 9, 5_000, inc).await.0));
        }
        let mut tx = c.begin(TxKind::ReadOnly);
        let v = value(tx.read(T, 9).await.unwrap().unwrap());
        tx.commit().await.unwrap();
        c.retire().await;
        assert_eq!(v, 9 + 26, "every increment counted");
        out
    };
    for code in [511, 0] {
        let (a, b, h) = script(Protocol::Calvin, code, ahead, late);
        assert_eq!(a.len(), 16);
        assert!(
            a.iter().chain(&b).all(|s| s.1.is_ok()),
            "hybrid {code}: {a:?} {b:?}"
        );
        assert!(serializable(&h), "hybrid {code}");
    }
}

/// Where coordinator `k`'s CALVIN words are (its epoch word, then its done word; coordinator
/// 0's line holds the closed-epoch word third): [`calvin_words`], from the pool map.
fn words_at(map: &PoolMap, k: u32) -> u64 {
    let (off, len) = map.log_slice(k).unwrap();
    off + len - (64 + 2 * 64 * ((len / 2 - 64) / 128))
}

/// A coordinator leaves only once the closed-epoch word holds every epoch it knows closed:
/// the word is rolled back here under it (as if its last CAS there, detached, were still
/// under way: as RPCs nothing orders it before the leaving), and after `retire` it holds the
/// coordinator's last epoch again. Else a joiner, reading our word RETIRED and the closed word
/// behind, could start below what the late CAS then writes, and pass its barriers unsynchronized.
#[test]
fn a_coordinator_leaves_only_once_the_closed_word_holds_its_epochs() {
    let alone = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let mut out = Steps::new();
        for _ in 0..3 {
            out.push(("bump", bump(c, 4, 0, |v| v + 1).await.0));
        }
        // The closed-epoch word: after the epoch and done words of coordinator 0's area.
        let closed = words_at(c.map(), 0) + 16;
        let ep = c.endpoint();
        let r = ep.read(0, closed, 8);
        ep.post().await.unwrap();
        assert_eq!(ep.word(r, 0), 3, "three epochs, each closed by us alone");
        ep.write(0, closed, &0u64.to_le_bytes());
        ep.post().await.unwrap();
        c.retire().await;
        let ep = c.endpoint();
        let r = ep.read(0, closed, 8);
        ep.post().await.unwrap();
        assert_eq!(ep.word(r, 0), 3, "the closed word holds our epochs again");
        out
    };
    let idle = async |c: &mut Coordinator| -> Steps {
        c.retire().await;
        vec![]
    };
    for code in [511, 0] {
        let (a, _, h) = script(Protocol::Calvin, code, alone, idle);
        assert!(a.iter().all(|s| s.1.is_ok()), "hybrid {code}: {a:?}");
        assert!(serializable(&h), "hybrid {code}");
    }
}

/// A coordinator that joins again never dispatches an epoch it dispatched before: coordinator
/// 1 thinks for 60 ms in epoch 1, so coordinator 0's dispatch of epoch 2 waits out its limit
/// (50 ms) and aborts; coordinator 0 leaves and runs again, and the newest epoch it reads
/// (1, in coordinator 1's word and in the closed word) would have it dispatch epoch 2 a second
/// time. Its old batch of epoch 2, stamped 2 in every line, may then be what another reads
/// (the new batch's WRITE is not ordered before the dispatch's CAS), and its old done word of
/// 2, as an RPC, may land after the new dispatch: either lets a successor run beside its
/// install. It starts past its own last epoch.
#[test]
fn a_coordinator_that_joins_again_never_reuses_its_epochs() {
    const THINK: u64 = 60_000_000;
    let back = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let (first, _) = bump(c, 1, 0, |v| v + 1).await;
        let (timed_out, _) = bump(c, 2, 0, |v| v + 1).await;
        c.retire().await;
        let epoch_word = words_at(c.map(), 0);
        let mut tx = c.begin(TxKind::ReadWrite);
        let again = res(tx.fetch(&[Access::update(T, 3)]).await);
        let ep = tx.endpoint();
        let r = ep.read(0, epoch_word, 8);
        ep.post().await.unwrap();
        assert_eq!(ep.word(r, 0), 3, "the epoch after its last");
        let w = res(tx.update(T, 3, &33u64.to_le_bytes()).await);
        let cm = res(tx.commit().await);
        c.retire().await;
        vec![
            ("epoch 1", first),
            ("epoch 2", timed_out),
            ("again", again),
            ("write", w),
            ("commit", cm),
        ]
    };
    let slow = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let (r, _) = bump(c, 9, THINK, |v| v + 1).await;
        c.retire().await;
        vec![("slow", r)]
    };
    for code in [511, 0] {
        let (a, b, h) = script(Protocol::Calvin, code, back, slow);
        use dtxn_txn::AbortReason::LockConflict;
        assert_eq!(
            a,
            [
                ("epoch 1", Ok(())),
                ("epoch 2", Err(LockConflict)),
                ("again", Ok(())),
                ("write", Ok(())),
                ("commit", Ok(()))
            ],
            "hybrid {code}"
        );
        assert_eq!(b, [("slow", Ok(()))], "hybrid {code}");
        assert!(serializable(&h), "hybrid {code}");
    }
}

/// Hermitage's anomalies, as CALVIN can be asked them. Its first fetch declares the keys and
/// waits for the epoch to close, so the scripts of `hermitage.rs` (a read, then the other
/// role's step, then a write) cannot interleave under it; here both roles start together in
/// one epoch, for both epoch orders (the roles swapped), and the outcome must be a serial one.
fn both_orders(
    name: &str,
    first: impl AsyncFn(&mut Coordinator) -> Steps + Clone + 'static,
    second: impl AsyncFn(&mut Coordinator) -> Steps + Clone + 'static,
) {
    for code in [511, 0] {
        for swap in [false, true] {
            let (a, b, h) = if swap {
                let (b, a, h) = script(Protocol::Calvin, code, second.clone(), first.clone());
                (a, b, h)
            } else {
                script(Protocol::Calvin, code, first.clone(), second.clone())
            };
            assert!(
                a.iter().chain(&b).all(|(_, r)| r.is_ok()),
                "{name}, hybrid {code}, swapped {swap}: {a:?} {b:?}"
            );
            assert!(
                serializable(&h),
                "{name}, hybrid {code}, swapped {swap}: not serializable"
            );
        }
    }
}

/// G2-item (write skew): each reads keys 1 and 2 and writes one of them with their sum; in
/// any serial order the second sees the first's write, so the two sums differ.
#[test]
fn hermitage_write_skew_is_serial_under_calvin() {
    let sums = Rc::new(RefCell::new(Vec::new()));
    let role = |write: u64, sums: Rc<RefCell<Vec<u64>>>| {
        async move |c: &mut Coordinator| -> Steps {
            until(c, T0).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let keys = [Access::update(T, 1), Access::update(T, 2)];
            let r = res(tx.fetch(&keys).await);
            let sum = value(tx.get(T, 1).unwrap()) + value(tx.get(T, 2).unwrap());
            sums.borrow_mut().push(sum);
            let w = res(tx.update(T, write, &sum.to_le_bytes()).await);
            let cm = res(tx.commit().await);
            c.retire().await;
            vec![("read", r), ("write", w), ("commit", cm)]
        }
    };
    both_orders("G2-item", role(1, sums.clone()), role(2, sums.clone()));
    // Per run: the first sums the loaded 1 + 2 = 3, the second sees the first's 3 in place
    // of its key: 3 + 2 or 1 + 3.
    for run in sums.borrow().chunks(2) {
        let mut run = run.to_vec();
        run.sort_unstable();
        assert!(run == [3, 4] || run == [3, 5], "{run:?}");
    }
}

/// G-single (read skew) and G1a (aborted reads): a reader of keys 3 and 4 beside a writer
/// that moves 1 from 3 to 4 and one that writes 3 then rolls back: the reader sees the sum 7
/// and never the rolled-back value.
#[test]
fn hermitage_read_skew_and_aborted_reads_are_serial_under_calvin() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        async move |c: &mut Coordinator| -> Steps {
            until(c, T0).await;
            let mut tx = c.begin(TxKind::ReadOnly);
            let r = res(tx.fetch(&[Access::read(T, 3), Access::read(T, 4)]).await);
            let (x, y) = (value(tx.get(T, 3).unwrap()), value(tx.get(T, 4).unwrap()));
            seen.borrow_mut().push((x, y));
            let cm = res(tx.commit().await);
            c.retire().await;
            vec![("read", r), ("commit", cm)]
        }
    };
    let mover = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let mut tx = c.begin(TxKind::ReadWrite);
        let r = res(tx
            .fetch(&[Access::update(T, 3), Access::update(T, 4)])
            .await);
        let (x, y) = (value(tx.get(T, 3).unwrap()), value(tx.get(T, 4).unwrap()));
        let w1 = res(tx.update(T, 3, &(x - 1).to_le_bytes()).await);
        let w2 = res(tx.update(T, 4, &(y + 1).to_le_bytes()).await);
        let cm = res(tx.commit().await);
        c.retire().await;
        vec![
            ("fetch", r),
            ("write 3", w1),
            ("write 4", w2),
            ("commit", cm),
        ]
    };
    both_orders("G-single", reader.clone(), mover);
    let aborter = async |c: &mut Coordinator| -> Steps {
        until(c, T0).await;
        let mut tx = c.begin(TxKind::ReadWrite);
        let r = res(tx.fetch(&[Access::update(T, 3)]).await);
        let w = res(tx.update(T, 3, &999u64.to_le_bytes()).await);
        tx.rollback().await;
        c.retire().await;
        vec![("fetch", r), ("write", w)]
    };
    both_orders("G1a", reader, aborter);
    let seen = seen.borrow();
    assert_eq!(seen.len(), 8, "4 runs of each scenario");
    for &(x, y) in seen.iter() {
        assert_eq!(x + y, 7, "read skew: {x} + {y}");
        assert_ne!(x, 999, "an aborted write was read");
    }
}

// ---------------------------------------------------------------------------------------
// A crashed coordinator, recovered online under leases (issue #23).
// ---------------------------------------------------------------------------------------

use dtxn_fabric::sim::{ComputeCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use dtxn_txn::membership::{self, LeaseConfig, RecoveryEvent, Service};
use dtxn_txn::recovery::Recovered;
use dtxn_txn::{AbortReason, Recorder, TxnConfig};
use std::cell::Cell;

/// Keys of the crash tests' table, each loaded with [`START`].
const KEYS: u64 = 8;
const START: u64 = 1000;
/// The doomed coordinator's transaction moves a unit from key 0 to every other key; the
/// survivor's move units between keys 0..3: they conflict.
const SHARED: u64 = 4;
/// Commits the survivor must reach.
const SURVIVOR_COMMITS: u32 = 30;
/// The survivor's attempts at most (a bound, so that a survivor stalled for good fails its
/// test's assertions rather than looping forever; a recovered run needs far fewer).
const MAX_ATTEMPTS: u32 = 400;
/// Without recovery, the survivor's attempts that start this long after the crash are
/// counted: by then the dead coordinator's last epoch is behind everyone.
const STALLED_AFTER_NS: u64 = 100_000;

/// A loaded pool (2 memory nodes, 2 replicas) on the default (hostile) adversary, compute
/// node 0 crashing at `crash_at`.
fn crash_pool(seed: u64, crash_at: Option<u64>) -> (Pool, Plan, SimConfig) {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let plan = Plan::new(&[TableSpec::new(T, "t", 8, 64)], &shape).unwrap();
    let mut cfg = SimConfig::new(seed, 2, plan.region_bytes);
    cfg.faults.compute_crashes = crash_at
        .map(|at_ns| ComputeCrash {
            at_ns,
            compute_node: 0,
        })
        .into_iter()
        .collect();
    let pool = Pool::Sim(SimPool::new(cfg.clone()).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..KEYS {
        l.insert(&pool, k, &START.to_le_bytes()).unwrap();
    }
    (pool, plan, cfg)
}

/// What the doomed coordinator had done when it crashed (virtual ns; 0: not reached).
#[derive(Debug, Default, Clone, Copy)]
struct Marks {
    /// Its transaction's first fetch posted (the dispatch), and returned (scheduled, read).
    dispatch: u64,
    scheduled: u64,
    /// Its commit called (the install posted: no lock to take for updates), and returned.
    install: u64,
    committed: u64,
}

/// The crash's instant, as the doomed coordinator's progress places it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    BeforeDispatch,
    DispatchedNotInstalled,
    MidInstall,
    InstalledBeforeDone,
}

impl Marks {
    fn phase(&self) -> Phase {
        if self.dispatch == 0 {
            Phase::BeforeDispatch
        } else if self.install == 0 {
            Phase::DispatchedNotInstalled
        } else if self.committed == 0 {
            Phase::MidInstall
        } else {
            Phase::InstalledBeforeDone
        }
    }
}

struct Record(Rc<RefCell<Vec<HTxn>>>);

impl Recorder for Record {
    fn record(&mut self, t: &HTxn) {
        self.0.borrow_mut().push(t.clone());
    }
}

/// How a crash run ended.
struct CrashRun {
    marks: Marks,
    /// The survivor's commits, and its attempts that aborted.
    commits: u32,
    aborts: u32,
    /// What the survivor's recovery service did.
    events: Vec<RecoveryEvent>,
    /// Both coordinators' recorded transactions, then recovery's rolled-forward ones that
    /// nobody recorded.
    history: Vec<HTxn>,
    /// Whether the survivor drained (every dead coordinator recovered).
    drained: bool,
}

/// Moves one unit from `a` to `b`.
async fn transfer(c: &mut Coordinator, a: u64, b: u64) -> Result<(), AbortReason> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::update(T, a), Access::update(T, b)])
        .await
        .map_err(|e| e.reason)?;
    let (x, y) = (value(tx.get(T, a).unwrap()), value(tx.get(T, b).unwrap()));
    tx.update(T, a, &(x - 1).to_le_bytes())
        .await
        .map_err(|e| e.reason)?;
    tx.update(T, b, &(y + 1).to_le_bytes())
        .await
        .map_err(|e| e.reason)?;
    tx.commit().await.map_err(|e| e.reason)
}

/// Coordinator 0 (compute node 0, which crashes at `crash_at`) runs a transfer to join the
/// epochs, then its transaction of interest (a unit from key 0 to every other key), 20 us
/// between its fetch and its commit, then more transfers; coordinator 1 (compute node 1) moves units between the keys
/// they share until it has committed [`SURVIVOR_COMMITS`] times, serving its recovery
/// service between transactions (unless `recover` is false: then it makes 60 attempts
/// after the crash and stops). `redo`: the runs' `lock_journal` (CALVIN's redo log).
fn crash_run(
    seed: u64,
    crash_at: Option<u64>,
    redo: bool,
    recover: bool,
) -> (CrashRun, Pool, Plan) {
    let (mut pool, plan, cfg) = crash_pool(seed, crash_at);
    let lease = LeaseConfig::for_fabric(cfg.flight_bound_ns(), 0);
    let txn = Rc::new(TxnConfig {
        protocol: Protocol::Calvin,
        lock_journal: redo,
        ..TxnConfig::default()
    });
    let marks = Rc::new(Cell::new(Marks::default()));
    let history = Rc::new(RefCell::new(Vec::new()));
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    let two = Topology {
        compute_nodes: 2,
        threads: 1,
        coroutines: 1,
    };
    let crash = crash_at.unwrap_or(u64::MAX);
    let r = sim
        .run(two, None, |mut ep: Endpoint| {
            let (txn, marks, history) = (txn.clone(), marks.clone(), history.clone());
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                membership::join(&mut ep, lease, map.control_set())
                    .await
                    .unwrap();
                let me = ep.id().index;
                let mut service = Service::new(Protocol::Calvin, lease, 2, map.clone());
                let mut c = Coordinator::new(ep, map, txn);
                c.set_recorder(Box::new(Record(history)));
                until(&mut c, T0).await;
                if me == 0 {
                    let _ = transfer(&mut c, 2, 3).await;
                    let now = |c: &mut Coordinator| c.endpoint().now_ns();
                    let mut m = Marks {
                        dispatch: now(&mut c),
                        ..Marks::default()
                    };
                    marks.set(m);
                    let mut tx = c.begin(TxKind::ReadWrite);
                    let all: Vec<Access> = (0..KEYS).map(|k| Access::update(T, k)).collect();
                    let r = tx.fetch(&all).await;
                    m.scheduled = tx.endpoint().now_ns();
                    marks.set(m);
                    if r.is_ok() {
                        tx.endpoint().sleep(20_000).await;
                        // One unit from key 0 to each other key: an install of every key,
                        // whose WRITEs leave over a microsecond.
                        for k in 0..KEYS {
                            let v = value(tx.get(T, k).unwrap());
                            let v = if k == 0 { v - (KEYS - 1) } else { v + 1 };
                            tx.update(T, k, &v.to_le_bytes()).await.unwrap();
                        }
                        m.install = tx.endpoint().now_ns();
                        marks.set(m);
                        let r = tx.commit().await;
                        if r.is_ok() {
                            m.committed = c.endpoint().now_ns();
                            marks.set(m);
                        }
                    }
                    for k in 0..20 {
                        let _ = transfer(&mut c, k % SHARED, (k + 1) % SHARED).await;
                    }
                    c.retire().await;
                    service.drain(c.endpoint()).await.unwrap();
                    return (0, 0, Vec::new(), true);
                }
                let (mut commits, mut aborts, mut after) = (0, 0, 0);
                let mut k = 0u64;
                while commits < SURVIVOR_COMMITS && after < 60 && commits + aborts < MAX_ATTEMPTS {
                    if recover {
                        service.tick(c.endpoint()).await.unwrap();
                    }
                    let (a, b) = (k % SHARED, (k + 1 + k / SHARED) % SHARED);
                    k += 1;
                    if a == b {
                        continue;
                    }
                    let started = c.endpoint().now_ns();
                    let r = transfer(&mut c, a, b).await;
                    // Without recovery, only what starts well after the crash counts.
                    let counted = recover || started > crash.saturating_add(STALLED_AFTER_NS);
                    match r {
                        Ok(()) if counted => commits += 1,
                        Ok(()) => {}
                        Err(_) => aborts += 1,
                    }
                    if !recover && started > crash.saturating_add(STALLED_AFTER_NS) {
                        after += 1;
                    }
                }
                c.retire().await;
                let drained = !recover || service.drain(c.endpoint()).await.is_ok();
                (commits, aborts, service.events.clone(), drained)
            }
        })
        .unwrap();
    let (commits, aborts, events, drained) = r.outputs[1].clone().expect("the survivor finished");
    let mut history = history.borrow().clone();
    let mut seen: std::collections::HashSet<u64> = history.iter().map(|t| t.txn).collect();
    for e in &events {
        if let Recovered::RolledForward(t) = &e.outcome {
            if seen.insert(t.txn) {
                history.push(t.clone());
            }
        }
    }
    let run = CrashRun {
        marks: marks.get(),
        commits,
        aborts,
        events,
        history,
        drained,
    };
    (run, pool, plan)
}

/// Where coordinator `k`'s CALVIN words are (its epoch word, then its done word): the top of
/// its log slice on memory node 0, the layout of `protocols/calvin.rs` (an area of a line
/// and two batch buffers of `(len / 2 - 64) / 128` lines each).
fn calvin_words(plan: &Plan, k: u32) -> u64 {
    let len = plan.shape.log_slice_bytes;
    let slice = len.div_ceil(64) * 64;
    let area = 64 + 2 * 64 * ((len / 2 - 64) / 128);
    plan.log_off + u64::from(k) * slice + len - area
}

fn word_at(pool: &Pool, node: u16, at: u64) -> u64 {
    let mut b = [0u8; 8];
    pool.with_local(node, |m| m.read(at, &mut b));
    u64::from_le_bytes(b)
}

/// What the pool holds after a run: per replica, every key's value; and what is wrong.
#[derive(Debug)]
struct PoolState {
    values: Vec<Vec<u64>>,
    locks_left: usize,
    torn: usize,
    pending: usize,
}

impl PoolState {
    /// Money conserved on every replica, the replicas alike, nothing locked, torn or pending.
    fn consistent(&self) -> bool {
        self.values
            .iter()
            .all(|v| v.iter().sum::<u64>() == KEYS * START)
            && self.values.windows(2).all(|w| w[0] == w[1])
            && self.locks_left == 0
            && self.torn == 0
            && self.pending == 0
    }
}

fn pool_state(pool: &Pool, plan: &Plan) -> PoolState {
    let t = plan.table(T).unwrap();
    let codec = t.codec();
    let mut st = PoolState {
        values: Vec::new(),
        locks_left: 0,
        torn: 0,
        pending: 0,
    };
    for &n in &t.replicas {
        let mut vals = vec![u64::MAX; KEYS as usize];
        let buckets = t.bucket_count + t.overflow_buckets;
        let mut b = vec![0u8; t.bucket_bytes as usize];
        for i in 0..buckets {
            let base = t.table_off + 64 + i * t.bucket_bytes;
            pool.with_local(n, |m| m.read(base, &mut b));
            if n == t.primary()
                && i < t.bucket_count
                && word_at(pool, n, t.insert_lock(t.bucket(i))) != 0
            {
                st.locks_left += 1;
            }
            for s in 0..t.slots_per_bucket {
                let mut v = vec![0u8; 8];
                match codec.decode(t.slot_bytes(&b, s), &mut v) {
                    Ok(h) if h.valid && h.key < KEYS => {
                        st.locks_left += usize::from(h.lock != 0);
                        vals[h.key as usize] = value(&v);
                    }
                    Ok(_) => {}
                    Err(_) => st.torn += 1,
                }
            }
        }
        st.values.push(vals);
    }
    let slice = plan.shape.log_slice_bytes.div_ceil(64) * 64;
    for n in 0..plan.shape.memory_nodes {
        for s in 0..plan.shape.log_slices {
            let mut b = vec![0u8; plan.shape.log_slice_bytes as usize];
            pool.with_local(n, |m| m.read(plan.log_off + u64::from(s) * slice, &mut b));
            if let Ok(Some(e)) = dtxn_store::log::LogEntry::decode(&b) {
                st.pending += usize::from(e.status == dtxn_store::log::LogStatus::Pending);
            }
        }
    }
    st
}

/// The instants a sweep crashes compute node 0 at, from a run without the crash (whose
/// course up to any instant is the crash run's: the crash draws nothing before it):
/// before the doomed transaction's dispatch, between its dispatch and its install, every
/// 150 ns across its install's flight, and at and after its commit's return.
fn crash_instants(seed: u64, redo: bool) -> Vec<u64> {
    let (dry, _, _) = crash_run(seed, None, redo, true);
    let m = dry.marks;
    assert!(
        m.committed > 0,
        "seed {seed}: the doomed transfer commits without the crash"
    );
    let mut at = vec![m.dispatch - 3_000, (m.scheduled + m.install) / 2];
    at.extend((0..20).map(|k| m.install + k * 150));
    at.extend([m.committed, m.committed + 300]);
    at
}

/// The doomed coordinator crashes at every phase of its transaction (before its dispatch,
/// between its dispatch and its install, with its install in flight, after its install
/// before its done word landed): the survivor's service recovers it online (rolls its redo
/// log forward when any node holds it whole, publishes its done word, retires it from the
/// epochs) and the survivor commits all its transactions; money is conserved on every
/// replica, the replicas are alike, no lock word is left, no log slice is pending, the
/// dead coordinator's words say RETIRED, and the history (with recovery's rolled-forward
/// transactions) is serializable in real time. Every phase is hit, and at least one crash
/// cut the install after its redo log landed (rolled forward, never recorded by its
/// coordinator).
#[test]
fn a_crashed_coordinator_is_recovered_online_at_every_phase() {
    let mut phases = std::collections::BTreeMap::new();
    let (mut cut_installs, mut done_lost, mut most_aborts) = (0, 0, 0);
    for seed in 1..=2 {
        for at in crash_instants(seed, true) {
            let what = format!("seed {seed}, crash at {at} ns");
            let (run, pool, plan) = crash_run(seed, Some(at), true, true);
            let phase = run.marks.phase();
            *phases.entry(phase).or_insert(0) += 1;
            most_aborts = most_aborts.max(run.aborts);
            assert!(run.drained, "{what}: the survivor's liveness phase failed");
            assert_eq!(run.commits, SURVIVOR_COMMITS, "{what} ({phase:?})");
            let st = pool_state(&pool, &plan);
            assert!(st.consistent(), "{what} ({phase:?}): {st:?}");
            let (epoch, done) = (calvin_words(&plan, 0), calvin_words(&plan, 0) + 8);
            assert_eq!(word_at(&pool, 0, epoch), u64::MAX, "{what}: epoch word");
            assert_eq!(word_at(&pool, 0, done), u64::MAX, "{what}: done word");
            assert!(
                serializable(&run.history),
                "{what} ({phase:?}): not serializable"
            );
            let e = run.events.iter().find(|e| e.coordinator == 0);
            let e = e.unwrap_or_else(|| panic!("{what}: coordinator 0 not recovered"));
            // Cut mid-install (its commit never returned: unrecorded), and finished by
            // recovery from its redo log.
            if phase == Phase::MidInstall && matches!(e.outcome, Recovered::RolledForward(_)) {
                cut_installs += 1;
            }
            // Installed, its done word lost: rolled forward again (the same bytes), harmless.
            if phase == Phase::InstalledBeforeDone
                && matches!(e.outcome, Recovered::RolledForward(_))
            {
                done_lost += 1;
            }
        }
    }
    eprintln!(
        "crashes per phase: {phases:?}; {cut_installs} installs cut and rolled forward, \
         {done_lost} installed with the done word lost; the survivor aborted {most_aborts} \
         times at most"
    );
    assert_eq!(phases.len(), 4, "phases hit: {phases:?}");
    assert!(
        cut_installs > 0,
        "no crash cut an install after its redo log landed"
    );
    assert!(
        done_lost > 0,
        "no crash fell between an install and its done word"
    );
}

/// Negative control: without the recovery service, the survivor stalls for good once the
/// doomed coordinator crashed between its dispatch and its install: every attempt it starts
/// after the crash waits for the dead one's epoch word or done word, gives up, and aborts.
#[test]
fn without_recovery_a_crashed_coordinator_stalls_the_survivor() {
    let seed = 1;
    let (dry, _, _) = crash_run(seed, None, true, true);
    let at = (dry.marks.scheduled + dry.marks.install) / 2;
    let (run, _, _) = crash_run(seed, Some(at), true, false);
    assert_eq!(run.marks.phase(), Phase::DispatchedNotInstalled);
    assert_eq!(run.commits, 0, "the survivor committed after the crash");
    assert!(run.aborts >= 60, "{} aborts", run.aborts);
    // With recovery, the same crash costs the survivor nothing it cannot finish.
    let (run, pool, plan) = crash_run(seed, Some(at), true, true);
    assert_eq!(run.commits, SURVIVOR_COMMITS);
    assert!(pool_state(&pool, &plan).consistent());
}

/// Negative control: without the redo log (the runs' `lock_journal` off: CALVIN's install
/// then logs nothing for updates), the same sweep leaves a transfer half-installed by the
/// crash, which recovery can neither finish nor undo: money is not conserved, or the
/// replicas differ, on some instant.
#[test]
fn without_the_redo_log_a_crash_mid_install_breaks_atomicity() {
    let mut broken = 0;
    for seed in 1..=2 {
        for at in crash_instants(seed, false) {
            let (run, pool, plan) = crash_run(seed, Some(at), false, true);
            assert!(run.drained);
            broken += usize::from(!pool_state(&pool, &plan).consistent());
        }
    }
    eprintln!("{broken} crash instants left a half-installed transfer");
    assert!(broken > 0, "no crash left a half-installed transfer");
}

/// A coordinator whose lease expires mid-transaction (a zombie: it stalls between its
/// dispatch and its install) is recovered by the survivor: its transfer was never installed,
/// it leaves the epochs, and the survivor, which waited for its done word, goes on. When the
/// zombie resumes, its commit is refused (`LeaseExpired`), it is fenced, and nothing of it
/// lands after its recovery: its words stay RETIRED, the money is conserved, and its
/// transfer is in neither the pool nor the history.
#[test]
fn a_zombie_coordinator_publishes_nothing_after_its_recovery() {
    for seed in 1..=3 {
        let (mut pool, plan, cfg) = crash_pool(seed, None);
        let lease = LeaseConfig::for_fabric(cfg.flight_bound_ns(), 0);
        let txn = Rc::new(TxnConfig {
            protocol: Protocol::Calvin,
            lock_journal: true,
            ..TxnConfig::default()
        });
        let history = Rc::new(RefCell::new(Vec::new()));
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        let two = Topology {
            compute_nodes: 2,
            threads: 1,
            coroutines: 1,
        };
        let r = sim
            .run(two, None, |mut ep: Endpoint| {
                let (txn, history) = (txn.clone(), history.clone());
                async move {
                    let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                    membership::join(&mut ep, lease, map.control_set())
                        .await
                        .unwrap();
                    let me = ep.id().index;
                    let mut service = Service::new(Protocol::Calvin, lease, 2, map.clone());
                    let mut c = Coordinator::new(ep, map, txn);
                    c.set_recorder(Box::new(Record(history)));
                    until(&mut c, T0).await;
                    if me == 0 {
                        transfer(&mut c, 2, 3).await.unwrap();
                        let mut tx = c.begin(TxKind::ReadWrite);
                        tx.fetch(&[Access::update(T, 0), Access::update(T, 1)])
                            .await
                            .unwrap();
                        let (x, y) = (value(tx.get(T, 0).unwrap()), value(tx.get(T, 1).unwrap()));
                        tx.update(T, 0, &(x - 500).to_le_bytes()).await.unwrap();
                        tx.update(T, 1, &(y + 500).to_le_bytes()).await.unwrap();
                        // A stall three leases long: recovered meanwhile.
                        tx.endpoint().sleep(3 * lease.lease_ns).await;
                        let refused = res(tx.commit().await);
                        let fenced = c.endpoint().fenced();
                        c.retire().await;
                        return Err((refused, fenced));
                    }
                    let mut commits = 0;
                    let mut k = 0u64;
                    while commits < SURVIVOR_COMMITS && (k as u32) < MAX_ATTEMPTS {
                        service.tick(c.endpoint()).await.unwrap();
                        let (a, b) = (k % SHARED, (k + 1) % SHARED);
                        k += 1;
                        commits += u32::from(transfer(&mut c, a, b).await.is_ok());
                    }
                    assert_eq!(commits, SURVIVOR_COMMITS, "the survivor stalled");
                    c.retire().await;
                    service.drain(c.endpoint()).await.unwrap();
                    Ok(service.events.clone())
                }
            })
            .unwrap();
        let Some(Err((refused, fenced))) = r.outputs[0].clone() else {
            panic!("seed {seed}: the zombie did not finish");
        };
        assert_eq!(refused, Err(AbortReason::LeaseExpired), "seed {seed}");
        assert!(fenced, "seed {seed}");
        let Some(Ok(events)) = r.outputs[1].clone() else {
            panic!("seed {seed}: the survivor did not finish");
        };
        assert_eq!(events.len(), 1, "seed {seed}: {events:?}");
        assert_eq!(events[0].coordinator, 0);
        assert_eq!(events[0].outcome, Recovered::Nothing, "seed {seed}");
        let st = pool_state(&pool, &plan);
        assert!(st.consistent(), "seed {seed}: {st:?}");
        assert!(
            st.values[0]
                .iter()
                .all(|&v| v > START - 100 && v < START + 100),
            "seed {seed}: the zombie's transfer of 500 landed: {st:?}"
        );
        let w = calvin_words(&plan, 0);
        assert_eq!(word_at(&pool, 0, w), u64::MAX, "seed {seed}");
        assert_eq!(word_at(&pool, 0, w + 8), u64::MAX, "seed {seed}");
        let h = history.borrow();
        assert_eq!(
            h.iter().filter(|t| t.session == 0).count(),
            1,
            "seed {seed}"
        );
        assert!(serializable(&h), "seed {seed}");
    }
}

/// The redo entry of a transaction that ended is never replayed. Coordinator 0 moves a unit
/// from key 0 to key 1, then coordinator 1 (after it in the epoch order) one from key 1 to
/// key 2; then coordinator 0's state is made that of one that crashed right after its done
/// word landed, its entry's closing WRITE lost: the entry pending, its epoch word at the
/// entry's epoch, its done word there too. Recovery leaves the records alone (coordinator
/// 1's commit stands) and retires it. What the words protect: with the done word short of
/// the entry's epoch (as when the crash cut the done word, when nobody may have gone past
/// it), the same entry is replayed, here over coordinator 1's commit. The entry's status
/// does not decide: closed, and not over by the words, it is replayed all the same (a stale
/// close posted as an RPC may land on a newer entry).
#[test]
fn a_redo_entry_is_replayed_exactly_when_the_epoch_words_say_its_transaction_is_unfinished() {
    // (done word relative to the entry's epoch, status, replayed)
    let cases = [
        (0i64, dtxn_store::log::LogStatus::Pending, false),
        (-1, dtxn_store::log::LogStatus::Pending, true),
        (-1, dtxn_store::log::LogStatus::Committed, true),
        (0, dtxn_store::log::LogStatus::Committed, false),
    ];
    for (done_off, status, replayed) in cases {
        let what = format!("done {done_off:+}, {status:?}");
        let (mut pool, plan, _) = crash_pool(1, None);
        let cfg = Rc::new(TxnConfig {
            protocol: Protocol::Calvin,
            lock_journal: true,
            ..TxnConfig::default()
        });
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        let two = Topology {
            compute_nodes: 1,
            threads: 1,
            coroutines: 2,
        };
        sim.run(two, None, |mut ep: Endpoint| {
            let cfg = cfg.clone();
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let me = ep.id().index;
                let mut c = Coordinator::new(ep, map, cfg);
                until(&mut c, T0 + u64::from(me) * 2_000).await;
                let (a, b) = if me == 0 { (0, 1) } else { (1, 2) };
                transfer(&mut c, a, b).await.unwrap();
                c.endpoint().sleep(50_000).await;
                c.retire().await;
            }
        })
        .unwrap();
        // Coordinator 0's entry and words, as a crash after its done word would leave them.
        let slice = plan.shape.log_slice_bytes as usize;
        let mut b = vec![0u8; slice];
        pool.with_local(0, |m| m.read(plan.log_off, &mut b));
        let e = dtxn_store::log::LogEntry::decode(&b).unwrap().unwrap();
        assert!(e.tag > 0, "{what}: a redo entry carries its epoch");
        for n in 0..2 {
            pool.with_local(n, |m| {
                m.write(plan.log_off + 8, &(status as u64).to_le_bytes())
            });
        }
        let w = calvin_words(&plan, 0);
        let done = e.tag.checked_add_signed(done_off).unwrap();
        pool.with_local(0, |m| m.write(w, &e.tag.to_le_bytes()));
        pool.with_local(0, |m| m.write(w + 8, &done.to_le_bytes()));
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        let r = sim
            .run(two, None, |mut ep: Endpoint| async move {
                if ep.id().index != 1 {
                    return None;
                }
                let map = PoolMap::bootstrap(&mut ep).await.unwrap();
                let r = dtxn_txn::recovery::recover_all(&mut ep, &map, Protocol::Calvin, &[0]);
                Some(r.await.unwrap())
            })
            .unwrap();
        let outcome = r.outputs[1].clone().flatten().unwrap()[0].0.clone();
        let st = pool_state(&pool, &plan);
        assert_eq!(
            matches!(outcome, Recovered::RolledForward(_)),
            replayed,
            "{what}: {outcome:?}"
        );
        let key1 = if replayed { START + 1 } else { START };
        for v in &st.values {
            assert_eq!(v[1], key1, "{what}: key 1 {st:?}");
        }
        assert_eq!(word_at(&pool, 0, w), u64::MAX, "{what}: retired");
        assert_eq!(word_at(&pool, 0, w + 8), u64::MAX, "{what}: done");
    }
}
