//! RCC's two-phase locking, scripted: two coordinators on the simulator (no adversary, the
//! `ideal` profile) whose steps are ordered in virtual time. Read locks are shared; NO_WAIT
//! aborts on a conflict; WAIT_DIE's older transaction waits for the younger holder, and the
//! younger one dies; a retried transaction keeps its age.

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
    script(protocol, code, older, younger)
}

/// [`crossing`] with the roles swapped: coordinator 1 is the older. (Ages are the
/// transactions' timestamps, not the coordinators' numbers.)
fn crossing_swapped(protocol: Protocol, code: u64) -> (Steps, Steps) {
    let (young, old) = script(protocol, code, younger, older);
    (old, young)
}

/// [`crossing`]'s older transaction.
async fn older(c: &mut Coordinator) -> Steps {
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
}

/// [`crossing`]'s younger transaction.
async fn younger(c: &mut Coordinator) -> Steps {
    c.endpoint().sleep(5_000).await;
    let mut tx = c.begin(TxKind::ReadWrite);
    let first = res(tx.fetch(&[Access::update(T, 2)]).await);
    tx.endpoint().sleep(25_000).await;
    let second = res(tx.fetch(&[Access::update(T, 1)]).await);
    if second.is_ok() {
        tx.rollback().await;
    }
    vec![("key 2", first), ("key 1", second)]
}

#[test]
fn wait_die_lets_the_older_wait_and_the_younger_die() {
    for (code, swapped) in [(511, false), (0, false), (28, false), (511, true)] {
        let (old, young) = if swapped {
            crossing_swapped(Protocol::WaitDie, code)
        } else {
            crossing(Protocol::WaitDie, code)
        };
        // The older waits for key 2 (it never aborts); the younger, asking for the older's
        // key 1, dies, which frees key 2 for the older.
        assert_eq!(
            old,
            [("key 1", Ok(())), ("key 2", Ok(())), ("commit", Ok(()))],
            "hybrid {code}, swapped {swapped}"
        );
        assert_eq!(
            young,
            [("key 2", Ok(())), ("key 1", Err(AbortReason::LockConflict))],
            "hybrid {code}, swapped {swapped}"
        );
    }
}

/// Coordinator 0's transaction dies on key 1, held by 1's older transaction X, and is
/// begun again (with [`Coordinator::retry_next`] when `retry`) once 1's younger transaction Y
/// holds key 1; Y commits after a while.
fn retried_after_dying(retry: bool) -> (Steps, Steps) {
    script(
        Protocol::WaitDie,
        0,
        async move |c: &mut Coordinator| {
            c.endpoint().sleep(5_000).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let first = res(tx.fetch(&[Access::update(T, 1)]).await);
            if first.is_ok() {
                tx.rollback().await;
            } else {
                drop(tx);
            }
            c.endpoint().sleep(40_000).await;
            if retry {
                c.retry_next();
            }
            let mut tx = c.begin(TxKind::ReadWrite);
            let again = res(tx.fetch(&[Access::update(T, 1)]).await);
            let commit = if again.is_ok() {
                let _ = tx.update(T, 1, &8u64.to_le_bytes()).await;
                res(tx.commit().await)
            } else {
                Err(AbortReason::LockConflict)
            };
            vec![("first", first), ("again", again), ("commit", commit)]
        },
        async |c: &mut Coordinator| {
            let mut steps = vec![];
            for (name, hold) in [("X", 30_000), ("Y", 60_000)] {
                let mut tx = c.begin(TxKind::ReadWrite);
                steps.push((name, res(tx.fetch(&[Access::update(T, 1)]).await)));
                tx.endpoint().sleep(hold).await;
                let _ = tx.update(T, 1, &7u64.to_le_bytes()).await;
                steps.push(("commit", res(tx.commit().await)));
                c.endpoint().sleep(10_000).await;
            }
            steps
        },
    )
}

#[test]
fn wait_die_a_retry_keeps_its_timestamp_and_waits_where_a_new_transaction_dies() {
    let (retried, other) = retried_after_dying(true);
    // Younger than X, it died; as a retry it is older than Y (begun after its first
    // attempt), so it waits for Y and commits.
    assert_eq!(
        retried,
        [
            ("first", Err(AbortReason::LockConflict)),
            ("again", Ok(())),
            ("commit", Ok(()))
        ]
    );
    let all_commit = [
        ("X", Ok(())),
        ("commit", Ok(())),
        ("Y", Ok(())),
        ("commit", Ok(())),
    ];
    assert_eq!(other, all_commit);
    // Begun as a new transaction it is younger than Y, and dies again.
    let (new, other) = retried_after_dying(false);
    assert_eq!(
        new,
        [
            ("first", Err(AbortReason::LockConflict)),
            ("again", Err(AbortReason::LockConflict)),
            ("commit", Err(AbortReason::LockConflict))
        ]
    );
    assert_eq!(other, all_commit);
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

/// Coordinators holding leases of `LEASE` (their read shares last half of it): coordinator
/// 0 takes a read share of key 1 and a lock on key 2, then stalls past its share's expiry
/// (a descheduled thread; were it dead, nobody could give a count's share back for it);
/// coordinator 1 tries to write key 1 before that expiry and after it.
fn stalled_reader(protocol: Protocol, code: u64, leases: bool) -> (Steps, Steps) {
    const LEASE: u64 = 200_000;
    let hold = move |c: &mut Coordinator| {
        if leases {
            let index = c.endpoint().id().index;
            c.endpoint().hold_lease(dtxn_fabric::Lease {
                nodes: dtxn_fabric::NodeSet::single(0),
                addr: dtxn_store::layout::LEASE_OFF + 8 * u64::from(index),
                lease_ns: LEASE,
                guard_ns: 20_000,
                incarnation: 1,
            });
        }
    };
    script(
        protocol,
        code,
        async move |c: &mut Coordinator| {
            hold(c);
            let mut tx = c.begin(TxKind::ReadWrite);
            let read = res(tx.read(T, 1).await);
            let lock = res(tx.fetch(&[Access::update(T, 2)]).await);
            let _ = tx.update(T, 2, &5u64.to_le_bytes()).await;
            // Past the share's expiry, not past the lease's guard (it stays unfenced).
            tx.endpoint().sleep(3 * LEASE / 4).await;
            vec![
                ("read", read),
                ("lock", lock),
                ("commit", res(tx.commit().await)),
            ]
        },
        async move |c: &mut Coordinator| {
            hold(c);
            c.endpoint().sleep(10_000).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let early = res(tx.fetch(&[Access::update(T, 1)]).await);
            if early.is_ok() {
                tx.rollback().await;
            }
            // Past the share's expiry (half the lease after it was taken).
            c.endpoint().sleep(LEASE / 2).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let late = res(tx.fetch(&[Access::update(T, 1)]).await);
            let commit = match late {
                Ok(()) => {
                    let _ = tx.update(T, 1, &7u64.to_le_bytes()).await;
                    res(tx.commit().await)
                }
                Err(a) => Err(a),
            };
            vec![("write", early), ("write after", late), ("commit", commit)]
        },
    )
}

#[test]
fn under_leases_a_read_share_expires_and_its_stalled_holder_cannot_commit() {
    for p in [Protocol::NoWait, Protocol::WaitDie] {
        for code in [511, 0, 28] {
            let what = format!("{} hybrid {code}", p.name());
            let (reader, writer) = stalled_reader(p, code, true);
            assert_eq!(
                writer,
                [
                    // The share is good: a writer meets it.
                    ("write", Err(AbortReason::LockConflict)),
                    // Its expiry has come: void, the word is the writer's.
                    ("write after", Ok(())),
                    ("commit", Ok(())),
                ],
                "{what}"
            );
            // The reader finds at validation that it may no longer rely on its share (key 1
            // was written since it read it): it aborts.
            assert_eq!(
                reader,
                [
                    ("read", Ok(())),
                    ("lock", Ok(())),
                    ("commit", Err(AbortReason::Validation))
                ],
                "{what}"
            );
        }
    }
}

#[test]
fn without_leases_a_read_share_never_expires() {
    // The control: the same script with no lease held. The stalled reader's share blocks the
    // writer for as long as it stalls (were it dead, for ever), and its commit goes through.
    let (reader, writer) = stalled_reader(Protocol::NoWait, 511, false);
    assert_eq!(writer[1], ("write after", Err(AbortReason::LockConflict)));
    assert_eq!(reader[2], ("commit", Ok(())));
}

#[test]
fn a_read_share_given_back_after_its_expiry_is_left_to_expire() {
    // Coordinator 0's share of key 1 expires while it stalls; coordinator 1 then takes a share
    // of the word, which starts a new count, and holds it. Coordinator 0's abort must not give
    // its void share back: a decrement would take coordinator 1's share from the count, and
    // coordinator 0's own next write of key 1 would then find the word free.
    const LEASE: u64 = 200_000;
    let hold = |c: &mut Coordinator| {
        let index = c.endpoint().id().index;
        c.endpoint().hold_lease(dtxn_fabric::Lease {
            nodes: dtxn_fabric::NodeSet::single(0),
            addr: dtxn_store::layout::LEASE_OFF + 8 * u64::from(index),
            lease_ns: LEASE,
            guard_ns: 20_000,
            incarnation: 1,
        });
    };
    for p in [Protocol::NoWait, Protocol::WaitDie] {
        for code in [511, 0, 28] {
            let (stalled, other) = script(
                p,
                code,
                async move |c: &mut Coordinator| {
                    hold(c);
                    let mut tx = c.begin(TxKind::ReadOnly);
                    let read = res(tx.read(T, 1).await);
                    tx.endpoint().sleep(3 * LEASE / 4).await;
                    let commit = res(tx.commit().await);
                    let mut tx = c.begin(TxKind::ReadWrite);
                    let write = res(tx.fetch(&[Access::update(T, 1)]).await);
                    if write.is_ok() {
                        tx.rollback().await;
                    }
                    vec![("read", read), ("commit", commit), ("write", write)]
                },
                async move |c: &mut Coordinator| {
                    hold(c);
                    c.endpoint().sleep(LEASE / 2 + 10_000).await;
                    let mut tx = c.begin(TxKind::ReadOnly);
                    let read = res(tx.read(T, 1).await);
                    tx.endpoint().sleep(LEASE / 4).await;
                    vec![("read", read), ("commit", res(tx.commit().await))]
                },
            );
            let what = format!("{} hybrid {code}", p.name());
            assert_eq!(
                stalled,
                [
                    ("read", Ok(())),
                    ("commit", Err(AbortReason::Validation)),
                    ("write", Err(AbortReason::LockConflict)),
                ],
                "{what}"
            );
            assert_eq!(other, [("read", Ok(())), ("commit", Ok(()))], "{what}");
        }
    }
}
