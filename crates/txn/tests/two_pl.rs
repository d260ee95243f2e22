//! RCC's two-phase locking, scripted: two coordinators on the simulator (no adversary, the
//! `ideal` profile) whose steps are ordered in virtual time. Read locks are shared; NO_WAIT
//! aborts on a conflict; WAIT_DIE's older transaction waits for the younger holder, and the
//! younger one dies.

use dtxn_txn::TxKind;
use dtxn_txn::{AbortReason, Access, Coordinator, Protocol};

mod scripted;
use scripted::{res, Steps, T};

/// [`scripted::script`], without the history.
fn script<F0, F1>(protocol: Protocol, code: u64, s0: F0, s1: F1) -> (Steps, Steps)
where
    F0: AsyncFn(&mut Coordinator) -> Steps + 'static,
    F1: AsyncFn(&mut Coordinator) -> Steps + 'static,
{
    let (a, b, _) = scripted::script(protocol, code, s0, s1);
    (a, b)
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
