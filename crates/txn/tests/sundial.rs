//! RCC's SUNDIAL, scripted: two coordinators on the simulator (no adversary, the `ideal`
//! profile) whose steps are ordered in virtual time, their histories checked. A lease renewal
//! racing a writer's freeze on one record never lets both hold; a write committed after a
//! reader's lease does not abort the reader; an insert of a key a reader saw absent is ordered
//! after the reader, even when it commits after the reader validated.

use dtxn_check::{check, Isolation, Options, Status, Txn as HTxn};
use dtxn_txn::TxKind;
use dtxn_txn::{AbortReason, Access, Coordinator, Protocol};

mod scripted;
use scripted::{res, script, Steps, T};

/// When the scripts' transactions start (virtual ns): after the bootstrap and any set-up.
const T0: u64 = 400_000;

/// Sleeps (virtual time) until `t`.
async fn until(c: &mut Coordinator, t: u64) {
    let now = c.endpoint().now_ns();
    if t > now {
        c.endpoint().sleep(t - now).await;
    }
}

/// Writes `key` `times` times, one transaction each (its version then is `times` under
/// SUNDIAL: each write's timestamp is one past the lease it replaces).
async fn write_times(c: &mut Coordinator, key: u64, times: u64) {
    for v in 0..times {
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.fetch(&[Access::update(T, key)]).await.unwrap();
        tx.update(T, key, &v.to_le_bytes()).await.unwrap();
        tx.commit().await.unwrap();
    }
}

/// A read-write transaction updating `key`.
async fn update(c: &mut Coordinator, key: u64) -> Result<(), AbortReason> {
    let mut tx = c.begin(TxKind::ReadWrite);
    res(tx.fetch(&[Access::update(T, key)]).await)?;
    res(tx.update(T, key, &7u64.to_le_bytes()).await)?;
    res(tx.commit().await)
}

fn serializable(h: &[HTxn]) -> bool {
    let opts = Options {
        isolation: Isolation::Serializable,
        real_time: false,
    };
    check(h, opts).unwrap().ok()
}

/// The committed transaction that read `key` together with key 2, and the version it read.
fn reader_of(h: &[HTxn], key: u64) -> Option<u64> {
    h.iter()
        .filter(|t| t.status == Status::Committed && t.writes.is_empty())
        .filter(|t| t.reads.iter().any(|r| r.key == 2))
        .find_map(|t| t.reads.iter().find(|r| r.key == key).map(|r| r.version))
}

/// The version of `key` the last committed writer of it installed.
fn written(h: &[HTxn], key: u64) -> Option<u64> {
    h.iter()
        .filter(|t| t.status == Status::Committed)
        .flat_map(|t| t.writes.iter())
        .filter(|w| w.key == key)
        .map(|w| w.version)
        .max()
}

/// Coordinator 0 writes key 2 three times (version 3), then reads keys 1 (version 0, lease
/// [0, 0]) and 2: its commit timestamp is 3, so it must renew key 1's lease to 3. Coordinator
/// 1 updates key 1 from 6 us before the reader begins (`delay` 0) to 6 us after (12,000), its
/// freeze racing the renewal.
fn race(code: u64, delay: u64) -> (Steps, Steps, Vec<HTxn>) {
    script(
        Protocol::Sundial,
        code,
        async |c: &mut Coordinator| {
            write_times(c, 2, 3).await;
            until(c, T0).await;
            let mut tx = c.begin(TxKind::ReadOnly);
            let read = res(tx.fetch(&[Access::read(T, 1), Access::read(T, 2)]).await);
            vec![("read", read), ("commit", res(tx.commit().await))]
        },
        async move |c: &mut Coordinator| {
            until(c, T0 - 6_000 + delay).await;
            vec![("write", update(c, 1).await)]
        },
    )
}

/// RCC's TOCTOU race, closed: whatever the timing of a reader's renewal of key 1 and a
/// writer's lock and freeze of it, never do both hold with the writer inside the reader's
/// lease. Either the freeze comes first and the renewal fails (the reader aborts), or the
/// renewal comes first and the writer's freeze, finding the lease extended, commits past it.
#[test]
fn a_renewal_and_a_writers_freeze_never_both_hold() {
    for code in [511, 0, 21] {
        let (mut reader_lost, mut writer_moved) = (0, 0);
        for delay in (0..12_000).step_by(200) {
            let (r, w, h) = race(code, delay);
            let what = format!("hybrid {code}, delay {delay}: {r:?} {w:?}");
            assert!(serializable(&h), "{what}: not serializable");
            assert_eq!(r[0], ("read", Ok(())), "{what}");
            assert_eq!(w, [("write", Ok(()))], "{what}: the writer never aborts");
            match (r[1].1, reader_of(&h, 1)) {
                // The reader read the old version and committed at 3: the writer is after it.
                (Ok(()), Some(0)) => {
                    let v = written(&h, 1).unwrap();
                    assert!(v > 3, "{what}: the writer's version {v} inside the lease");
                    writer_moved += u32::from(v == 4);
                }
                // The reader read the writer's version: it is after the writer.
                (Ok(()), Some(v)) => assert_eq!(Some(v), written(&h, 1), "{what}"),
                (Err(e), _) => {
                    assert_eq!(e, AbortReason::Validation, "{what}");
                    // Frozen first: the writer commits just past the lease it froze.
                    assert_eq!(written(&h, 1), Some(1), "{what}");
                    reader_lost += 1;
                }
                (Ok(()), None) => panic!("{what}: no reader in the history"),
            }
        }
        // The sweep covers both orders.
        assert!(
            reader_lost > 0 && writer_moved > 0,
            "hybrid {code}: readers aborted {reader_lost}, writers moved past {writer_moved}"
        );
    }
}

/// SUNDIAL's point: a reader whose lease covers its commit timestamp commits even though a
/// writer replaced what it read meanwhile (it is ordered before the writer); OCC aborts it.
#[test]
fn a_write_after_a_readers_lease_does_not_abort_the_reader() {
    for protocol in [Protocol::Sundial, Protocol::Occ] {
        let (r, w, h) = script(
            protocol,
            511,
            async |c: &mut Coordinator| {
                until(c, T0).await;
                let mut tx = c.begin(TxKind::ReadOnly);
                let read = res(tx.fetch(&[Access::read(T, 1), Access::read(T, 2)]).await);
                tx.endpoint().sleep(50_000).await;
                vec![("read", read), ("commit", res(tx.commit().await))]
            },
            async |c: &mut Coordinator| {
                until(c, T0 + 10_000).await;
                vec![("write", update(c, 1).await)]
            },
        );
        assert_eq!(w, [("write", Ok(()))], "{}", protocol.name());
        let reader = if protocol == Protocol::Sundial {
            Ok(())
        } else {
            Err(AbortReason::Validation)
        };
        assert_eq!(
            r,
            [("read", Ok(())), ("commit", reader)],
            "{}",
            protocol.name()
        );
        assert!(serializable(&h), "{}", protocol.name());
    }
}

/// Phantoms under timestamp order. Coordinator 1's transaction I reads key 1 (version 0, its
/// lease renewed to 5 by an earlier reader) and, much later, inserts key 100. Meanwhile
/// coordinator 0 overwrites key 1 (timestamp 6) and then R reads key 1's new version and key
/// 100 absent, and commits at 6. I inserts after R validated: absence validation at R's commit
/// saw nothing. Without the chain lease, I would commit at timestamp 1 (key 1's lease covers
/// it), ordered before R, which missed its insert, and after the overwrite of what it read: a
/// cycle. With it, R's renewal of key 100's chain lease to 6 pushes I to 7, outside key 1's
/// lease, and I aborts.
#[test]
fn an_insert_after_a_reader_saw_the_key_absent_is_ordered_after_it() {
    for code in [511, 0] {
        let (r, i, h) = script(
            Protocol::Sundial,
            code,
            async |c: &mut Coordinator| {
                write_times(c, 2, 5).await;
                // An earlier reader renews key 1's lease to 5.
                let mut tx = c.begin(TxKind::ReadOnly);
                tx.fetch(&[Access::read(T, 1), Access::read(T, 2)])
                    .await
                    .unwrap();
                let early = res(tx.commit().await);
                until(c, T0 + 20_000).await;
                let overwrite = update(c, 1).await;
                let mut tx = c.begin(TxKind::ReadOnly);
                let read = res(tx.fetch(&[Access::read(T, 1), Access::read(T, 100)]).await);
                let absent = tx.get(T, 100).is_none();
                let commit = res(tx.commit().await);
                assert!(absent, "key 100 is not there yet");
                vec![
                    ("early reader", early),
                    ("overwrite", overwrite),
                    ("read", read),
                    ("commit", commit),
                ]
            },
            async |c: &mut Coordinator| {
                until(c, T0).await;
                let mut tx = c.begin(TxKind::ReadWrite);
                let read = res(tx.fetch(&[Access::read(T, 1)]).await);
                let now = tx.endpoint().now_ns();
                tx.endpoint().sleep(T0 + 100_000 - now).await;
                let insert = res(tx.insert(T, 100, &1u64.to_le_bytes()).await);
                vec![
                    ("read", read),
                    ("insert", insert),
                    ("commit", res(tx.commit().await)),
                ]
            },
        );
        // First what matters (without the chain lease, this is where it fails: a cycle).
        assert!(serializable(&h), "hybrid {code}: not serializable");
        let ok = Ok(());
        assert_eq!(
            r,
            [
                ("early reader", ok),
                ("overwrite", ok),
                ("read", ok),
                ("commit", ok)
            ],
            "hybrid {code}"
        );
        assert_eq!(
            i,
            [
                ("read", ok),
                ("insert", ok),
                ("commit", Err(AbortReason::Validation))
            ],
            "hybrid {code}"
        );
    }
}

thread_local! {
    /// The round trips of the insert below (the scripts run on the test's thread).
    static INSERT_RTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// An insert of a key a committed reader saw absent (its chain lease renewed to the reader's
/// timestamp 5): the insert reads the chain's lease with its home bucket, freezes it from
/// what it read (taken from any other bucket, the freeze would find another word and need
/// a round trip more), and commits above it (version 6), on its first attempt, in 4 round
/// trips.
#[test]
fn an_insert_after_a_committed_absent_read_commits_above_the_chain_lease() {
    let (r, i, h) = script(
        Protocol::Sundial,
        0,
        async |c: &mut Coordinator| {
            write_times(c, 2, 5).await;
            let mut tx = c.begin(TxKind::ReadOnly);
            let read = res(tx.fetch(&[Access::read(T, 2), Access::read(T, 100)]).await);
            let absent = tx.get(T, 100).is_none();
            vec![
                ("read", read),
                (
                    "absent",
                    if absent {
                        Ok(())
                    } else {
                        Err(AbortReason::Exists)
                    },
                ),
                ("commit", res(tx.commit().await)),
            ]
        },
        async |c: &mut Coordinator| {
            until(c, T0 + 100_000).await;
            let before = c.endpoint().stats().round_trips;
            let mut tx = c.begin(TxKind::ReadWrite);
            let insert = res(tx.insert(T, 100, &1u64.to_le_bytes()).await);
            let commit = res(tx.commit().await);
            INSERT_RTS.set(c.endpoint().stats().round_trips - before);
            vec![("insert", insert), ("commit", commit)]
        },
    );
    let ok = Ok(());
    assert_eq!(r, [("read", ok), ("absent", ok), ("commit", ok)]);
    assert_eq!(i, [("insert", ok), ("commit", ok)]);
    assert!(serializable(&h));
    assert_eq!(written(&h, 100), Some(6));
    assert_eq!(INSERT_RTS.get(), 4);
}
