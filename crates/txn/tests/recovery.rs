//! Recovery's decisions, scripted: the pool is put in the state a crash leaves, then
//! `recovery::recover` runs.

use dtxn_fabric::sim::{Adversary, ComputeCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::log::{ItemKind, LogEntry, LogItem, LogStatus};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableInfo, TableSpec, View};
use dtxn_txn::recovery::{self, recover, Recovered};
use dtxn_txn::{AbortReason, Access, Protocol, TxKind, TxnConfig};

mod common;

const T: u32 = 1;
const KEY: u64 = 7;
/// The crashed coordinator (its lock-owner id is `DEAD + 1`).
const DEAD: u32 = 3;

fn pool() -> Pool {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 1,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let plan = Plan::new(&[TableSpec::new(T, "t", 8, 100)], &shape).unwrap();
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..20u64 {
        l.insert(&pool, k, &k.to_le_bytes()).unwrap();
    }
    pool
}

/// Where `key` lives on `t`'s primary, and its record as it is now (one round trip).
async fn record_of(ep: &mut Endpoint, t: &TableInfo, key: u64) -> (u64, Vec<u8>) {
    let home = t.home_bucket(key);
    let r = ep.read(t.primary(), home, t.bucket_bytes as usize);
    ep.post().await.unwrap();
    let bucket = ep.bytes(r);
    let slot = (0..t.slots_per_bucket)
        .find(|&s| t.codec().header(t.slot_bytes(bucket, s)).key == key)
        .expect("the key in its home bucket");
    let record = t.slot_bytes(bucket, slot)[..t.record_bytes as usize].to_vec();
    (t.slot(home, slot), record)
}

/// `coordinator`'s pending entry `txn`: one undo item, `image` at `offset` of `table`.
fn pending_undo(
    coordinator: u32,
    txn: u64,
    table: u32,
    offset: u64,
    insert: bool,
    image: Vec<u8>,
) -> LogEntry {
    LogEntry {
        txn,
        coordinator,
        status: LogStatus::Pending,
        tag: 0,
        items: vec![LogItem {
            table,
            offset,
            insert,
            kind: ItemKind::Undo,
            image,
        }],
    }
}

/// Queues the WRITE of a crashed coordinator's log entry to its slice on every live node.
fn write_entry(ep: &mut Endpoint, map: &PoolMap, entry: &LogEntry) {
    let (slice, slice_bytes) = map.log_slice(entry.coordinator).unwrap();
    let mut log = Vec::new();
    entry.encode(slice_bytes, &mut log).unwrap();
    for n in map.live_nodes() {
        ep.write(n, slice, &log);
    }
}

/// Writes the dead coordinator's pending entry of transaction 99 with `items` to its slices,
/// and recovers it (FORD's recovery).
async fn recover_pending(
    ep: &mut Endpoint,
    map: &PoolMap,
    items: Vec<LogItem>,
) -> (Recovered, LogEntry) {
    let entry = LogEntry {
        txn: 99,
        coordinator: DEAD,
        status: LogStatus::Pending,
        tag: 0,
        items,
    };
    write_entry(ep, map, &entry);
    ep.post().await.unwrap();
    let (outcome, _) = recover(ep, map, Protocol::Ford, DEAD).await.unwrap();
    (outcome, entry)
}

/// The dead coordinator locks the record at `offset` on its primary and logs it (transaction
/// 99, pending, one undo item of `image`); FORD's recovery runs. The record's value, version
/// and lock word after it, and the outcome.
async fn locked_logged_recovered(
    ep: &mut Endpoint,
    map: &PoolMap,
    t: &TableInfo,
    offset: u64,
    insert: bool,
    image: Vec<u8>,
) -> (Vec<u8>, u64, u64, Recovered) {
    let cas = ep.cas(t.primary(), offset, 0, u64::from(DEAD) + 1);
    ep.post().await.unwrap();
    assert!(ep.cas_ok(cas));
    let entry = pending_undo(DEAD, 99, T, offset, insert, image);
    write_entry(ep, map, &entry);
    ep.post().await.unwrap();
    let (outcome, _) = recover(ep, map, Protocol::Ford, DEAD).await.unwrap();
    let r = ep.read(t.primary(), offset, t.record_bytes as usize);
    ep.post().await.unwrap();
    let mut value = vec![0u8; t.value_size as usize];
    let h = t.codec().decode(ep.bytes(r), &mut value).unwrap();
    (value, h.version, h.lock, outcome)
}

/// A transaction read `KEY` cold, unlocked, and logged that image; another transaction
/// committed over it; the first then won its commit-time lock, saw the newer version and
/// aborted, and the crash cut off its release. Its pending entry's image is older than the
/// primary, which is not invisible: the dead coordinator never wrote it. Recovery must leave
/// the other's acknowledged commit in place and only free the lock (it once rolled the key
/// back to the stale image).
#[test]
fn recovery_never_rolls_back_over_another_transactions_commit() {
    let (value, version, lock, outcome) =
        common::with_coordinator(pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            // Where KEY lives, and its record as the dead transaction read and logged it.
            let (offset, image) = record_of(c.endpoint(), &t, KEY).await;
            // Another transaction commits KEY = 700.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, KEY)]).await.unwrap();
            tx.update(T, KEY, &700u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            // The dead coordinator's commit-time lock on it, and its pending undo entry.
            locked_logged_recovered(c.endpoint(), &map, &t, offset, false, image).await
        });
    assert_eq!(value, 700u64.to_le_bytes(), "the other's commit stays");
    assert_eq!(version, 1, "loaded at 0, committed once over");
    assert_eq!(lock, 0, "the dead coordinator's lock is freed");
    assert_eq!(outcome, Recovered::RolledBack(99));
}

/// The dead coordinator logged `KEY` and then let its lock go (its transaction aborted, its
/// release landed, its log close cut off), and a live coordinator holds the lock now, not
/// yet installed: the record is whole at the image's version under the other's id. Recovery
/// must leave that lock and record alone (a mutant that took every record without the dead's
/// id for a promoted primary's, whose lock died with it, judged it held and rolled it back
/// over the live lock).
#[test]
fn recovery_leaves_a_record_locked_by_a_live_coordinator_alone() {
    const LIVE: u64 = 2;
    let (lock, version, outcome) =
        common::with_coordinator(pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let ep = c.endpoint();
            let (offset, image) = record_of(ep, &t, KEY).await;
            let cas = ep.cas(t.primary(), offset, 0, LIVE);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let entry = pending_undo(DEAD, 99, T, offset, false, image);
            write_entry(ep, &map, &entry);
            ep.post().await.unwrap();
            let (outcome, _) = recover(ep, &map, Protocol::Ford, DEAD).await.unwrap();
            let r = ep.read(t.primary(), offset, t.record_bytes as usize);
            ep.post().await.unwrap();
            let h = t.codec().header(ep.bytes(r));
            (h.lock, h.version, outcome)
        });
    assert_eq!(lock, LIVE, "the live coordinator's lock stays");
    assert_eq!(version, 0);
    assert_ne!(outcome, Recovered::RolledBack(99));
}

/// A pending entry whose insert item logs an image of the wrong size (neither a record nor
/// empty: corrupt, though its checksum passed) is not trusted: recovery leaves the record to
/// the lock release alone. The dead coordinator locked `KEY` and logged it so; recovery must
/// free the lock and leave the loaded record as it is.
#[test]
fn recovery_leaves_an_insert_with_a_malformed_image_to_the_lock_release() {
    let (value, version, lock, outcome) =
        common::with_coordinator(pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let ep = c.endpoint();
            let (offset, _) = record_of(ep, &t, KEY).await;
            locked_logged_recovered(ep, &map, &t, offset, true, vec![0xAB; 10]).await
        });
    assert_eq!(value[..8], KEY.to_le_bytes(), "the loaded record stays");
    assert_eq!((version, lock), (0, 0), "its lock freed");
    assert_eq!(outcome, Recovered::Nothing);
}

/// In persistent-memory mode recovery's roll-back is durable: the dead coordinator's install
/// reached the backup (flushed) but not the primary, still at the image under its lock; its
/// commit was never acknowledged, so recovery rolls the backup back; then every memory node
/// loses power. The backup must hold the image, not the install that never committed (before
/// recovery flushed its roll-back, the unflushed lines were lost at random and the backup kept
/// the install).
#[test]
fn in_pm_mode_recoverys_roll_back_survives_a_power_loss() {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let plan = Plan::new(&[TableSpec::new(T, "t", 8, 100)], &shape).unwrap();
    let mut lost = 0;
    for seed in 1..=8 {
        let mut cfg = SimConfig::new(seed, 2, plan.region_bytes);
        cfg.profile = Profile::ideal();
        cfg.adversary = Adversary::off();
        cfg.persistent = true;
        let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
        plan.format_pool(&pool).unwrap();
        let mut l = Loader::new(plan.table(T).unwrap());
        for k in 0..20u64 {
            l.insert(&pool, k, &k.to_le_bytes()).unwrap();
        }
        let txn = TxnConfig {
            flush: true,
            ..TxnConfig::default()
        };
        let (offset, outcome) = common::with_coordinator_in(&mut pool, txn, |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let bytes = t.record_bytes as usize;
            let ep = c.endpoint();
            let (offset, image) = record_of(ep, &t, KEY).await;
            let owner = u64::from(DEAD) + 1;
            // Its pending entry on every node, flushed; its lock on the primary; its
            // install (one version up, invisible with its id) on the backup, flushed.
            let entry = pending_undo(DEAD, 99, T, offset, false, image.clone());
            write_entry(ep, &map, &entry);
            for n in map.live_nodes() {
                ep.flush(n);
            }
            let cas = ep.cas(t.primary(), offset, 0, owner);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let mut h = t.codec().header(&image);
            h.version += 1;
            h.lock = owner | (1 << 63);
            let mut install = vec![0u8; bytes];
            t.codec().encode(&h, &700u64.to_le_bytes(), &mut install);
            let backup = t.backups()[0];
            ep.write(backup, offset, &install);
            ep.flush(backup);
            ep.post().await.unwrap();
            let (outcome, _) = recover(ep, &map, Protocol::Ford, DEAD).await.unwrap();
            (offset, outcome)
        });
        assert_eq!(outcome, Recovered::RolledBack(99), "seed {seed}");
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        sim.power_loss();
        let t = plan.table(T).unwrap();
        let mut b = vec![0u8; t.record_bytes as usize];
        pool.with_local(t.replicas[1], |m| m.read(offset, &mut b));
        let mut value = vec![0u8; 8];
        let h = t.codec().decode(&b, &mut value).unwrap();
        if (h.version, value.as_slice()) != (0, &KEY.to_le_bytes()[..]) {
            lost += 1;
        }
    }
    assert_eq!(lost, 0, "seeds whose backup kept the rolled-back install");
}

/// The dead coordinator's commit was acknowledged; its release (detached) was cut off after
/// unlocking `KEY` but before unlocking `OTHER` or closing its log entry; its next transaction
/// had already locked `KEY` again (the same owner id, no invisible bit). Recovery must see the
/// install (`OTHER` still shows it, invisible under our id) and roll forward: judged as
/// another's commit over our image, `KEY` once made it roll back and undo `OTHER`, an
/// acknowledged write (torture: ford/kv/seed 1000718).
#[test]
fn recovery_rolls_forward_an_acknowledged_commit_whose_key_the_next_transaction_relocked() {
    const OTHER: u64 = 11;
    let (values, outcome) =
        common::with_coordinator(pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let bytes = t.record_bytes as usize;
            let owner = u64::from(DEAD) + 1;
            let ep = c.endpoint();
            let mut items = Vec::new();
            let mut offsets = Vec::new();
            for (key, lock) in [(KEY, owner), (OTHER, owner | (1 << 63))] {
                let (offset, image) = record_of(ep, &t, key).await;
                // Its install, one version up: KEY released and locked again (plain), OTHER
                // still invisible under its id.
                let mut h = t.codec().header(&image);
                h.version += 1;
                h.lock = lock;
                let mut install = vec![0u8; bytes];
                t.codec()
                    .encode(&h, &(key + 500).to_le_bytes(), &mut install);
                ep.write(t.primary(), offset, &install);
                items.push(LogItem {
                    table: T,
                    offset,
                    insert: false,
                    kind: ItemKind::Undo,
                    image,
                });
                offsets.push(offset);
            }
            let (outcome, _) = recover_pending(ep, &map, items).await;
            let mut values = Vec::new();
            for off in offsets {
                let r = ep.read(t.primary(), off, bytes);
                ep.post().await.unwrap();
                let mut value = vec![0u8; t.value_size as usize];
                let h = t.codec().decode(ep.bytes(r), &mut value).unwrap();
                values.push((u64::from_le_bytes(value.try_into().unwrap()), h.version));
            }
            (values, outcome)
        });
    assert_eq!(
        values,
        vec![(KEY + 500, 1), (OTHER + 500, 1)],
        "the acknowledged install stays"
    );
    match outcome {
        Recovered::RolledForward(t) => {
            assert_eq!(t.txn, 99);
            let mut keys: Vec<u64> = t.writes.iter().map(|w| w.key).collect();
            keys.sort_unstable();
            assert_eq!(keys, vec![KEY, OTHER]);
        }
        other => panic!("rolled forward, not {other:?}"),
    }
}

/// Recovery in a joining view, of a commit it rolls forward: each record the commit wrote
/// goes to the joiner as the primary holds it (the joiner may lack the install: the crash cut
/// its WRITE there, or the commit was an older view's). With two records, the second's fix
/// once read a READ of a batch that the first's WRITE had replaced (an index out of bounds:
/// torture, nowait/smallbank/seed 60000222 under `--faults memory=1,compute=1,rejoin=100us`).
#[test]
fn recovery_in_a_joining_view_gives_the_joiner_every_record_of_a_commit_it_rolls_forward() {
    const OTHER: u64 = 11;
    let records =
        common::with_coordinator(two_line_pool(), TxnConfig::default(), |mut c| async move {
            let ep = c.endpoint();
            // Node 1 failed, and came back blank: it joins.
            let failed = View::default().without(&[1]).unwrap();
            let joining = failed.joining(1).unwrap();
            for (from, to) in [(View::default(), failed), (failed, joining)] {
                let one = dtxn_fabric::NodeSet::single(0);
                let out = dtxn_txn::membership::change_view(ep, one, from, to).await;
                assert_eq!(out, Ok(dtxn_txn::control::Write::Done));
            }
            let map = PoolMap::bootstrap(ep).await.unwrap();
            let t = map.table(T).unwrap().clone();
            assert_eq!((t.primary(), t.is_joiner(1)), (0, true));
            let owner = u64::from(DEAD) + 1;
            let mut items = Vec::new();
            for key in [KEY, OTHER] {
                let (offset, image) = record_of(ep, &t, key).await;
                // Its install on the primary, invisible under its id; the joiner still holds
                // the record as loaded.
                let mut h = t.codec().header(&image);
                h.version += 1;
                h.lock = owner | (1 << 63);
                let mut install = vec![0u8; t.record_bytes as usize];
                t.codec().encode(&h, &[0xE0 | key as u8; 100], &mut install);
                ep.write(0, offset, &install);
                items.push(LogItem {
                    table: T,
                    offset,
                    insert: false,
                    kind: ItemKind::Undo,
                    image,
                });
            }
            let (outcome, entry) = recover_pending(ep, &map, items).await;
            assert!(
                matches!(outcome, Recovered::RolledForward(ref t) if t.txn == 99),
                "{outcome:?}"
            );
            let mut records = Vec::new();
            for it in &entry.items {
                let reads = [0, 1].map(|n| ep.read(n, it.offset, t.record_bytes as usize));
                ep.post().await.unwrap();
                records.push(reads.map(|r| ep.bytes(r).to_vec()));
            }
            records
        });
    let t = two_line_plan().table(T).unwrap().clone();
    for (key, [primary, joiner]) in [KEY, OTHER].into_iter().zip(records) {
        let mut value = vec![0u8; 100];
        let h = t.codec().decode(&primary, &mut value).unwrap();
        assert_eq!((h.version, h.lock, value[0]), (1, 0, 0xE0 | key as u8));
        assert_eq!(joiner, primary, "key {key}: the joiner lacks the commit");
    }
}

/// A pool of two memory nodes, two replicas, one table of 100-byte values (two lines a
/// record, so that a READ of one can mix lines of two writes).
fn two_line_pool() -> Pool {
    two_line_pool_crashing(None)
}

/// [`two_line_pool`]'s layout.
fn two_line_plan() -> Plan {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    Plan::new(&[TableSpec::new(T, "t", 100, 100)], &shape).unwrap()
}

/// [`two_line_pool`], its compute node crashing at `crash` (virtual ns), if given.
fn two_line_pool_crashing(crash: Option<u64>) -> Pool {
    let plan = two_line_plan();
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    cfg.faults.compute_crashes = crash
        .map(|at_ns| ComputeCrash {
            at_ns,
            compute_node: 0,
        })
        .into_iter()
        .collect();
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..20u64 {
        l.insert(&pool, k, &[k as u8; 100]).unwrap();
    }
    pool
}

/// The dead coordinator locked KEY (read as `image`), logged it, and its install (a version
/// up, value 0xEE) reached the primary but not the backup before it crashed; recovery rolls
/// it back. Returns the install's record as the primary held it.
async fn install_cut_off_and_rolled_back(
    ep: &mut Endpoint,
    map: &PoolMap,
    t: &TableInfo,
    offset: u64,
    image: &[u8],
) -> Vec<u8> {
    let owner = u64::from(DEAD) + 1;
    let entry = pending_undo(DEAD, 99, T, offset, false, image.to_vec());
    write_entry(ep, map, &entry);
    let cas = ep.cas(t.primary(), offset, 0, owner);
    ep.post().await.unwrap();
    assert!(ep.cas_ok(cas));
    let mut h = t.codec().header(image);
    h.version += 1;
    h.lock = owner | (1 << 63);
    let mut install = vec![0u8; t.record_bytes as usize];
    t.codec().encode(&h, &[0xEE; 100], &mut install);
    ep.write(t.primary(), offset, &install);
    ep.post().await.unwrap();
    let (outcome, _) = recover(ep, map, Protocol::Ford, DEAD).await.unwrap();
    assert_eq!(
        outcome,
        Recovered::RolledBack(99),
        "the backup never got it"
    );
    install
}

/// Whether a READ taking line 0 of `a` and line 1 of `b` (or the other way round) decodes as
/// a whole record.
fn a_mix_decodes(t: &TableInfo, a: &[u8], b: &[u8]) -> bool {
    let mut value = vec![0u8; t.value_size as usize];
    [(a, b), (b, a)].iter().any(|(x, y)| {
        let mut mixed = x.to_vec();
        mixed[64..].copy_from_slice(&y[64..]);
        t.codec().decode(&mixed, &mut value).is_ok()
    })
}

/// Recovery rolls an install back at the old version (the history knows no other), so the
/// record's next commit installs the version the undone install had, with other bytes. Its
/// lines must be stamped apart from the undone install's, or a READ spanning the install, the
/// roll-back and that commit would take lines of both as one whole record (issue #17's
/// by-eye suspicion; both were stamped with the version alone).
#[test]
fn the_commit_after_a_roll_back_is_stamped_apart_from_the_install_it_undid() {
    let (undone, back, next, t) =
        common::with_coordinator(two_line_pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let (offset, image) = record_of(c.endpoint(), &t, KEY).await;
            let undone =
                install_cut_off_and_rolled_back(c.endpoint(), &map, &t, offset, &image).await;
            let (_, back) = record_of(c.endpoint(), &t, KEY).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, KEY)]).await.unwrap();
            tx.update(T, KEY, &[0x11; 100]).await.unwrap();
            tx.commit().await.unwrap();
            let (_, next) = record_of(c.endpoint(), &t, KEY).await;
            (undone, back, next, t)
        });
    let mut value = vec![0u8; 100];
    // Rolled back: the loaded value at the loaded version, one restore up.
    let h = t.codec().decode(&back, &mut value).unwrap();
    assert_eq!((h.version, h.restores, h.lock), (0, 1, 0));
    assert_eq!(value, [KEY as u8; 100]);
    // The next commit: the undone install's version, the restore carried on.
    let h = t.codec().decode(&next, &mut value).unwrap();
    assert_eq!((h.version, h.restores), (1, 1));
    assert_eq!(value, [0x11; 100]);
    assert_eq!(t.codec().header(&undone).version, 1);
    assert!(
        !a_mix_decodes(&t, &undone, &next),
        "a torn READ decoded as whole"
    );
}

/// FaRM reads without a lock and locks at commit: a record rolled back in between is back at
/// the version it read, but one restore up. Its commit must abort (its install would carry
/// the restore count it read, and be stamped like the undone install), not commit.
#[test]
fn a_commit_over_a_record_rolled_back_since_it_was_read_aborts() {
    let cfg = TxnConfig {
        protocol: Protocol::Farm,
        ..TxnConfig::default()
    };
    let (r, back) = common::with_coordinator(two_line_pool(), cfg, |mut c| async move {
        let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
        let t = map.table(T).unwrap().clone();
        let (offset, image) = record_of(c.endpoint(), &t, KEY).await;
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.fetch(&[Access::update(T, KEY)]).await.unwrap();
        install_cut_off_and_rolled_back(tx.endpoint(), &map, &t, offset, &image).await;
        tx.update(T, KEY, &[0x11; 100]).await.unwrap();
        let r = tx.commit().await;
        let (_, back) = record_of(c.endpoint(), &t, KEY).await;
        (r.map_err(|a| a.reason), back)
    });
    assert_eq!(r, Err(dtxn_txn::AbortReason::Validation));
    let h = dtxn_store::SingleVersion::new(100).header(&back);
    assert_eq!(
        (h.version, h.restores, h.lock),
        (0, 1, 0),
        "left as rolled back"
    );
}

/// A commit's install leaves each backup's record invisible under the committer's owner id,
/// for the next install to overwrite (recovery tells the dead coordinator's install from
/// another's on a promoted backup by it: `mechanisms/settle.rs`). The coordinator crashes at
/// each instant of a commit of KEY; wherever a backup holds the new record, the lock word is
/// the committer's, invisible.
#[test]
fn a_backup_holds_the_install_invisible_under_the_committers_id() {
    let owner = 1u64; // coordinator 0's
    let mut held = 0;
    for at in (0..20_000).step_by(100) {
        let mut pool = two_line_pool_crashing(Some(at));
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        let one = Topology {
            compute_nodes: 1,
            threads: 1,
            coroutines: 1,
        };
        sim.run(one, None, |mut ep: Endpoint| async move {
            let map = std::rc::Rc::new(PoolMap::bootstrap(&mut ep).await.ok()?);
            let mut c = dtxn_txn::Coordinator::new(ep, map, std::rc::Rc::new(TxnConfig::default()));
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, KEY)]).await.ok()?;
            tx.update(T, KEY, &[0x22; 100]).await.ok()?;
            tx.commit().await.ok()
        })
        .unwrap();
        let plan = two_line_plan();
        let t = plan.table(T).unwrap();
        let header_on = |n| {
            let mut bucket = vec![0u8; t.bucket_bytes as usize];
            pool.with_local(n, |m| m.read(t.home_bucket(KEY), &mut bucket));
            (0..t.slots_per_bucket)
                .map(|s| t.codec().header(t.slot_bytes(&bucket, s)))
                .find(|h| h.valid && h.key == KEY)
                .expect("KEY in its home bucket")
        };
        let backup = header_on(t.backups()[0]);
        if backup.version == 1 {
            assert_eq!(backup.lock, owner | 1 << 63, "crash at {at} ns");
            held += 1;
        }
    }
    assert!(held > 0, "no instant caught an install before its release");
}

/// An insert rolled back by recovery leaves its slot free one restore up, at the version the
/// slot had; an insert of the same key then takes that slot again, at the undone insert's
/// version. It must carry the slot's count, or it is stamped like the undone insert (an
/// insert's version is above the slot's stamps, but not above an undone insert's).
#[test]
fn an_insert_into_a_slot_whose_insert_was_rolled_back_is_stamped_apart_from_it() {
    const NEW: u64 = 1000;
    let (undone, next, reused, t) =
        common::with_coordinator(two_line_pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let ep = c.endpoint();
            let (offset, slot) = free_slot(ep, &t, NEW).await;
            let image = slot[..t.record_bytes as usize].to_vec();
            // The dead coordinator's insert of NEW there: logged, locked, on the primary only.
            let owner = u64::from(DEAD) + 1;
            let entry = pending_undo(DEAD, 99, T, offset, true, image.clone());
            write_entry(ep, &map, &entry);
            let cas = ep.cas(t.primary(), offset, 0, owner);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let h = dtxn_store::record::RecordHeader {
                lock: owner | (1 << 63),
                version: t.codec().header(&image).version + 1,
                key: NEW,
                table: T,
                valid: true,
                restores: 0,
            };
            let mut install = vec![0u8; t.record_bytes as usize];
            t.codec().encode(&h, &[0xEE; 100], &mut install);
            ep.write(t.primary(), offset, &install);
            ep.post().await.unwrap();
            let (outcome, _) = recover(ep, &map, Protocol::Ford, DEAD).await.unwrap();
            assert_eq!(outcome, Recovered::RolledBack(99));
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.insert(T, NEW, &[0x11; 100]).await.unwrap();
            tx.commit().await.unwrap();
            let (at, next) = record_of(c.endpoint(), &t, NEW).await;
            (install, next, at == offset, t)
        });
    assert!(
        reused,
        "the insert took another slot: the scenario needs the same one"
    );
    let (u, n) = (t.codec().header(&undone), t.codec().header(&next));
    assert_eq!((n.version, n.restores), (u.version, 1), "{u:?} {n:?}");
    assert!(
        !a_mix_decodes(&t, &undone, &next),
        "a torn READ decoded as whole"
    );
}

/// An insert whose entry logs no image of the slot (an empty one): recovery frees the slot
/// stamped above the insert it undoes, so that nothing read of the undone insert validates
/// against the free slot, and the slot's next insert is stamped apart from it (a free slot
/// at the undone insert's version, or below it, repeated or lowered its stamps).
#[test]
fn an_insert_logged_without_an_image_is_freed_above_its_version() {
    const NEW: u64 = 1001;
    let (inserted, freed) =
        common::with_coordinator(two_line_pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let ep = c.endpoint();
            let (offset, slot) = free_slot(ep, &t, NEW).await;
            let slot = t.codec().header(&slot);
            let owner = u64::from(DEAD) + 1;
            let entry = pending_undo(DEAD, 99, T, offset, true, Vec::new());
            write_entry(ep, &map, &entry);
            let cas = ep.cas(t.primary(), offset, 0, owner);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let h = dtxn_store::record::RecordHeader {
                lock: owner | (1 << 63),
                version: slot.version + 3,
                key: NEW,
                table: T,
                valid: true,
                restores: 0,
            };
            let mut install = vec![0u8; t.record_bytes as usize];
            t.codec().encode(&h, &[0xEE; 100], &mut install);
            // On the primary only: not installed everywhere, so undone.
            ep.write(t.primary(), offset, &install);
            ep.post().await.unwrap();
            let (outcome, _) = recover(ep, &map, Protocol::Ford, DEAD).await.unwrap();
            assert_eq!(outcome, Recovered::RolledBack(99));
            let mut freed = Vec::new();
            for &n in &t.replicas {
                let r = ep.read(n, offset, t.record_bytes as usize);
                ep.post().await.unwrap();
                freed.push(t.codec().header(ep.bytes(r)));
            }
            (h, freed)
        });
    for f in freed {
        assert!(!f.valid, "{f:?}");
        assert_eq!(
            f.version,
            inserted.version + 1,
            "above the undone insert: {f:?}"
        );
    }
}

/// A cold item's undo image is logged before its lock: two roll-backs may come between (the
/// record back at the image's version, two restores up), then the dead coordinator's lock,
/// which sees the count changed and aborts, and its crash. Its recovery must not write the
/// stale image one restore up (the count would go down, to that of the first roll-back, and
/// the next commit would be stamped like the second's undone install): nothing of it landed.
#[test]
fn recovery_never_lowers_a_records_restore_count() {
    let (undone, recovered, next, t) =
        common::with_coordinator(two_line_pool(), TxnConfig::default(), |mut c| async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(T).unwrap().clone();
            let (offset, stale) = record_of(c.endpoint(), &t, KEY).await;
            install_cut_off_and_rolled_back(c.endpoint(), &map, &t, offset, &stale).await;
            let (_, once) = record_of(c.endpoint(), &t, KEY).await;
            let undone =
                install_cut_off_and_rolled_back(c.endpoint(), &map, &t, offset, &once).await;
            // Coordinator 2 read KEY cold as `stale`, logged it, locked it at commit, found it
            // changed and crashed.
            let dead = 2u32;
            let entry = pending_undo(dead, 77, T, offset, false, stale);
            let ep = c.endpoint();
            write_entry(ep, &map, &entry);
            let cas = ep.cas(t.primary(), offset, 0, u64::from(dead) + 1);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let (outcome, _) = recover(ep, &map, Protocol::Ford, dead).await.unwrap();
            assert_eq!(outcome, Recovered::RolledBack(77));
            let (_, recovered) = record_of(c.endpoint(), &t, KEY).await;
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, KEY)]).await.unwrap();
            tx.update(T, KEY, &[0x11; 100]).await.unwrap();
            tx.commit().await.unwrap();
            let (_, next) = record_of(c.endpoint(), &t, KEY).await;
            (undone, recovered, next, t)
        });
    let h = t.codec().header(&recovered);
    assert_eq!((h.version, h.restores, h.lock), (0, 2, 0), "{h:?}");
    assert!(
        !a_mix_decodes(&t, &undone, &next),
        "a torn READ decoded as whole"
    );
}

/// A dead coordinator's install that reached one backup alone, its primary then failing
/// before recovery: in the new view the promoted backup holds the image (no id of the dead's:
/// its lock died with the primary), another backup the install. Recovery must roll that one
/// back too (it judged the promoted record "never landed" and left the other backup with a
/// version that never committed, a primary-backup mismatch and, were the promoted one to fail
/// next, an uncommitted value served).
#[test]
fn recovery_in_a_new_view_rolls_back_an_install_left_on_another_backup() {
    // Its install, on the last backup alone (invisible with its id, as commits leave
    // backups).
    let last = |t: &TableInfo| vec![*t.replicas.last().unwrap()];
    let (outcome, records, t) = promoted_after_a_dead_install(LogStatus::Pending, true, last, None);
    assert_eq!(outcome, Recovered::RolledBack(99));
    for (n, rec) in &records {
        let mut value = vec![0u8; 100];
        let h = t.codec().decode(rec, &mut value).unwrap();
        assert_eq!((h.version, value[0]), (0, KEY as u8), "node {n}: {h:?}");
    }
}

/// A dead coordinator's commit installed on every replica and released, its log entry left
/// pending (the crash cut off its close), its primary then failing before recovery: in the
/// new view the promoted backup holds the install, whole and newer than the entry's image,
/// without the dead's id (its lock died with the primary, and was released anyway). That is
/// an acknowledged commit (or another's over our image): recovery must leave it. (Judging
/// such a record held, as a mutant of the promoted-primary branch did, undoes it: no test
/// noticed until this one.)
#[test]
fn recovery_in_a_new_view_leaves_a_whole_newer_record_on_a_promoted_primary() {
    // Its install on every replica, released (lock word 0 everywhere).
    let (outcome, records, t) =
        promoted_after_a_dead_install(LogStatus::Pending, false, |t| t.replicas.clone(), None);
    assert_ne!(outcome, Recovered::RolledBack(99));
    assert_eq!(records.len(), 2, "the live replicas");
    for (n, rec) in &records {
        let mut value = vec![0u8; 100];
        let h = t.codec().decode(rec, &mut value).unwrap();
        assert_eq!(
            (h.version, h.lock, value[0]),
            (1, 0, 0xEE),
            "node {n}: {h:?}"
        );
    }
}

/// A dead coordinator's install on every live backup, its primary then failing: the promoted
/// backup shows it whole, under the dead's id, and cannot show whether the failed primary got
/// the commit's last batch (DrTM+H's primaries' round, after a re-validation that may have
/// failed). Only an entry that says `Decided` (written in that batch) rolls forward; a pending
/// one is rolled back: it was never acknowledged. (Judged by the replicas alone, a commit whose
/// re-validation failed was rolled forward: write skew; found by a review.)
#[test]
fn on_a_promoted_backup_only_a_decided_entry_rolls_forward() {
    let backups = |t: &TableInfo| t.backups().to_vec();
    for (status, want_forward) in [(LogStatus::Pending, false), (LogStatus::Decided, true)] {
        let (outcome, records, t) = promoted_after_a_dead_install(status, true, backups, None);
        let forward = matches!(outcome, Recovered::RolledForward(_));
        assert_eq!(forward, want_forward, "{status:?}: {outcome:?}");
        let want = if want_forward {
            (1, 0xEE)
        } else {
            (0, KEY as u8)
        };
        for (n, rec) in &records {
            let mut value = vec![0u8; 100];
            let h = t.codec().decode(rec, &mut value).unwrap();
            assert_eq!((h.version, value[0]), want, "{status:?}, node {n}: {h:?}");
        }
    }
}

/// A decided commit that installed KEY everywhere and also logged KEY + 1 (fetched for update,
/// never written), its primary then failing: KEY + 1 sits at its image's version on the
/// promoted backup, which recovery judged "our write never landed" and rolled the commit back.
/// The commit marks such items in its entry's unwritten-items word, and recovery leaves them
/// out: the acknowledged commit stays. (Found by a review; the same mark keeps recovery from
/// taking our next transaction's lock on such an item for this one's.)
#[test]
fn an_item_marked_unwritten_is_left_out_of_recovery() {
    for mark in [false, true] {
        let all = |t: &TableInfo| t.replicas.clone();
        let (outcome, records, t) =
            promoted_after_a_dead_install(LogStatus::Decided, true, all, Some(mark));
        let mut v = vec![0u8; 100];
        t.codec().decode(&records[0].1, &mut v).unwrap();
        let value = v[0];
        let forward = matches!(outcome, Recovered::RolledForward(_));
        assert_eq!(forward, mark, "marked {mark}: {outcome:?}");
        assert_eq!(value, if mark { 0xEE } else { KEY as u8 }, "marked {mark}");
    }
}

/// Three memory nodes, three replicas, the table whose primary is node 1: the dead
/// coordinator logs `KEY` (transaction 99, its entry saying `status`), locks it on node 1 and
/// installs it (version + 1, value 0xEE) on the replicas `on` picks, invisible under its id
/// if `held`, released (lock word 0) if not; with `unwritten`, the entry logs KEY + 1 too,
/// never written, marked so in the entry's unwritten-items word if `Some(true)`; node 1 then
/// fails for good, the view changes without it, and recovery runs in the new view. Its
/// outcome, each live replica's record of KEY (the primary's first), the table.
fn promoted_after_a_dead_install(
    status: LogStatus,
    held: bool,
    on: fn(&TableInfo) -> Vec<u16>,
    unwritten: Option<bool>,
) -> (Recovered, Vec<(u16, Vec<u8>)>, TableInfo) {
    use dtxn_fabric::sim::MemoryCrash;
    const FAIL_NS: u64 = 1_000_000;
    let shape = PoolShape {
        memory_nodes: 3,
        replicas: 3,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let plan = Plan::new(
        &[
            TableSpec::new(T, "a", 100, 100),
            TableSpec::new(T + 1, "b", 100, 100),
        ],
        &shape,
    )
    .unwrap();
    // The table whose primary is node 1 (node 0, which holds the view, never fails).
    let b = [T, T + 1]
        .into_iter()
        .find(|&id| plan.table(id).unwrap().primary() == 1)
        .expect("a table on node 1");
    let mut cfg = SimConfig::new(1, 3, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = Adversary::off();
    cfg.faults.memory_crashes = vec![MemoryCrash {
        at_ns: FAIL_NS,
        node: 1,
        down_ns: MemoryCrash::FOREVER,
    }];
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(b).unwrap());
    for k in 0..20u64 {
        l.insert(&pool, k, &[k as u8; 100]).unwrap();
    }
    let (outcome, records) = common::with_coordinator(pool, TxnConfig::default(), move |mut c| {
        async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let t = map.table(b).unwrap().clone();
            let ep = c.endpoint();
            let (offset, image) = record_of(ep, &t, KEY).await;
            let owner = u64::from(DEAD) + 1;
            let mut entry = pending_undo(DEAD, 99, b, offset, false, image.clone());
            entry.status = status;
            if unwritten.is_some() {
                let (other, other_image) = record_of(ep, &t, KEY + 1).await;
                entry.items.push(LogItem {
                    table: b,
                    offset: other,
                    insert: false,
                    kind: ItemKind::Undo,
                    image: other_image,
                });
            }
            write_entry(ep, &map, &entry);
            if unwritten == Some(true) {
                let (slice, _) = map.log_slice(DEAD).unwrap();
                for n in map.live_nodes() {
                    let at = slice + dtxn_store::log::UNWRITTEN_OFF;
                    ep.write(n, at, &0b10u64.to_le_bytes());
                }
            }
            let cas = ep.cas(t.primary(), offset, 0, owner);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            let mut h = t.codec().header(&image);
            h.version += 1;
            h.lock = if held { owner | (1 << 63) } else { 0 };
            let mut install = vec![0u8; t.record_bytes as usize];
            t.codec().encode(&h, &[0xEE; 100], &mut install);
            for n in on(&t) {
                ep.write(n, offset, &install);
            }
            ep.post().await.unwrap();
            // Node 1 fails; the view changes without it.
            let now = ep.now_ns();
            ep.sleep(2 * FAIL_NS - now.min(FAIL_NS)).await;
            let next = View::default().without(&[1]).unwrap();
            let one = dtxn_fabric::NodeSet::single(0);
            let out = dtxn_txn::membership::change_view(ep, one, View::default(), next).await;
            assert_eq!(out, Ok(dtxn_txn::control::Write::Done));
            let map = PoolMap::bootstrap(ep).await.unwrap();
            let t = map.table(b).unwrap().clone();
            assert_ne!(t.primary(), 1, "promoted");
            let mut r = recovery::recover_all_in_views(ep, &map, Protocol::Ford, &[(DEAD, true)])
                .await
                .unwrap();
            let (outcome, _) = r.pop().unwrap();
            let mut records = Vec::new();
            for &n in &t.replicas {
                let r = ep.read(n, offset, t.record_bytes as usize);
                ep.post().await.unwrap();
                records.push((n, ep.bytes(r).to_vec()));
            }
            (outcome, records)
        }
    });
    (outcome, records, plan.table(b).unwrap().clone())
}

/// MVCC's writer freezes the rts word of what it writes (metadata word 0) before installing:
/// a dead one that froze it and never installed leaves the record whole at its image's
/// version, with the word frozen. Recovery must put the image's word back (it once judged
/// such a record untouched and left it frozen: every reader above it then aborted until a
/// writer came).
#[test]
fn recovery_unfreezes_the_rts_word_of_a_dead_mvcc_writer() {
    let pool = meta_pool(Protocol::Mvcc, 8192);
    let txn = TxnConfig {
        protocol: Protocol::Mvcc,
        ..TxnConfig::default()
    };
    let (word, read) = common::with_coordinator(pool, txn, |mut c| async move {
        let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
        let t = map.table(T).unwrap().clone();
        let ep = c.endpoint();
        let (offset, image) = record_of(ep, &t, KEY).await;
        let owner = u64::from(DEAD) + 1;
        let entry = pending_undo(DEAD, 99, T, offset, false, image.clone());
        write_entry(ep, &map, &entry);
        let cas = ep.cas(t.primary(), offset, 0, owner);
        let rts = offset + dtxn_store::record::META_OFF as u64;
        let word = t.codec().meta_word(&image, 0);
        let freeze = ep.cas(t.primary(), rts, word, word | 1 << 63);
        ep.post().await.unwrap();
        assert!(ep.cas_ok(cas) && ep.cas_ok(freeze));
        recover(ep, &map, Protocol::Mvcc, DEAD).await.unwrap();
        let r = ep.read(t.primary(), rts, 8);
        ep.post().await.unwrap();
        let now = ep.word(r, 0);
        let mut tx = c.begin(TxKind::ReadOnly);
        let read = async {
            tx.fetch(&[Access::read(T, KEY)]).await?;
            tx.commit().await
        };
        (now, read.await.map_err(|a| a.reason))
    });
    assert_eq!(word & 1 << 63, 0, "the rts word left frozen: {word:#x}");
    assert_eq!(read, Ok(()));
}

/// The same without a log entry to settle: the dead writer's undo log had not landed (it is
/// posted in the background, and a crash may cut it) when its freeze, awaited, did. Its lock
/// is all recovery finds; the freeze under it is the dead's too (a writer freezes only under
/// its lock, and unfreezes before it unlocks), and must be undone before the lock is freed,
/// or every reader above it aborts until a writer comes (a read-only transaction retried
/// forever, in a run whose other coordinators were done: `dtxn torture --protocols mvcc
/// --workloads kv --adversary harsh --faults memory=1,compute=1 --first-seed 81000883`).
/// MVCC's rts words and SUNDIAL's leases, a record's and a chain's (an insert's), with the
/// dead's locks found by the scan and by its lock journal.
#[test]
fn recovery_unfreezes_a_dead_writers_freeze_without_a_log_entry() {
    for protocol in [Protocol::Mvcc, Protocol::Sundial] {
        for chain in [false, true] {
            for journal in [false, true] {
                let (word, lock, read) = dead_freeze_recovered(protocol, chain, journal);
                let case = format!("{protocol:?}, chain {chain}, journal {journal}");
                assert_eq!(
                    word & 1 << 63,
                    0,
                    "{case}: left frozen: {word:#x}, lock {lock:#x}"
                );
                assert_eq!(lock, 0, "{case}");
                assert_eq!(read, Ok(()), "{case}");
            }
        }
    }
}

/// A key of the table that is never loaded.
const ABSENT: u64 = 500;

/// A dead writer holds a lock and has frozen the word beside it, and logged nothing: `KEY`'s
/// record lock and rts word (or lease), or with `chain` the insert lock of `ABSENT`'s chain
/// and its chain word. Recovery runs (the lock found by the scan, or with `journal` by the
/// dead's lock journal: the dead is then this coordinator, its lock taken for real). Returns
/// the frozen word and the lock word after it, and how a read-only transaction of the key
/// fares after it.
fn dead_freeze_recovered(
    protocol: Protocol,
    chain: bool,
    journal: bool,
) -> (u64, u64, Result<(), AbortReason>) {
    // Room for the lock journals too.
    let pool = meta_pool(protocol, 16384);
    let txn = TxnConfig {
        protocol,
        lock_journal: journal,
        ..TxnConfig::default()
    };
    let key = if chain { ABSENT } else { KEY };
    common::with_coordinator(pool, txn, move |mut c| async move {
        let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
        let t = map.table(T).unwrap().clone();
        let home = t.home_bucket(ABSENT);
        let (lock_at, frozen_at) = if chain {
            (
                t.insert_lock(home),
                home + dtxn_store::index::CHAIN_META_OFF,
            )
        } else {
            let (offset, _) = record_of(c.endpoint(), &t, KEY).await;
            (offset, offset + dtxn_store::record::META_OFF as u64)
        };
        let dead = if journal {
            // This coordinator is the dead one: its lock taken for real (journaled), its
            // transaction then forgotten, its log entry as if the undo log never landed.
            // (The record's address cached first, so that the read for update locks it.)
            let mut tx = c.begin(TxKind::ReadOnly);
            tx.read(T, KEY).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = c.begin(TxKind::ReadWrite);
            match chain {
                true => tx.insert(T, ABSENT, &[7; 8]).await.unwrap(),
                false => tx.read_for_update(T, KEY).await.map(|_| ()).unwrap(),
            }
            std::mem::forget(tx);
            let ep = c.endpoint();
            ep.wait_background().await.unwrap();
            let (slice, _) = map.log_slice(0).unwrap();
            let empty = (LogStatus::Empty as u64).to_le_bytes();
            for n in 0..2 {
                ep.write(n, slice + dtxn_store::log::STATUS_OFF, &empty);
            }
            ep.post().await.unwrap();
            0
        } else {
            // A lock word of an earlier attempt of the dead's, a timestamp's place above its id.
            let owner = (77 << 16) | (u64::from(DEAD) + 1);
            let ep = c.endpoint();
            let cas = ep.cas(t.primary(), lock_at, 0, owner);
            ep.post().await.unwrap();
            assert!(ep.cas_ok(cas));
            DEAD
        };
        let ep = c.endpoint();
        assert_ne!(
            word_of(ep, t.primary(), lock_at).await,
            0,
            "the dead's lock"
        );
        let word = word_of(ep, t.primary(), frozen_at).await;
        let freeze = ep.cas(t.primary(), frozen_at, word, word | 1 << 63);
        ep.post().await.unwrap();
        assert!(ep.cas_ok(freeze));
        recover(ep, &map, protocol, dead).await.unwrap();
        let (lock, now) = (
            word_of(ep, t.primary(), lock_at).await,
            word_of(ep, t.primary(), frozen_at).await,
        );
        let mut tx = c.begin(TxKind::ReadOnly);
        let read = async {
            tx.fetch(&[Access::read(T, key)]).await?;
            tx.commit().await
        };
        (now, lock, read.await.map_err(|a| a.reason))
    })
}

/// The word at `addr` on node `n`.
async fn word_of(ep: &mut Endpoint, n: u16, addr: u64) -> u64 {
    let r = ep.read(n, addr, 8);
    ep.post().await.unwrap();
    ep.word(r, 0)
}

/// Two memory nodes, two replicas of table `T` (keys 0..20) with `protocol`'s metadata words,
/// and log slices of `log_slice_bytes`.
fn meta_pool(protocol: Protocol, log_slice_bytes: u64) -> Pool {
    meta_pool_crashing(protocol, log_slice_bytes, None)
}

/// [`meta_pool`], its compute node crashing at `crash` (virtual ns), if given.
fn meta_pool_crashing(protocol: Protocol, log_slice_bytes: u64, crash: Option<u64>) -> Pool {
    meta_pool_under(protocol, log_slice_bytes, crash, (1, Adversary::off()))
}

/// [`meta_pool_crashing`] with the sim's seed and adversary.
fn meta_pool_under(
    protocol: Protocol,
    log_slice_bytes: u64,
    crash: Option<u64>,
    (seed, adversary): (u64, Adversary),
) -> Pool {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes,
        region_bytes: None,
    };
    let spec = common::for_protocol(protocol, TableSpec::new(T, "t", 8, 100));
    let plan = Plan::new(&[spec], &shape).unwrap();
    let mut cfg = SimConfig::new(seed, 2, plan.region_bytes);
    cfg.profile = Profile::ideal();
    cfg.adversary = adversary;
    cfg.faults.compute_crashes = crash
        .map(|at_ns| ComputeCrash {
            at_ns,
            compute_node: 0,
        })
        .into_iter()
        .collect();
    let pool = Pool::Sim(SimPool::new(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..20u64 {
        l.insert(&pool, k, &k.to_le_bytes()).unwrap();
    }
    pool
}

/// An acknowledged commit that locked an item for update and left it unwritten survives its
/// coordinator's crash: the coordinator fetches KEY and KEY + 1 for update, writes KEY alone,
/// commits, and crashes at each instant (every 40 ns) of the commit and its release; wherever
/// the commit was acknowledged, KEY holds the new value after recovery. Held to the release,
/// the unwritten item's lock stood in the pending entry at its image's version, which recovery
/// cannot tell from a write cut off everywhere: it rolled the commit back (FORD: 5 of 1,249
/// acknowledged commits lost, found by a review). Now the install's first batch unlocks it.
/// Unlocked, it may be locked again by the coordinator's next transaction before this one's
/// release closes the entry, which recovery took for this one's lock (FORD and NO_WAIT under
/// the hostile adversary, seed 6: 1 and 2 of 10 instants); the install's batch also marks it
/// unwritten in the entry, and recovery leaves it out.
#[test]
fn an_acknowledged_commit_with_an_item_locked_but_unwritten_survives_recovery() {
    let protocols = [
        Protocol::Ford,
        Protocol::Farm,
        Protocol::Drtmh,
        Protocol::NoWait,
        Protocol::WaitDie,
        Protocol::Sundial,
        Protocol::Mvcc,
        Protocol::Scythe,
    ];
    for protocol in protocols {
        let off = (1, Adversary::off());
        unwritten_item_sweep(protocol, (2_000..10_000).step_by(40), off, false);
    }
    for protocol in [Protocol::Ford, Protocol::NoWait] {
        let hostile = (6, Adversary::hostile());
        unwritten_item_sweep(protocol, (8_000..9_000).step_by(100), hostile, true);
    }
}

/// [`an_acknowledged_commit_with_an_item_locked_but_unwritten_survives_recovery`]'s sweep:
/// a crash at each of `instants`, the sim's `(seed, adversary)`, with `relock` the next
/// transaction locking KEY + 1 again at once.
fn unwritten_item_sweep(
    protocol: Protocol,
    instants: impl Iterator<Item = u64>,
    sim_under: (u64, Adversary),
    relock: bool,
) {
    use std::cell::Cell;
    use std::rc::Rc;
    {
        let (mut acknowledged, mut lost) = (0, Vec::new());
        for at in instants {
            let mut pool = meta_pool_under(protocol, 4096, Some(at), sim_under.clone());
            let Pool::Sim(sim) = &mut pool else {
                unreachable!()
            };
            if protocol == Protocol::Scythe {
                sim.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
            }
            let one = Topology {
                compute_nodes: 1,
                threads: 1,
                coroutines: 1,
            };
            let acked = Rc::new(Cell::new(false));
            let flag = acked.clone();
            sim.run(one, None, move |mut ep: Endpoint| {
                let flag = flag.clone();
                async move {
                    let map = Rc::new(PoolMap::bootstrap(&mut ep).await.ok()?);
                    let cfg = TxnConfig {
                        protocol,
                        ..TxnConfig::default()
                    };
                    let mut c = dtxn_txn::Coordinator::new(ep, map, Rc::new(cfg));
                    let mut tx = c.begin(TxKind::ReadWrite);
                    let both = [Access::update(T, KEY), Access::update(T, KEY + 1)];
                    tx.fetch(&both).await.ok()?;
                    tx.update(T, KEY, &[0x22; 8]).await.ok()?;
                    tx.commit().await.ok()?;
                    flag.set(true);
                    if relock {
                        let mut next = c.begin(TxKind::ReadWrite);
                        let _ = next.fetch(&[Access::update(T, KEY + 1)]).await;
                        std::mem::forget(next);
                    }
                    // Idle until the crash, so that it may fall after the release too.
                    c.endpoint().sleep(20_000).await;
                    Some(())
                }
            })
            .unwrap();
            sim.set_faults(Default::default());
            let cfg = TxnConfig {
                protocol,
                ..TxnConfig::default()
            };
            let value = common::with_coordinator_in(&mut pool, cfg, move |mut c| async move {
                let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
                let t = map.table(T).unwrap().clone();
                let ep = c.endpoint();
                recover(ep, &map, protocol, 0).await.unwrap();
                let (_, record) = record_of(ep, &t, KEY).await;
                let mut v = vec![0u8; 8];
                t.codec().decode(&record, &mut v).unwrap();
                v[0]
            });
            if acked.get() {
                acknowledged += 1;
                if value != 0x22 {
                    lost.push(at);
                }
            }
        }
        assert!(
            lost.is_empty(),
            "{protocol:?}, relock {relock}: acknowledged commits rolled back, crashing at \
             {lost:?} ns"
        );
        assert!(
            acknowledged >= 5,
            "{protocol:?}: {acknowledged} acknowledged"
        );
    }
}

/// A dead inserter's frozen chain word thaws at or above its commit, as its release would
/// have left it (MVCC: the rts word at `ctts` at least; SUNDIAL: a lease whose rts reaches
/// `commit_ts`): its own absent reads of the chain rest on that word (it never raises the
/// word it freezes), and thawed to what it held before the freeze, a later insert of a key
/// it read absent could commit beneath it. The coordinator inserts ABSENT and crashes at
/// each instant of its commit; recovery runs; wherever ABSENT ended committed (rolled
/// forward, or released), the chain word is checked against the record's version (its
/// commit timestamp).
#[test]
fn a_dead_inserters_chain_word_thaws_at_or_above_its_commit() {
    for protocol in [Protocol::Mvcc, Protocol::Sundial] {
        let (mut committed, mut held) = (0, 0);
        for at in (0..12_000).step_by(50) {
            let mut pool = meta_pool_crashing(protocol, 16384, Some(at));
            let Pool::Sim(sim) = &mut pool else {
                unreachable!()
            };
            let one = Topology {
                compute_nodes: 1,
                threads: 1,
                coroutines: 1,
            };
            sim.run(one, None, move |mut ep: Endpoint| async move {
                let map = std::rc::Rc::new(PoolMap::bootstrap(&mut ep).await.ok()?);
                let cfg = TxnConfig {
                    protocol,
                    ..TxnConfig::default()
                };
                let mut c = dtxn_txn::Coordinator::new(ep, map, std::rc::Rc::new(cfg));
                let mut tx = c.begin(TxKind::ReadWrite);
                tx.insert(T, ABSENT, &[7; 8]).await.ok()?;
                tx.commit().await.ok()
            })
            .unwrap();
            sim.set_faults(Default::default());
            let cfg = TxnConfig {
                protocol,
                ..TxnConfig::default()
            };
            let (chain, version, frozen_before) =
                common::with_coordinator_in(&mut pool, cfg, move |mut c| async move {
                    let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
                    let t = map.table(T).unwrap().clone();
                    let ep = c.endpoint();
                    let home = t.home_bucket(ABSENT);
                    let chain_at = home + dtxn_store::index::CHAIN_META_OFF;
                    let frozen_before = word_of(ep, t.primary(), chain_at).await >> 63 == 1;
                    recover(ep, &map, protocol, 0).await.unwrap();
                    let chain = word_of(ep, t.primary(), chain_at).await;
                    let r = ep.read(t.primary(), home, t.bucket_bytes as usize);
                    ep.post().await.unwrap();
                    let bucket = ep.bytes(r).to_vec();
                    let version = (0..t.slots_per_bucket)
                        .map(|s| t.codec().header(t.slot_bytes(&bucket, s)))
                        .find(|h| h.valid && h.key == ABSENT)
                        .map(|h| h.version);
                    (chain, version, frozen_before)
                });
            let Some(version) = version else { continue };
            committed += 1;
            held += u32::from(frozen_before);
            assert_eq!(
                chain >> 63,
                0,
                "{protocol:?}, crash at {at} ns: left frozen"
            );
            let reaches = match protocol {
                // The lease: `wts`'s low 31 bits above bit 32, `delta` below.
                Protocol::Sundial => ((chain >> 32) & ((1 << 31) - 1)) + (chain & 0xffff_ffff),
                _ => chain,
            };
            assert!(
                reaches >= version,
                "{protocol:?}, crash at {at} ns: the chain word {chain:#x} thawed below the \
                 commit at {version}"
            );
        }
        // Some instant fell between the install and the release.
        assert!(
            held > 0,
            "{protocol:?}: no crash left a committed insert's freeze"
        );
        assert!(
            committed > held,
            "{protocol:?}: {committed} committed, {held} frozen"
        );
    }
}

/// A free slot in `key`'s home bucket: its offset, and its bytes as they are.
async fn free_slot(ep: &mut Endpoint, t: &TableInfo, key: u64) -> (u64, Vec<u8>) {
    let home = t.home_bucket(key);
    let r = ep.read(t.primary(), home, t.bucket_bytes as usize);
    ep.post().await.unwrap();
    let bucket = ep.bytes(r).to_vec();
    let s = (0..t.slots_per_bucket)
        .find(|&s| !t.codec().header(t.slot_bytes(&bucket, s)).valid)
        .expect("a free slot");
    (t.slot(home, s), t.slot_bytes(&bucket, s).to_vec())
}
