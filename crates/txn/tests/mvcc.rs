//! RCC's MVCC, scripted: two coordinators on the simulator (no adversary, the `ideal`
//! profile) whose steps are ordered in virtual time, their histories checked. Timestamps come
//! from the coordinators' clocks (virtual time here), so the coordinator that begins first is
//! the older. A reader's rts raise racing an older writer's lock and commit, on both sides
//! (the writer's W1 re-check is its freeze CAS; the reader re-reads the version after a raise
//! that found the word changed); an older insert of a key a younger reader saw absent; a
//! reader older than the newest version reading an older version slot (RCC's four), through
//! the chain of copies, or aborting when no slot holds its version.

use dtxn_check::{check, Isolation, Options, Status, Txn as HTxn};
use dtxn_txn::TxKind;
use dtxn_txn::{AbortReason, Access, Coordinator, MvccOptions, Protocol};

mod scripted;
use scripted::{res, script, script_with, T};

/// When the scripts' transactions start (virtual ns): after the bootstrap.
const T0: u64 = 400_000;

async fn until(c: &mut Coordinator, t: u64) {
    let now = c.endpoint().now_ns();
    if t > now {
        c.endpoint().sleep(t - now).await;
    }
}

fn serializable(h: &[HTxn]) -> bool {
    let opts = Options {
        isolation: Isolation::Serializable,
        real_time: false,
    };
    check(h, opts).unwrap().ok()
}

/// The versions committed writers installed of `key`.
fn written(h: &[HTxn], key: u64) -> Vec<u64> {
    h.iter()
        .filter(|t| t.status == Status::Committed)
        .flat_map(|t| t.writes.iter())
        .filter(|w| w.key == key)
        .map(|w| w.version)
        .collect()
}

/// The reader's side of the rts-bump race. R (younger) reads key 1; W (older) then updates
/// keys 1 and 2 and commits; R reads key 2 (W's version: below R) and commits. R read key 1
/// before W and key 2 after it: a cycle. R's raise of key 1's rts finds the word W's install
/// wrote, and the READ after that CAS shows the new version: R aborts. (A reader that only
/// CASes the rts up from whatever it finds, RCC's loop, commits the cycle.)
#[test]
fn a_reader_whose_raise_finds_a_new_version_aborts() {
    for code in [511, 0, 28] {
        let (r, w, h) = script(
            Protocol::Mvcc,
            code,
            async |c: &mut Coordinator| {
                until(c, T0 + 10_000).await;
                let mut tx = c.begin(TxKind::ReadOnly);
                let one = res(tx.fetch(&[Access::read(T, 1)]).await);
                let now = tx.endpoint().now_ns();
                tx.endpoint().sleep(T0 + 80_000 - now).await;
                let two = res(tx.fetch(&[Access::read(T, 2)]).await);
                vec![("1", one), ("2", two), ("commit", res(tx.commit().await))]
            },
            async |c: &mut Coordinator| {
                until(c, T0).await;
                let mut tx = c.begin(TxKind::ReadWrite);
                let now = tx.endpoint().now_ns();
                tx.endpoint().sleep(T0 + 20_000 - now).await;
                let f = res(tx
                    .fetch(&[Access::update(T, 1), Access::update(T, 2)])
                    .await);
                for k in [1, 2] {
                    tx.update(T, k, &7u64.to_le_bytes()).await.unwrap();
                }
                vec![("fetch", f), ("commit", res(tx.commit().await))]
            },
        );
        let ok = Ok(());
        assert!(
            serializable(&h),
            "hybrid {code}: not serializable: {r:?} {w:?}"
        );
        assert_eq!(w, [("fetch", ok), ("commit", ok)], "hybrid {code}");
        assert_eq!(
            r,
            [
                ("1", ok),
                ("2", ok),
                ("commit", Err(AbortReason::Validation))
            ],
            "hybrid {code}"
        );
    }
}

/// The writer's side (the digest's race, section 3.4 note 1). W (older) locks key 1 and reads
/// its rts; R (younger) reads key 1, raises its rts and commits (writing key 3, whose version
/// is R's timestamp); then W commits. W checked W1 before R's raise: were that its only check,
/// it would commit below R a version R should have read. Its freeze CAS finds the word raised
/// and W1 fails on it: W aborts.
#[test]
fn a_writer_whose_freeze_finds_a_younger_readers_raise_aborts() {
    for code in [511, 0, 28] {
        let (r, w, h) = script(
            Protocol::Mvcc,
            code,
            async |c: &mut Coordinator| {
                until(c, T0 + 10_000).await;
                let mut tx = c.begin(TxKind::ReadWrite);
                let f = res(tx.fetch(&[Access::read(T, 1), Access::update(T, 3)]).await);
                tx.update(T, 3, &9u64.to_le_bytes()).await.unwrap();
                vec![("fetch", f), ("commit", res(tx.commit().await))]
            },
            async |c: &mut Coordinator| {
                until(c, T0).await;
                let mut tx = c.begin(TxKind::ReadWrite);
                let f = res(tx.fetch(&[Access::update(T, 1)]).await);
                tx.update(T, 1, &7u64.to_le_bytes()).await.unwrap();
                let now = tx.endpoint().now_ns();
                tx.endpoint().sleep(T0 + 60_000 - now).await;
                vec![("fetch", f), ("commit", res(tx.commit().await))]
            },
        );
        let ok = Ok(());
        assert!(serializable(&h), "hybrid {code}: not serializable");
        assert_eq!(r, [("fetch", ok), ("commit", ok)], "hybrid {code}");
        // Timestamp order: R read key 1's old version, so no version of key 1 below R's.
        let r_ts = written(&h, 3)[0];
        assert!(
            written(&h, 1).iter().all(|&v| v > r_ts),
            "hybrid {code}: key 1 written below the reader: {:?} < {r_ts}",
            written(&h, 1)
        );
        assert_eq!(
            w,
            [("fetch", ok), ("commit", Err(AbortReason::NewerVersion))],
            "hybrid {code}"
        );
    }
}

/// Phantoms in timestamp order. R (younger) reads key 100 absent and commits; then W (older)
/// inserts key 100. W would be ordered before R, which did not see its insert: the chain word
/// R raised makes W's insert fail W1, whatever the absence validation at R's commit saw.
#[test]
fn an_older_insert_of_a_key_a_younger_reader_saw_absent_aborts() {
    for code in [511, 0, 28] {
        let (r, w, h) = script(
            Protocol::Mvcc,
            code,
            async |c: &mut Coordinator| {
                until(c, T0 + 10_000).await;
                let mut tx = c.begin(TxKind::ReadWrite);
                let f = res(tx
                    .fetch(&[Access::read(T, 100), Access::update(T, 3)])
                    .await);
                let absent = tx.get(T, 100).is_none();
                tx.update(T, 3, &9u64.to_le_bytes()).await.unwrap();
                assert!(absent);
                vec![("fetch", f), ("commit", res(tx.commit().await))]
            },
            async |c: &mut Coordinator| {
                until(c, T0).await;
                let mut tx = c.begin(TxKind::ReadWrite);
                let now = tx.endpoint().now_ns();
                tx.endpoint().sleep(T0 + 60_000 - now).await;
                let i = res(tx.insert(T, 100, &1u64.to_le_bytes()).await);
                vec![("insert", i), ("commit", res(tx.commit().await))]
            },
        );
        let ok = Ok(());
        assert!(serializable(&h), "hybrid {code}: not serializable");
        assert_eq!(r, [("fetch", ok), ("commit", ok)], "hybrid {code}");
        let r_ts = written(&h, 3)[0];
        assert!(
            written(&h, 100).iter().all(|&v| v > r_ts),
            "hybrid {code}: key 100 inserted below the reader that saw it absent"
        );
        assert_eq!(
            w,
            [("insert", ok), ("commit", Err(AbortReason::NewerVersion))],
            "hybrid {code}"
        );
    }
}

/// RCC's version slots. R (oldest) begins; W (younger) then commits key 1 = 7 and, later,
/// key 1 = 8; R reads key 1 after both. Its newest version is above R, and so is the one it
/// replaced: R must read the loaded version (value 1, version 0), two links down the chain of
/// older copies. With four slots it does, and commits (read-only: no raise, one round trip).
/// With two, the copy of version 0 was overwritten by W's second commit (the oldest slot), and
/// with one there are no older copies: R aborts, "no suitable slot", at the read. (The
/// one-slot form, before the slots, aborted R at its commit with `NewerVersion`.) Under
/// `mvcc.lazy_slots` R's fetch READs the newest version alone, then the older slots: one
/// round trip more.
#[test]
fn an_older_reader_reads_an_older_version_slot() {
    for code in [511, 0, 28] {
        for (slots, lazy_slots) in [(4u8, false), (4, true), (2, false), (2, true), (1, false)] {
            let mvcc = MvccOptions { slots, lazy_slots };
            let (r, w, h) = script_with(
                Protocol::Mvcc,
                code,
                mvcc,
                async move |c: &mut Coordinator| {
                    let (steps, rtts) = old_snapshot_read(c, T0, T0 + 120_000, 1).await;
                    if steps.len() == 2 {
                        let want = if lazy_slots { 2 } else { 1 };
                        assert_eq!(rtts, want, "hybrid {code}, {mvcc:?}: round trips");
                    }
                    steps
                },
                async |c: &mut Coordinator| {
                    let mut steps = Vec::new();
                    for (at, v) in [(T0 + 10_000, 7u64), (T0 + 50_000, 8)] {
                        until(c, at).await;
                        let mut tx = c.begin(TxKind::ReadWrite);
                        steps.push(("fetch", res(tx.fetch(&[Access::update(T, 1)]).await)));
                        tx.update(T, 1, &v.to_le_bytes()).await.unwrap();
                        steps.push(("commit", res(tx.commit().await)));
                    }
                    steps
                },
            );
            let ok = Ok(());
            let at = format!("hybrid {code}, {mvcc:?}");
            assert!(serializable(&h), "{at}: not serializable");
            assert_eq!(w, [("fetch", ok), ("commit", ok)].repeat(2), "{at}");
            if slots == 4 {
                assert_eq!(r, [("read", ok), ("commit", ok)], "{at}");
                let read = h
                    .iter()
                    .filter(|t| t.status == Status::Committed && t.writes.is_empty())
                    .nth(1)
                    .expect("the reader committed");
                assert_eq!(read.reads[0].version, 0, "{at}: the loaded version");
            } else {
                assert_eq!(r, [("read", Err(AbortReason::NoSlot))], "{at}");
            }
        }
    }
}

/// The reader of the version-slot scripts: warmed up (key 1's address cached, so that its
/// read READs the record: a bucket READ takes every copy, lazy or not) before `T0`, it begins
/// a read-only transaction at `begin`, reads key 1 at `read`, expects `want` (the version its
/// snapshot sees, from an older copy) and commits. Returns its steps and the round trips of
/// its read and commit.
async fn old_snapshot_read(
    c: &mut Coordinator,
    begin: u64,
    read: u64,
    want: u64,
) -> (Vec<(&'static str, Result<(), AbortReason>)>, u64) {
    until(c, T0 - 100_000).await;
    let mut tx = c.begin(TxKind::ReadOnly);
    tx.fetch(&[Access::read(T, 1)]).await.unwrap();
    tx.commit().await.unwrap();
    until(c, begin).await;
    let mut tx = c.begin(TxKind::ReadOnly);
    let now = tx.endpoint().now_ns();
    tx.endpoint().sleep(read - now).await;
    let rtts = tx.endpoint().stats().round_trips;
    let f = res(tx.fetch(&[Access::read(T, 1)]).await);
    if f.is_err() {
        return (vec![("read", f)], 0);
    }
    let value = tx
        .get(T, 1)
        .map(|v| u64::from_le_bytes(v.try_into().unwrap()));
    assert_eq!(
        value,
        Some(want),
        "the read at {read} of a snapshot begun at {begin}"
    );
    let steps = vec![("read", f), ("commit", res(tx.commit().await))];
    (steps, c.endpoint().stats().round_trips - rtts)
}

/// With two version slots, the one older copy is the version the last commit replaced: W
/// commits key 1 = 7 once, and R, older, reads the loaded version (value 1) from the older
/// copy and commits. (The boundary of `displace`'s "one copy, nothing to displace": taken for
/// two, W's commit kept no older copy and R aborted for want of a slot.)
#[test]
fn with_two_slots_the_older_copy_holds_the_version_replaced() {
    let mvcc = MvccOptions {
        slots: 2,
        lazy_slots: false,
    };
    let (r, w, h) = script_with(
        Protocol::Mvcc,
        511,
        mvcc,
        async move |c: &mut Coordinator| old_snapshot_read(c, T0, T0 + 120_000, 1).await.0,
        async |c: &mut Coordinator| {
            until(c, T0 + 10_000).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            let f = res(tx.fetch(&[Access::update(T, 1)]).await);
            tx.update(T, 1, &7u64.to_le_bytes()).await.unwrap();
            vec![("fetch", f), ("commit", res(tx.commit().await))]
        },
    );
    let ok = Ok(());
    assert!(serializable(&h));
    assert_eq!(w, [("fetch", ok), ("commit", ok)]);
    assert_eq!(r, [("read", ok), ("commit", ok)]);
}

/// With four version slots, a commit that finds every older copy taken overwrites the
/// oldest: W commits key 1 four times (7, 8, 9, 10), the fourth over the copy of the loaded
/// version; R, begun between the first and the second commit, then reads 7 (the first
/// commit's version, now the oldest copy) and commits. (Judging the copies' headers at the
/// wrong offsets picked another copy to overwrite, and R found no suitable slot.)
#[test]
fn a_full_slot_overwrites_its_oldest_copy() {
    let mvcc = MvccOptions {
        slots: 4,
        lazy_slots: false,
    };
    let (r, w, h) = script_with(
        Protocol::Mvcc,
        511,
        mvcc,
        async move |c: &mut Coordinator| old_snapshot_read(c, T0 + 20_000, T0 + 150_000, 7).await.0,
        async |c: &mut Coordinator| {
            let mut steps = Vec::new();
            for (at, v) in [(10_000, 7u64), (40_000, 8), (70_000, 9), (100_000, 10)] {
                until(c, T0 + at).await;
                let mut tx = c.begin(TxKind::ReadWrite);
                steps.push(("fetch", res(tx.fetch(&[Access::update(T, 1)]).await)));
                tx.update(T, 1, &v.to_le_bytes()).await.unwrap();
                steps.push(("commit", res(tx.commit().await)));
            }
            steps
        },
    );
    let ok = Ok(());
    assert!(serializable(&h));
    assert_eq!(w, [("fetch", ok), ("commit", ok)].repeat(4));
    assert_eq!(r, [("read", ok), ("commit", ok)]);
}
