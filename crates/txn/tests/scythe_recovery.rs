//! Scythe survives a crashed coordinator: its takeout tickets are given back by recovery (from
//! the grant journals the memory nodes keep), and recovery's roll-back leaves the takeout
//! words alone.

use dtxn_fabric::sim::{ComputeCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::log::{ItemKind, LogEntry, LogItem, LogStatus};
use dtxn_store::record::{RecordHeader, META_OFF};
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableInfo, TableSpec};
use dtxn_txn::membership::{self, LeaseConfig, Service};
use dtxn_txn::recovery::{recover, Recovered};
use dtxn_txn::{AbortReason, Access, Coordinator, Protocol, ScytheMode, TxKind, TxnConfig};
use std::cell::Cell;
use std::rc::Rc;

mod common;

const T: u32 = 1;
const KEYS: u64 = 16;
/// One coordinator.
const ONE: Topology = Topology {
    compute_nodes: 1,
    threads: 1,
    coroutines: 1,
};

thread_local! {
    /// Bytes of a value: 64 (two lines with the header and the takeout words) unless a test
    /// sets 8 (one line).
    static SIZE: Cell<usize> = const { Cell::new(64) };
}

/// A value holding `v` in its first and last words.
fn value(v: u64) -> Vec<u8> {
    let n = SIZE.with(Cell::get);
    let mut b = vec![0u8; n];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b[n - 8..].copy_from_slice(&v.to_le_bytes());
    b
}

/// A loaded Scythe pool (2 memory nodes, `replicas`), every key holding 1000, with `crashes`.
fn pool(seed: u64, replicas: usize, crashes: Vec<ComputeCrash>) -> (Pool, Plan, SimConfig) {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas,
        log_slices: 16,
        log_slice_bytes: 8192,
        region_bytes: None,
    };
    let size = SIZE.with(Cell::get);
    let spec = TableSpec::new(T, "t", size, KEYS).with_meta_words(Protocol::Scythe.meta_words());
    let plan = Plan::new(&[spec], &shape).unwrap();
    let mut cfg = SimConfig::new(seed, 2, plan.region_bytes);
    cfg.faults.compute_crashes = crashes;
    let mut pool = Pool::Sim(SimPool::new(cfg.clone()).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..KEYS {
        l.insert(&pool, k, &value(1000)).unwrap();
    }
    (pool, plan, cfg)
}

/// Where key `k` lives on its table's primary (by the memory node's own CPU).
fn offset_of(pool: &Pool, t: &TableInfo, k: u64) -> u64 {
    let mut b = vec![0u8; t.bucket_bytes as usize];
    for i in 0..t.bucket_count + t.overflow_buckets {
        let base = t.bucket(i);
        pool.with_local(t.primary(), |m| m.read(base, &mut b));
        for s in 0..t.slots_per_bucket {
            let h = t.codec().header(t.slot_bytes(&b, s));
            if h.valid && h.key == k {
                return t.slot(base, s);
            }
        }
    }
    panic!("key {k} not found")
}

/// The record at `off` on memory node 0, as its CPU reads it.
fn record_at(pool: &Pool, t: &TableInfo, off: u64) -> Vec<u8> {
    let mut b = vec![0u8; t.record_bytes as usize];
    pool.with_local(0, |m| m.read(off, &mut b));
    b
}

/// Key `k`'s takeout words on its primary: (GRANT, UPPER).
fn takeout_of(pool: &Pool, t: &TableInfo, k: u64) -> (u64, u64) {
    let at = offset_of(pool, t, k) + META_OFF as u64;
    pool.with_local(t.primary(), |m| (m.read_u64(at), m.read_u64(at + 8)))
}

fn tocc() -> Rc<TxnConfig> {
    let mut cfg = TxnConfig {
        protocol: Protocol::Scythe,
        ..TxnConfig::default()
    };
    cfg.scythe.mode = ScytheMode::Tocc;
    Rc::new(cfg)
}

/// Sets key `k` to `v` in one transaction; the abort if it does not commit.
async fn set(c: &mut Coordinator, k: u64, v: u64) -> Result<(), AbortReason> {
    let mut tx = c.begin(TxKind::ReadWrite);
    tx.fetch(&[Access::update(T, k)])
        .await
        .map_err(|a| a.reason)?;
    tx.update(T, k, &value(v)).await.map_err(|a| a.reason)?;
    tx.commit().await.map_err(|a| a.reason)
}

/// Coordinator `dead`'s pending log entry of transaction 42: one update of the record at
/// `offset` of table `T`, whose old image is `image`.
fn pending(dead: u32, offset: u64, image: Vec<u8>) -> LogEntry {
    LogEntry {
        txn: 42,
        coordinator: dead,
        status: LogStatus::Pending,
        tag: 0,
        items: vec![LogItem {
            table: T,
            offset,
            insert: false,
            kind: ItemKind::Undo,
            image,
        }],
    }
}

/// Coordinator 1 (compute node 1, TOCC) holds key 0's ticket, being served, and its header
/// lock when its compute node crashes. Coordinator 0 queues behind that ticket: without its
/// release it never gets the record (a granted ticket is a commitment the queue cannot pass).
/// Its waits end at a quarter of its lease, so between attempts its recovery service finds
/// coordinator 1 dead, frees its header lock and, from the grant
/// journal, releases its ticket; then coordinator 0 pays its own owed ticket and commits. The
/// queue ends empty.
#[test]
fn a_survivor_queued_behind_a_crashed_coordinators_ticket_commits_after_recovery() {
    for seed in 1..=3 {
        let crash = ComputeCrash {
            at_ns: 60_000,
            compute_node: 1,
        };
        let (mut pool, plan, cfg) = pool(seed, 2, vec![crash]);
        let lease = LeaseConfig::for_fabric(cfg.flight_bound_ns(), 0);
        let held = Rc::new(Cell::new(false));
        let Pool::Sim(sim) = &mut pool else {
            unreachable!()
        };
        let topo = Topology {
            compute_nodes: 2,
            threads: 1,
            coroutines: 1,
        };
        let r = sim
            .run(topo, None, |mut ep: Endpoint| {
                let held = held.clone();
                async move {
                    let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                    membership::join(&mut ep, lease, map.control_set())
                        .await
                        .unwrap();
                    let me = ep.id().index;
                    let mut service = Service::new(Protocol::Scythe, lease, 2, map.clone());
                    let mut c = Coordinator::new(ep, map, tocc());
                    if me == 1 {
                        // A first transaction caches key 0's address: TOCC then takes a
                        // ticket for it.
                        set(&mut c, 0, 1000).await.unwrap();
                        c.endpoint().sleep(10_000).await;
                        let mut tx = c.begin(TxKind::ReadWrite);
                        tx.fetch(&[Access::update(T, 0)]).await.unwrap();
                        held.set(true);
                        tx.endpoint().sleep(10_000_000).await;
                        unreachable!("its compute node crashed");
                    }
                    c.endpoint().sleep(40_000).await;
                    let mut blocked = 0;
                    loop {
                        service.tick(c.endpoint()).await.unwrap();
                        match set(&mut c, 0, 777).await {
                            Ok(()) => break,
                            Err(AbortReason::LockConflict) if blocked < 200 => blocked += 1,
                            Err(r) => panic!("seed {seed}: {r:?} after {blocked} attempts"),
                        }
                    }
                    let committed_at = c.endpoint().now_ns();
                    service.drain(c.endpoint()).await.unwrap();
                    (blocked, committed_at, service.events.clone())
                }
            })
            .unwrap();
        assert!(
            held.get(),
            "seed {seed}: the doomed coordinator held nothing"
        );
        assert!(r.outputs[1].is_none(), "seed {seed}: coordinator 1 crashed");
        let (blocked, committed_at, events) = r.outputs[0].clone().unwrap();
        assert!(blocked > 0, "seed {seed}: never queued");
        // (Reported again by a recovery that found its ticket still waiting, if one did.)
        let first = &events[0];
        assert_eq!((first.coordinator, first.by), (1, 0), "seed {seed}");
        // (Its undo log rides its next batch, which never left: nothing pending.)
        assert_eq!(first.outcome, Recovered::Nothing, "seed {seed}");
        // Its header lock and, from its journal, its ticket (being served).
        assert_eq!(first.locks_released, 2, "seed {seed}: {events:?}");
        let last = events.last().unwrap();
        assert!(
            committed_at > last.finished_ns,
            "seed {seed}: committed before recovery"
        );
        let t = plan.table(T).unwrap();
        let (grant, upper) = takeout_of(&pool, t, 0);
        assert_eq!(
            grant as u16, upper as u16,
            "seed {seed}: the queue ends empty (GRANT {grant:#x}, UPPER {upper})"
        );
        assert!(upper >= 2, "seed {seed}: the dead ticket and ours released");
        let codec = t.codec();
        for &n in &t.replicas {
            let off = offset_of(&pool, t, 0);
            let mut rec = vec![0u8; t.record_bytes as usize];
            pool.with_local(n, |m| m.read(off, &mut rec));
            let mut v = vec![0u8; 64];
            let h = codec.decode(&rec, &mut v).unwrap();
            // A backup's word is no lock: the last install's id, invisible.
            let lock = match n == t.primary() {
                true => h.lock,
                false => h.lock & !(1 << 63 | 0xffff),
            };
            assert_eq!((lock, v), (0, value(777)), "seed {seed}: node {n}");
        }
    }
}

/// A dead coordinator's install reached key 7's primary, not its backup: recovery rolls it
/// back. Meanwhile tickets were granted and released on the record (its takeout words moved
/// on from what the undo image holds). The roll-back restores the header and the value and
/// leaves GRANT and UPPER as they are: written from the image, UPPER would go back to 0 and
/// every later ticket would wait for releases that already happened.
#[test]
fn recoverys_roll_back_leaves_the_takeout_words_alone() {
    const KEY: u64 = 7;
    const DEAD: u32 = 3;
    let (pool, plan, _) = pool(1, 2, Vec::new());
    let t = plan.table(T).unwrap().clone();
    let off = offset_of(&pool, &t, KEY);
    let bytes = t.record_bytes as usize;
    let mut image = vec![0u8; bytes];
    pool.with_local(t.primary(), |m| m.read(off, &mut image));
    let old = t.codec().header(&image);
    // The install on the primary: invisible under the dead owner's lock, a version up.
    let owner = u64::from(DEAD) + 1;
    let installed = RecordHeader {
        lock: owner | 1 << 63,
        version: old.version + 1,
        ..old
    };
    let mut new = vec![0u8; bytes];
    t.codec().encode(&installed, &value(555), &mut new);
    pool.with_local(t.primary(), |m| {
        m.write(off, &new[..META_OFF]);
        m.write(
            off + t.codec().value_off() as u64,
            &new[t.codec().value_off()..],
        );
    });
    // Tickets went on meanwhile: 6 granted (the last to a timestamp 5), 3 released.
    let (grant, upper) = ((5u64 << 16) | 6, 3u64);
    let at = off + META_OFF as u64;
    pool.with_local(t.primary(), |m| {
        m.write_u64(at, grant);
        m.write_u64(at + 8, upper);
    });
    let entry = pending(DEAD, off, image);
    let cfg = TxnConfig {
        protocol: Protocol::Scythe,
        ..TxnConfig::default()
    };
    let t2 = t.clone();
    let (outcome, record, words) = common::with_coordinator(pool, cfg, move |mut c| {
        let (entry, t) = (entry.clone(), t2.clone());
        async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let ep = c.endpoint();
            let (slice, slice_bytes) = map.log_slice(DEAD).unwrap();
            let mut log = Vec::new();
            entry.encode(slice_bytes, &mut log).unwrap();
            for n in map.live_nodes() {
                ep.write(n, slice, &log);
            }
            ep.post().await.unwrap();
            let (outcome, _) = recover(ep, &map, Protocol::Scythe, DEAD).await.unwrap();
            let r = ep.read(t.primary(), off, t.record_bytes as usize);
            ep.post().await.unwrap();
            let rec = ep.bytes(r).to_vec();
            let words = (ep.word(r, META_OFF), ep.word(r, META_OFF + 8));
            (outcome, rec, words)
        }
    });
    assert_eq!(outcome, Recovered::RolledBack(42));
    let mut v = vec![0u8; 64];
    let h = t.codec().decode(&record, &mut v).unwrap();
    assert_eq!((h.lock, h.version), (0, old.version), "the old header back");
    assert_eq!(v, value(1000), "the old value back");
    assert_eq!(words, (grant, upper), "the takeout words untouched");
}

/// Dead coordinators 3 and 4 hold tickets, as their grant journals say: on key 1's queue,
/// tickets 0 (3's, being served), 1 (4's) and 2 (3's); on key 2's, 0 (4's) and 1 (3's); and 3's
/// journal keeps an old entry, long released, for key 3 (UPPER past it). Recovery releases
/// each held ticket exactly once, in queue order, and never the old one: UPPERs 3, 2 and 5.
/// A recovery that crashes at any instant and runs again ends the same (a released ticket reads
/// `UPPER > T`: a second FAA cannot happen).
#[test]
fn recovery_releases_each_journaled_ticket_once_even_run_twice() {
    const A: u32 = 3;
    const B: u32 = 4;
    let queues: [Queue; 3] = [
        (1, 3, 0, &[(A, 0), (B, 1), (A, 2)]),
        (2, 2, 0, &[(B, 0), (A, 1)]),
        (3, 5, 5, &[(A, 2)]),
    ];
    let want = [3u64, 2, 5];
    let scripted = |seed: u64| {
        let (pool, plan, _) = pool(seed, 1, Vec::new());
        let t = plan.table(T).unwrap().clone();
        let mut used = [0u64; 8];
        for (key, grants, releases, held) in queues {
            let at = offset_of(&pool, &t, key) + META_OFF as u64;
            pool.with_local(t.primary(), |m| {
                m.write_u64(at, (1 << 16) | grants);
                m.write_u64(at + 8, releases);
            });
            for &(owner, full) in held {
                // The journal: the slice's last 2 KiB; entries after its first line.
                let slice = plan.log_off + u64::from(owner) * plan.shape.log_slice_bytes;
                let journal = slice + plan.shape.log_slice_bytes - 2048;
                let e = journal + 64 + 16 * used[owner as usize];
                used[owner as usize] += 1;
                pool.with_local(t.primary(), |m| {
                    m.write_u64(e, at);
                    m.write_u64(e + 8, full);
                });
            }
        }
        (pool, t)
    };
    let uppers = |pool: &Pool, t: &TableInfo| -> Vec<u64> {
        queues.iter().map(|q| takeout_of(pool, t, q.0).1).collect()
    };
    let mut interrupted = 0;
    for seed in 1..=2 {
        let (mut once, t) = scripted(seed);
        let (r, took) = recover_dead(&mut once, &[A, B], None);
        assert!(
            r.is_some(),
            "seed {seed}: a recovery without a crash finishes"
        );
        assert_eq!(uppers(&once, &t), want, "seed {seed}");
        for tenth in 1..10 {
            let (mut pool, t) = scripted(seed);
            let (first, _) = recover_dead(&mut pool, &[A, B], Some(took * tenth / 10));
            interrupted += u32::from(first.is_none());
            let (again, _) = recover_dead(&mut pool, &[A, B], None);
            assert!(again.is_some());
            assert_eq!(
                uppers(&pool, &t),
                want,
                "seed {seed}: crashed at {tenth}/10"
            );
        }
    }
    assert!(
        interrupted > 8,
        "only {interrupted} recoveries were cut short"
    );
}

/// A scripted queue: key, grants so far, releases so far, the tickets held (owner, full
/// ticket).
type Queue = (u64, u64, u64, &'static [(u32, u64)]);

/// Runs `recover_all` for `dead` on a coordinator of its own, whose compute node crashes
/// `crash_at` ns into the run if given. Its result (none if it crashed) and the run's length.
fn recover_dead(pool: &mut Pool, dead: &[u32], crash_at: Option<u64>) -> (Option<()>, u64) {
    let Pool::Sim(sim) = pool else { unreachable!() };
    let mut f = dtxn_fabric::sim::Faults::default();
    if let Some(at_ns) = crash_at {
        f.compute_crashes.push(ComputeCrash {
            at_ns,
            compute_node: 0,
        });
    }
    sim.set_faults(f);
    let dead = dead.to_vec();
    let topo = Topology {
        compute_nodes: 2,
        threads: 1,
        coroutines: 1,
    };
    let r = sim
        .run(topo, None, |mut ep: Endpoint| {
            let dead = dead.clone();
            async move {
                if ep.id().index != 0 {
                    return None;
                }
                let map = PoolMap::bootstrap(&mut ep).await.unwrap();
                dtxn_txn::recovery::recover_all(&mut ep, &map, Protocol::Scythe, &dead)
                    .await
                    .unwrap();
                Some(())
            }
        })
        .unwrap();
    sim.set_faults(Default::default());
    (r.outputs[0].flatten(), r.elapsed_ns)
}

/// A Scythe install writes a primary around its takeout words: the lock word (invisible),
/// the value, then the header. Cut off before the header, a one-line record holds the new
/// value under the old header, whole (no stamp tells: one line). Recovery must roll it back:
/// it once took a record at the image's version, whole, for one nothing had landed on, and
/// left the new value at the old version (torture: scythe/kv/seed 47000002 with `--faults
/// memory=1,compute=1`, reads of a version with another value than its writer's).
#[test]
fn recovery_rolls_back_a_one_line_install_cut_off_before_its_header() {
    const KEY: u64 = 7;
    const DEAD: u32 = 3;
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 16,
        log_slice_bytes: 8192,
        region_bytes: None,
    };
    let spec = TableSpec::new(T, "t", 8, KEYS).with_meta_words(Protocol::Scythe.meta_words());
    let plan = Plan::new(&[spec], &shape).unwrap();
    let t = plan.table(T).unwrap().clone();
    assert_eq!(t.record_bytes, 64, "one line");
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.adversary = dtxn_fabric::sim::Adversary::off();
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(&t);
    for k in 0..KEYS {
        l.insert(&pool, k, &1000u64.to_le_bytes()).unwrap();
    }
    let off = offset_of(&pool, &t, KEY);
    let mut image = vec![0u8; 64];
    pool.with_local(t.primary(), |m| m.read(off, &mut image));
    let old = t.codec().header(&image);
    let owner = u64::from(DEAD) + 1;
    let installed = RecordHeader {
        lock: owner | 1 << 63,
        version: old.version + 1,
        ..old
    };
    let mut new = image.clone();
    t.codec()
        .encode(&installed, &555u64.to_le_bytes(), &mut new);
    // The lock word, invisible, and the value; not the header.
    let v = t.codec().value_off();
    pool.with_local(t.primary(), |m| {
        m.write_u64(off, owner | 1 << 63);
        m.write(off + v as u64, &new[v..]);
    });
    let entry = pending(DEAD, off, image);
    let cfg = TxnConfig {
        protocol: Protocol::Scythe,
        ..TxnConfig::default()
    };
    let t2 = t.clone();
    let (outcome, record) = common::with_coordinator(pool, cfg, move |mut c| {
        let (entry, t) = (entry.clone(), t2.clone());
        async move {
            let map = PoolMap::bootstrap(c.endpoint()).await.unwrap();
            let ep = c.endpoint();
            let (slice, slice_bytes) = map.log_slice(DEAD).unwrap();
            let mut log = Vec::new();
            entry.encode(slice_bytes, &mut log).unwrap();
            for n in map.live_nodes() {
                ep.write(n, slice, &log);
            }
            ep.post().await.unwrap();
            let (outcome, _) = recover(ep, &map, Protocol::Scythe, DEAD).await.unwrap();
            let r = ep.read(t.primary(), off, 64);
            ep.post().await.unwrap();
            (outcome, ep.bytes(r).to_vec())
        }
    });
    assert_eq!(outcome, Recovered::RolledBack(42));
    let mut value = [0u8; 8];
    let h = t.codec().decode(&record, &mut value).unwrap();
    assert_eq!((h.lock, h.version), (0, old.version));
    assert_eq!(u64::from_le_bytes(value), 1000, "the old value back");
}

/// One commit of `value(2000)` over key 3 (a two-line record: the value's first and last
/// words hold it) by coordinator 0, memory node 1 (its backup) failing for good at `fail_ns`
/// and the coordinator's compute node crashing at `crash_ns` (virtual, from the run's start),
/// then recovery in the view without the failed node.
fn cut_commit(fail_ns: u64, crash_ns: u64) -> Cut {
    use dtxn_fabric::sim::{Faults, MemoryCrash};
    const KEY: u64 = 3;
    let (mut pool, plan, _) = pool(1, 2, Vec::new());
    let t = plan.table(T).unwrap().clone();
    assert_eq!((t.primary(), t.backups()), (0, &[1][..]));
    let off = offset_of(&pool, &t, KEY);
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    sim.set_faults(Faults {
        compute_crashes: vec![ComputeCrash {
            at_ns: crash_ns,
            compute_node: 0,
        }],
        memory_crashes: vec![MemoryCrash {
            at_ns: fail_ns,
            node: 1,
            down_ns: MemoryCrash::FOREVER,
        }],
        ..Faults::default()
    });
    // TOCC: a coalescent install, the primary's WRITEs in the backups' batch.
    let cfg = tocc();
    let r = sim
        .run(ONE, None, move |mut ep: Endpoint| {
            let cfg = cfg.clone();
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let mut c = Coordinator::new(ep, map, cfg);
                c.set_failover(true);
                let start = c.endpoint().now_ns();
                let r = set(&mut c, KEY, 2000).await;
                (r, (start, c.endpoint().now_ns()))
            }
        })
        .unwrap();
    let (outcome, times) = match r.outputs.into_iter().next().unwrap() {
        Some((r, times)) => (Some(r), times),
        None => (None, (0, 0)),
    };
    sim.set_faults(Faults::default());
    let read = |pool: &Pool| record_at(pool, &t, off);
    let before = read(&pool);
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    sim.run(ONE, None, |mut ep: Endpoint| async move {
        // Node 1 down (the failure came before the run's end): the view without it.
        ep.read(1, 0, 8);
        if ep.post().await.is_err() {
            let next = dtxn_store::View::default().without(&[1]).unwrap();
            let one = dtxn_fabric::NodeSet::single(0);
            let out =
                membership::change_view(&mut ep, one, dtxn_store::View::default(), next).await;
            assert_eq!(out, Ok(dtxn_txn::control::Write::Done));
        }
        let map = PoolMap::bootstrap(&mut ep).await.unwrap();
        dtxn_txn::recovery::recover_all_in_views(&mut ep, &map, Protocol::Scythe, &[(0, true)])
            .await
            .unwrap();
    })
    .unwrap();
    Cut {
        outcome,
        before,
        after: read(&pool),
        times,
    }
}

/// What [`cut_commit`] saw.
struct Cut {
    /// The commit's outcome, if it ended.
    outcome: Option<Result<(), AbortReason>>,
    /// The primary's record before recovery and after it.
    before: Vec<u8>,
    after: Vec<u8>,
    /// The commit's start and end (virtual ns; 0 if it did not end).
    times: (u64, u64),
}

/// A commit whose backup fails under it rolls its install back on the primary, around the
/// takeout words, and its coordinator's crash may cut that roll-back (or the install) off
/// anywhere. Recovery must then leave the record at one version with that version's value:
/// the old one or the new, never a mix; and no state on the way may offer a reader (no
/// invisible bit, every stamp agreeing) a value its version's writer did not write.
/// - A roll-back that wrote the value before the old header, cut inside the value, left the
///   install's header over the old value's first bytes and the install's last line: whole at
///   the new version, a value nobody wrote, which recovery rolled forward (torture:
///   scythe/skew/seed 60000011 under `--faults memory=1,compute=1,rejoin=100us`).
/// - One that wrote the old header with the plain lock word before the value showed a
///   one-line record at the old version with the install's value, visible to readers, who
///   committed it once the lock was released (torture: scythe-cas/kv/seed 60100018).
#[test]
fn a_commit_cut_off_anywhere_after_its_backup_failed_is_recovered_to_one_value() {
    // Two lines a record, then one. (How many instants cut the record moves with the
    // commit's batches: 87 since the install writes the entry's `Decided` status too.)
    let (cut, rolled_back, forward) = sweep_cut_commits(64);
    assert!(
        cut > 50 && rolled_back > 0 && forward > 0,
        "two lines: cut {cut}, rolled back {rolled_back}, forward {forward}"
    );
    let (cut, rolled_back, forward) = sweep_cut_commits(8);
    assert!(
        cut > 5 && rolled_back > 0 && forward > 0,
        "one line: cut {cut}, rolled back {rolled_back}, forward {forward}"
    );
}

/// [`cut_commit`] over the instants that matter, with values of `size` bytes: how many
/// states before recovery were neither the old record nor the new, whole (`cut`), and how many
/// runs recovery rolled back and forward. Panics at a state that offers a reader a value
/// nobody wrote, before or after recovery.
fn sweep_cut_commits(size: usize) -> (u32, u32, u32) {
    SIZE.with(|s| s.set(size));
    let t = pool(1, 2, Vec::new()).1.table(T).unwrap().clone();
    let whole = |rec: &[u8]| {
        let mut v = vec![0u8; size];
        t.codec().decode(rec, &mut v).ok().map(|h| (h.version, v))
    };
    let committed = |state: &Option<(u64, Vec<u8>)>| {
        matches!(state, Some((0, v)) if *v == value(1000))
            || matches!(state, Some((1, v)) if *v == value(2000))
    };
    // Without faults: the commit's span, which the failures and crashes below sweep.
    let Cut {
        outcome,
        after,
        times: (start, end),
        ..
    } = cut_commit(u64::MAX / 4, u64::MAX / 4);
    assert_eq!(outcome, Some(Ok(())));
    assert_eq!(whole(&after), Some((1, value(2000))));
    // The latest failures that still fail the commit: node 1 fails as the install reaches it,
    // after the primary's (one batch, two QPs), which the coordinator then rolls back.
    let failing: Vec<u64> = (start..end)
        .step_by(5)
        .filter(|&f| cut_commit(f, u64::MAX / 4).outcome == Some(Err(AbortReason::ReplicaFailure)))
        .collect();
    let (mut cut, mut rolled_back, mut forward) = (0, 0, 0);
    for &fail_ns in failing.iter().rev().take(3) {
        // The roll-back, cut off in 5 ns steps (a line is a few ns on the wire).
        for crash_ns in (fail_ns..fail_ns + 4_000).step_by(5) {
            let Cut {
                outcome,
                before,
                after,
                ..
            } = cut_commit(fail_ns, crash_ns);
            let what = format!(
                "{size}-byte values, failure at {fail_ns} ns, crash at {crash_ns} ns: {outcome:?}"
            );
            let seen = whole(&before);
            if t.codec().header(&before).lock & (1 << 63) == 0 && seen.is_some() {
                assert!(committed(&seen), "{what}: a reader would take {seen:?}");
            }
            if !committed(&seen) {
                cut += 1;
            }
            let lock = t.codec().header(&after).lock;
            assert_eq!(lock, 0, "{what}: a lock word left ({lock:#x})");
            let now = whole(&after);
            assert!(
                committed(&now),
                "{what}: recovered to {now:?}, a value nobody wrote"
            );
            if now.is_some_and(|(version, _)| version == 1) {
                forward += 1;
            } else {
                rolled_back += 1;
            }
        }
    }
    SIZE.with(|s| s.set(64));
    (cut, rolled_back, forward)
}

/// A dead coordinator's install of `value(2000)` over key 3, on the primary only (the backup
/// holds the old record), its entry pending: recovery rolls it back, around the takeout
/// words, and its own compute node crashes `crash_ns` into that run (`None`: it does not).
/// Then memory node 1, the backup, fails for good, and recovery runs again in the view
/// without it. The primary's record before the second recovery and after it, and the first
/// recovery's length.
fn cut_recovery(crash_ns: Option<u64>) -> (Vec<u8>, Vec<u8>, u64) {
    use dtxn_fabric::sim::{Faults, MemoryCrash};
    const KEY: u64 = 3;
    const DEAD: u32 = 3;
    let (mut pool, plan, _) = pool(1, 2, Vec::new());
    let t = plan.table(T).unwrap().clone();
    let off = offset_of(&pool, &t, KEY);
    let codec = t.codec();
    let mut image = vec![0u8; t.record_bytes as usize];
    pool.with_local(t.primary(), |m| m.read(off, &mut image));
    let old = codec.header(&image);
    let mut new = image.clone();
    let installed = RecordHeader {
        lock: (u64::from(DEAD) + 1) | (1 << 63),
        version: old.version + 1,
        ..old
    };
    codec.encode(&installed, &value(2000), &mut new);
    pool.with_local(t.primary(), |m| m.write(off, &new));
    let entry = pending(DEAD, off, image);
    // The slice's offset as the memory nodes' superblocks give it (16 of 8 KiB, above).
    let slice_bytes = 8192;
    let slice = plan.log_off + u64::from(DEAD) * slice_bytes;
    let mut log = Vec::new();
    entry.encode(slice_bytes, &mut log).unwrap();
    for n in 0..2 {
        pool.with_local(n, |m| m.write(slice, &log));
    }
    let (_, first) = recover_dead(&mut pool, &[DEAD], crash_ns);
    let read = |pool: &Pool| record_at(pool, &t, off);
    let before = read(&pool);
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    sim.set_faults(Faults {
        memory_crashes: vec![MemoryCrash {
            at_ns: 0,
            node: 1,
            down_ns: MemoryCrash::FOREVER,
        }],
        ..Faults::default()
    });
    sim.run(ONE, None, |mut ep: Endpoint| async move {
        let next = dtxn_store::View::default().without(&[1]).unwrap();
        let one = dtxn_fabric::NodeSet::single(0);
        let out = membership::change_view(&mut ep, one, dtxn_store::View::default(), next).await;
        assert_eq!(out, Ok(dtxn_txn::control::Write::Done));
        let map = PoolMap::bootstrap(&mut ep).await.unwrap();
        dtxn_txn::recovery::recover_all_in_views(&mut ep, &map, Protocol::Scythe, &[(DEAD, true)])
            .await
            .unwrap();
    })
    .unwrap();
    (before, read(&pool), first)
}

/// Recovery's own roll-back, cut off anywhere by its crash, then run again after the backup
/// failed: the second recovery finds the primary alone, and must still end at one version
/// with that version's value. A roll-back written in an install's order (the value, then the
/// header), cut inside the value, leaves the install's header over a mix of the two values,
/// whole at the new version: with the backup gone nothing tells it from an install that
/// landed, and the rerun rolls it forward (a value nobody wrote). Written header first, it is
/// torn, or at the old version, and is rolled back again. (Two-line records: a one-line
/// record's three WRITEs land in the same nanosecond, and no crash falls between them.)
#[test]
fn a_recovery_cut_off_in_its_roll_back_and_run_again_without_the_backup_leaves_one_value() {
    let t = pool(1, 2, Vec::new()).1.table(T).unwrap().clone();
    let whole = |rec: &[u8]| {
        let mut v = vec![0u8; 64];
        t.codec().decode(rec, &mut v).ok().map(|h| (h.version, v))
    };
    let (old, new) = (Some((0, value(1000))), Some((1, value(2000))));
    let (_, after, span) = cut_recovery(None);
    assert_eq!(whole(&after), old, "rolled back");
    let mut cut = 0;
    for crash_ns in (0..span).step_by(5) {
        let (before, after, _) = cut_recovery(Some(crash_ns));
        let what = format!("recovery crashed at {crash_ns} ns");
        let seen = whole(&before);
        if seen != old && seen != new {
            cut += 1;
        }
        assert_eq!(t.codec().header(&after).lock, 0, "{what}: a lock word left");
        let now = whole(&after);
        assert!(
            now == old || now == new,
            "{what}: recovered to {now:?}, a value nobody wrote"
        );
    }
    assert!(cut > 0, "no crash cut the roll-back off ({span} ns swept)");
}

/// TOCC's timestamps come from each compute node's TSO group (a leader's one FAA on the pool's
/// oracle word reserves a range for every request pending): every attempt's timestamp is its
/// own, across compute nodes too, those of one coordinator rise, and the leaders' round trips
/// to the oracle are counted. The timestamps order Scythe's queues and header locks (who
/// waits for whom), so equal ones would cost the waiting its order, not serializability:
/// the bank runs do not notice them. Read here from the header lock words TOCC's fetch takes
/// (the timestamp above the owner's 16 bits).
#[test]
fn tocc_timestamps_from_the_tso_groups_are_unique_and_rise() {
    use dtxn_store::record::LOCK_OFF;
    use dtxn_txn::TsoGroup;
    use std::sync::Arc;
    let (mut pool, plan, _) = pool(7, 2, Vec::new());
    let t = plan.table(T).unwrap();
    let primary = t.primary();
    let offsets: Vec<u64> = (0..KEYS).map(|k| offset_of(&pool, t, k)).collect();
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    let topo = Topology {
        compute_nodes: 2,
        threads: 1,
        coroutines: 4,
    };
    let groups: Vec<Arc<TsoGroup>> = (0..2).map(|_| Arc::new(TsoGroup::new())).collect();
    const EACH: u64 = 6;
    let r = sim
        .run(topo, None, |mut ep: Endpoint| {
            let group = groups[ep.id().compute_node as usize].clone();
            let offsets = offsets.clone();
            async move {
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let me = u64::from(ep.id().index);
                let mut c = Coordinator::new(ep, map, tocc());
                c.set_tso_group(group);
                let (mut stamps, mut oracle_rts) = (Vec::new(), 0);
                for i in 0..EACH {
                    // All at once, so that a group's requests meet (one leads, the others
                    // take from its range); keys of its own: no conflict, one attempt each.
                    let at = 100_000 * (i + 1);
                    let now = c.endpoint().now_ns();
                    c.endpoint().sleep(at.saturating_sub(now)).await;
                    let k = me * 2 + i % 2;
                    let mut tx = c.begin(TxKind::ReadWrite);
                    tx.fetch(&[Access::update(T, k)]).await.unwrap();
                    let ep = tx.endpoint();
                    let r = ep.read(primary, offsets[k as usize] + LOCK_OFF, 8);
                    ep.post().await.unwrap();
                    stamps.push((ep.word(r, 0) >> 16) & ((1 << 45) - 1));
                    tx.update(T, k, &value(i)).await.unwrap();
                    tx.commit().await.unwrap();
                    oracle_rts += c.last_outcome().unwrap().oracle_round_trips;
                }
                (stamps, oracle_rts)
            }
        })
        .unwrap();
    let mut all = Vec::new();
    let mut oracle_rts = 0;
    for (stamps, rts) in r.outputs.into_iter().map(Option::unwrap) {
        assert!(
            stamps.windows(2).all(|w| w[0] < w[1]),
            "one coordinator's timestamps rise: {stamps:?}"
        );
        all.extend(stamps);
        oracle_rts += rts;
    }
    assert!(all.iter().all(|&ts| ts > 0), "{all:?}");
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "every timestamp its own: {all:?}");
    // Counted, and fewer than the timestamps: the groups batched.
    assert!(
        (1..n as u64).contains(&oracle_rts),
        "{oracle_rts} oracle round trips for {n} timestamps"
    );
}
