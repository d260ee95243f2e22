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
