//! Execution's reads of single-version records: each item's record READ at its cached
//! address (its per-line stamps checked: a torn READ is read again), or its bucket chain
//! walked when the address is not cached; for a read-write item with *hitchhiked locking*,
//! CAS(lock) + READ(record) on the primary in one doorbell batch (the CAS executes first,
//! G6, so the READ sees the record under the lock).
//!
//! Under two-phase locking ([`Locking::TwoPhase`]) every item is locked before it is read:
//! read-write items exclusively, read-only items with a read share (CAS(n -> n + 1) on a
//! lock word counting shares, [`SHARED`]); a cold item's chain is walked first and its slot
//! then locked and read in the next round. A conflict aborts at once (NO_WAIT) or, for a
//! transaction older than the exclusive holder, waits with back-off and tries again
//! (WAIT_DIE); a younger one, or a writer meeting read shares, dies.

use super::lock::{give_back_after_failure, unshare};
use super::rpc::{CasRead, Read, Via};
use super::{abort, next_bucket, share, table, INVISIBLE, SHARED};
use crate::abort::{Abort, AbortReason};
use crate::config::TxnConfig;
use crate::item::{Access, Item};
use crate::protocol::Protocol;
use crate::stage::Stage as Step;
use crate::tx::Tx;
use crate::txn::TxKind;
use dtxn_fabric::{Endpoint, NodeId};
use dtxn_store::cache::{check_slot, SlotCheck};
use dtxn_store::index::CHAIN_META_OFF;
use dtxn_store::record::{RecordHeader, SingleVersion, Torn, META_OFF};
use dtxn_store::{PoolMap, TableInfo};

/// How execution locks what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Locking {
    /// OCC: read-write items locked as they are read if `hitchhike` (and their address is
    /// cached), else at commit; read-only items read without a lock.
    Optimistic { hitchhike: bool },
    /// 2PL: every item locked before it is read (read-only items with a read share). On a
    /// conflict, `wait`: WAIT_DIE (the older waits, the younger dies); else NO_WAIT (abort).
    TwoPhase { wait: bool },
    /// MVCC's: optimistic with hitchhiking, and a read-only item's READ, when the fetch runs
    /// as RPCs, is one RAISE request (RCC's one-request RPC read): the memory node raises the
    /// record's read timestamp (metadata word 0) to `ts`, unless frozen or higher, and READs
    /// the record after it, so the word the READ returns is raised already (one-sided, a plain
    /// READ: the raise is a CAS from the word read, later).
    Timestamped { ts: u64 },
    /// Scythe's TOCC: every item locked exclusively before it is read (reads too); on a
    /// conflict, a younger transaction waits for an older holder and an older one dies, the
    /// direction of the takeout lock's queues (a wait points from a larger timestamp to a
    /// smaller one), so that the two kinds of waits never close a cycle.
    Ordered,
}

/// The lock a record's READ is posted after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lock {
    None,
    /// CAS(`expect` -> our lock word): 0 for a free word, a lone read share of ours for an
    /// upgrade.
    Exclusive {
        expect: u64,
    },
    /// CAS(`expect` -> one share more), `expect` the shares we believe the word holds.
    Share {
        expect: u64,
    },
    /// No lock: the read timestamp raised to `ts` before the READ, in one RAISE request
    /// ([`Locking::Timestamped`]; a plain READ one-sided).
    Raise {
        ts: u64,
    },
}

/// Waits of a WAIT_DIE transaction for one lock before it gives up (a holder that crashed
/// would otherwise keep it waiting forever), and the longest back-off between two tries.
const WAIT_LIMIT: u32 = 256;
const MAX_BACKOFF_NS: u64 = 16_000;

/// What an execution round does for one item.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// READ the record at this offset, after `lock`.
    Record { off: u64, lock: Lock },
    /// READ a bucket of the item's chain, reached after `hops` overflow links.
    Bucket { at: u64, hops: u64 },
}

/// What [`records`] keeps across calls (given back after an abort too).
#[derive(Debug, Default)]
pub(crate) struct ExecuteScratch {
    /// Execution rounds: (item, stage, version it must still have).
    work: Vec<(usize, Stage, Option<u64>)>,
    next: Vec<(usize, Stage, Option<u64>)>,
    /// Execution rounds: what each item's stage posted.
    ids: Vec<Fetched>,
}

/// What a round posted for one item: a hitchhiked lock (CAS, then the record READ after it),
/// or a READ (of a record or a bucket). One-sided or as RPCs, as the lock and fetch stages go.
#[derive(Debug, Clone, Copy)]
enum Fetched {
    Locked(CasRead),
    Read(Read),
    /// A RAISE request and its READ ([`Lock::Raise`]).
    Raised(CasRead),
}

impl Fetched {
    /// The bytes read: for a lock, only once its CAS swapped.
    #[inline]
    fn bytes<'e>(&self, ep: &'e Endpoint) -> &'e [u8] {
        match self {
            Fetched::Locked(c) | Fetched::Raised(c) => c.bytes(ep),
            Fetched::Read(r) => r.bytes(ep),
        }
    }
}

/// Fetches `accesses` (new items, or read items now wanted for update) into the
/// transaction's items, a round per batch of READs, locking them as `locking` says:
/// optimistic, read-write items with their lock taken at once if hitchhiking (and their
/// address cached), else locked at commit (`cold`); two-phase, every item locked.
pub(crate) async fn records<P: Protocol>(
    tx: &mut Tx<'_, P>,
    accesses: &[Access],
    locking: Locking,
) -> Result<(), Abort> {
    let mut s = std::mem::take(&mut tx.c.mech.execute);
    let r = rounds(tx, accesses, locking, &mut s).await;
    tx.c.mech.execute = s;
    r
}

/// [`records`]' rounds, with their vectors from the coordinator's scratch.
async fn rounds<P: Protocol>(
    tx: &mut Tx<'_, P>,
    accesses: &[Access],
    locking: Locking,
    s: &mut ExecuteScratch,
) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    // (item, stage, version it must still have: an upgraded read-only item)
    let ExecuteScratch { work, next, ids } = s;
    plan(tx, &map, accesses, locking, work)?;
    super::journal::ready_tx(tx).await?;
    let mut rereads = 0;
    let mut waits = 0;
    while !work.is_empty() {
        // The read shares' terms for this round (their clock: read before any is posted).
        let terms = share::Terms::of(&tx.c.ep);
        post(tx, &map, work, ids, terms);
        if tx.c.ep.post().await.is_err() {
            return Err(give_back_round(tx, &map, work).await);
        }
        next.clear();
        // Every completion of the round is looked at before an abort is reported, so that no
        // lock won in this round goes unrecorded (and unreleased).
        let mut out = Outcome {
            next: &mut *next,
            again: false,
            wait: false,
            failed: None,
            give_back: Vec::new(),
        };
        for (&(i, stage, expect), &done) in work.iter().zip(ids.iter()) {
            match stage {
                Stage::Record { off, lock } => on_record(
                    tx,
                    &map,
                    (i, expect),
                    (off, lock, locking, terms),
                    done,
                    &mut out,
                ),
                Stage::Bucket { at, hops } => {
                    on_bucket(tx, &map, (i, expect), (at, hops, locking), done, &mut out)
                }
            }
        }
        let Outcome {
            next,
            again,
            wait,
            failed,
            give_back,
        } = out;
        if !give_back.is_empty() {
            for (n, off, share) in give_back {
                if let Some(held) = share {
                    unshare(tx, n, off, held);
                } else {
                    tx.c.ep.write(n, off, &0u64.to_le_bytes());
                }
            }
            let _ = tx.c.ep.post_detached();
        }
        if let Some(a) = failed {
            return Err(a);
        }
        if again {
            rereads += 1;
            if rereads > tx.c.cfg.reread_limit {
                let (i, _, _) = next[0];
                return Err(abort(AbortReason::Invisible, &tx.items[i]));
            }
        }
        if wait {
            // WAIT_DIE: an older transaction waits for a younger holder, yielding to the
            // thread's other coroutines, with back-off, and gives up in the end (a holder
            // that crashed keeps its lock until recovery).
            waits += 1;
            if waits > WAIT_LIMIT {
                let (i, _, _) = next[0];
                return Err(abort(AbortReason::LockConflict, &tx.items[i]));
            }
            let backoff = (1_000u64 << waits.min(5)).min(MAX_BACKOFF_NS);
            tx.c.ep.sleep(backoff).await;
        }
        std::mem::swap(work, next);
    }
    Ok(())
}

/// What one round's completions leave for the next round.
struct Outcome<'a> {
    /// The items to read again, and how.
    next: &'a mut Vec<(usize, Stage, Option<u64>)>,
    /// Some item must be re-read (torn or invisible): the round counts against the limit.
    again: bool,
    /// Some item waits for a lock (WAIT_DIE): back off before the next round.
    wait: bool,
    /// The first abort seen.
    failed: Option<Abort>,
    /// Locks won through a stale address, to give back: (node, address, a read share's word).
    give_back: Vec<(NodeId, u64, Option<u64>)>,
}

impl Outcome<'_> {
    /// Item `i`'s record at `off` is to be read again (torn or invisible), without a lock.
    fn reread(&mut self, i: usize, off: u64, expect: Option<u64>) {
        let lock = Lock::None;
        self.next.push((i, Stage::Record { off, lock }, expect));
        self.again = true;
    }
}

/// The first round's work: each access's item added (or an item already read, upgraded for
/// update) with how it is to be read.
fn plan<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    accesses: &[Access],
    locking: Locking,
    work: &mut Vec<(usize, Stage, Option<u64>)>,
) -> Result<(), Abort> {
    let two_phase = matches!(locking, Locking::TwoPhase { .. } | Locking::Ordered);
    work.clear();
    if accesses.len() > 1 {
        for a in accesses {
            tx.c.cache.prefetch(a.table, a.key);
        }
    }
    for a in accesses {
        let bad = Abort {
            reason: AbortReason::BadRequest,
            table: a.table,
            key: a.key,
        };
        if a.for_update && tx.kind == TxKind::ReadOnly {
            return Err(bad);
        }
        if let Some(i) = tx.find(a.table, a.key) {
            let it = &mut tx.items[i];
            if a.for_update && !it.rw {
                it.rw = true;
                if it.image.capacity() == 0 {
                    // Read-only items have no image buffer: it is re-read now, under the lock.
                    let room = table(map, a.table).record_bytes as usize;
                    it.image = tx.c.spare.take(0, room);
                }
                if let Some(off) = it.offset.filter(|_| it.exists) {
                    let v = it.version;
                    it.node = table(map, a.table).primary();
                    // Under 2PL we hold a read share: the upgrade expects it alone, while
                    // we may still rely on it (else what we read may have changed).
                    let expect = if it.shared {
                        if !share::usable(it.share_word, share::Terms::of(&tx.c.ep)) {
                            return Err(abort(AbortReason::Validation, it));
                        }
                        share::alone(it.share_word)
                    } else {
                        0
                    };
                    // An item held exclusively already (TOCC's reads) is read again for its
                    // undo image, under the lock it has.
                    let lock = if it.locked {
                        Lock::None
                    } else {
                        Lock::Exclusive { expect }
                    };
                    work.push((i, Stage::Record { off, lock }, Some(v)));
                }
            }
            continue;
        }
        let Ok(t) = map.table(a.table) else {
            return Err(bad);
        };
        // 2PL reads lock the primary's word: they read the primary.
        let backup = !a.for_update && !two_phase && tx.c.cfg.ford.reads_backup(&t.name);
        // (Never a joining replica: its copy may be incomplete.)
        let node = if backup && t.readable().len() > 1 {
            t.replicas[1]
        } else {
            t.primary()
        };
        let stage = match tx.c.cache.get(a.table, a.key) {
            Some(off) => Stage::Record {
                off,
                lock: first_lock(locking, a.for_update),
            },
            None => Stage::Bucket {
                at: t.home_bucket(a.key),
                hops: 0,
            },
        };
        let i = tx.push_new_item(t, a.key, a.for_update, node);
        work.push((i, stage, None));
    }
    Ok(())
}

/// The lock an item's first record READ takes.
fn first_lock(locking: Locking, for_update: bool) -> Lock {
    match locking {
        Locking::Optimistic { hitchhike: true }
        | Locking::Timestamped { .. }
        | Locking::TwoPhase { .. }
            if for_update =>
        {
            Lock::Exclusive { expect: 0 }
        }
        Locking::Timestamped { ts } => Lock::Raise { ts },
        Locking::Ordered => Lock::Exclusive { expect: 0 },
        Locking::TwoPhase { .. } => Lock::Share { expect: 0 },
        Locking::Optimistic { .. } => Lock::None,
    }
}

/// Posts a round: per item, CAS(lock) + READ(record), READ(record), or READ(bucket).
fn post<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    work: &[(usize, Stage, Option<u64>)],
    ids: &mut Vec<Fetched>,
    terms: Option<share::Terms>,
) {
    ids.clear();
    let (lock_via, fetch_via) = (tx.c.via(Step::Lock), tx.c.via(Step::Fetch));
    for &(i, stage, _) in work.iter() {
        let it = &tx.items[i];
        let t = table(map, it.table);
        let ep = &mut tx.c.ep;
        let record = Some((off_of(stage), t.record_bytes as usize));
        ids.push(match stage {
            Stage::Record {
                off,
                lock: Lock::Exclusive { expect },
            } => {
                let word = (expect, tx.c.lock_word);
                super::journal::note(tx.c, lock_via, t.primary(), off);
                let ep = &mut tx.c.ep;
                Fetched::Locked(CasRead::post(ep, lock_via, t.primary(), off, word, record))
            }
            Stage::Record {
                off,
                lock: Lock::Share { expect },
            } => Fetched::Locked(CasRead::share(
                ep,
                lock_via,
                t.primary(),
                off,
                expect,
                terms,
                record,
            )),
            Stage::Record {
                off,
                lock: Lock::Raise { ts },
            } if fetch_via == Via::Rpc => {
                let len = read_len(&tx.c.cfg, t, it.rw);
                let word = off + META_OFF as u64;
                let (n, read) = (it.node, Some((off, len)));
                Fetched::Raised(CasRead::raise(ep, fetch_via, n, word, (0, ts), read))
            }
            Stage::Record {
                off,
                lock: Lock::None | Lock::Raise { .. },
            } => Fetched::Read(Read::post(
                ep,
                fetch_via,
                it.node,
                off,
                read_len(&tx.c.cfg, t, it.rw),
            )),
            Stage::Bucket { at, .. } => Fetched::Read(Read::post(
                ep,
                fetch_via,
                it.node,
                at,
                t.bucket_bytes as usize,
            )),
        });
    }
}

/// Bytes a record READ takes: the whole slot, except for a read-only item of a table kept
/// with older copies (MVCC's version slots) under `mvcc.lazy_slots`: its copy 0 alone (the
/// protocol READs the older copies when it needs one).
#[inline]
fn read_len(cfg: &TxnConfig, t: &TableInfo, rw: bool) -> usize {
    if t.copies > 1 && !rw && cfg.mvcc.lazy_slots {
        t.copy_bytes()
    } else {
        t.record_bytes as usize
    }
}

fn off_of(stage: Stage) -> u64 {
    match stage {
        Stage::Record { off, .. } => off,
        Stage::Bucket { at, .. } => at,
    }
}

/// A round that failed to post: the locks its CASes may have won are given back.
async fn give_back_round<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    work: &[(usize, Stage, Option<u64>)],
) -> Abort {
    let first = abort(AbortReason::ReplicaFailure, &tx.items[work[0].0]);
    let cased: Vec<(NodeId, u64, u64)> = work
        .iter()
        .filter_map(|&(i, stage, _)| match stage {
            // (A read share won on a node still up is lost with the round: only its count
            // says it is there, so it cannot be told from another reader's. Under leases it
            // expires.) An upgrade of our read share goes back to that share, which the
            // abort's release then gives back.
            Stage::Record {
                off,
                lock: Lock::Exclusive { expect },
            } => Some((table(map, tx.items[i].table).primary(), off, expect)),
            _ => None,
        })
        .collect();
    let word = tx.c.lock_word;
    give_back_after_failure(tx, &cased, word).await;
    first
}

/// A record READ (after its lock's CAS, if any) completed: the lock recorded, the stamps and
/// the slot checked, the item filled in.
fn on_record<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    (i, expect): (usize, Option<u64>),
    (off, lock, locking, terms): (u64, Lock, Locking, Option<share::Terms>),
    done: Fetched,
    out: &mut Outcome<'_>,
) {
    let trust_inv = tx.c.cfg.ford.trust_invisible_bit;
    let (table_id, key, rw) = (tx.items[i].table, tx.items[i].key, tx.items[i].rw);
    let t = table(map, table_id);
    let codec = t.codec();
    let len = read_len(&tx.c.cfg, t, rw);
    if !locked_and_read(tx, (i, expect, len), (off, lock, locking, terms), done, out) {
        return;
    }
    let it = &mut tx.items[i];
    let bytes = done.bytes(&tx.c.ep);
    let decoded = decode(codec, bytes, &mut it.value, trust_inv);
    let Ok(h) = decoded else {
        out.reread(i, off, expect);
        return;
    };
    if check_slot(&h, table_id, key) == SlotCheck::Stale {
        // The slot was freed or reused: drop the address, give back a lock
        // taken through it, and find the record through its bucket.
        tx.c.cache.invalidate(table_id, key);
        if matches!(lock, Lock::Exclusive { .. } | Lock::Share { .. }) {
            let share = it.shared.then_some(it.share_word);
            out.give_back.push((t.primary(), off, share));
            it.locked = false;
            it.shared = false;
            it.offset = None;
        }
        let home = Stage::Bucket {
            at: t.home_bucket(key),
            hops: 0,
        };
        out.next.push((i, home, expect));
        return;
    }
    // A primary's invisible word is a commit in progress: read again. A backup's says
    // nothing (a commit leaves its id there for the next install to overwrite: `release.rs`);
    // what was read from a backup is validated at the primary.
    if !it.locked && !it.shared && h.lock & INVISIBLE != 0 && it.node == t.primary() {
        out.reread(i, off, expect);
        return;
    }
    if expect.is_some_and(|v| v != h.version) {
        out.failed.get_or_insert(abort(AbortReason::Validation, it));
        return;
    }
    fill(it, codec, &h, off, bytes);
    // An item read for update without its lock (hitchhiking off) is locked at
    // validation.
    it.cold = rw && !it.locked;
    if it.locked {
        if let Some(v) = &tx.c.vcache {
            v.lock(table_id, key, h.version, tx.c.owner);
        }
    }
}

/// An item found: present at `off`, with the version and metadata word 0 of the record read
/// (`rec`: line 0 is read atomically, G3, so the word is the one that went with the version),
/// and, for an item that may be written, the record as its undo image (a read-only item that
/// is upgraded later is read again, under its lock). A record kept with older copies (MVCC's
/// version slots) keeps them in the image, written or not: the protocol reads them there.
fn fill<X>(it: &mut Item<X>, codec: SingleVersion, h: &RecordHeader, off: u64, rec: &[u8]) {
    it.exists = true;
    it.version = h.version;
    it.restores = h.restores;
    it.offset = Some(off);
    if codec.meta_words() > 0 {
        it.meta = codec.meta_word(rec, 0);
    }
    if codec.meta_words() > 1 {
        it.meta1 = codec.meta_word(rec, 1);
    }
    it.image.clear();
    if it.rw || rec.len() > codec.bytes() {
        it.image.extend_from_slice(rec);
    }
}

/// A record's header and value, its stamps checked, unless `trust_invisible_bit` (the
/// negative control: the published FORD's read path). (A record kept with older copies: its
/// copy 0, the codec's; the older copies are the protocol's to check.)
#[inline]
fn decode(
    codec: SingleVersion,
    rec: &[u8],
    value: &mut [u8],
    trust_invisible_bit: bool,
) -> Result<RecordHeader, Torn> {
    if trust_invisible_bit {
        Ok(codec.decode_unchecked(rec, value))
    } else {
        codec.decode(rec, value)
    }
}

/// Whether a record's fetch for item `i` went through: its lock recorded if the fetch took
/// one (false if the CAS failed: the item tried again, waiting, or the abort noted, as the
/// conflict decides), and the record's bytes read (false, the memory node counted as failed,
/// if they are short: only a malformed RPC reply is).
fn locked_and_read<P: Protocol>(
    tx: &mut Tx<'_, P>,
    (i, expect, len): (usize, Option<u64>, usize),
    (off, lock, locking, terms): (u64, Lock, Locking, Option<share::Terms>),
    done: Fetched,
    out: &mut Outcome<'_>,
) -> bool {
    if let Fetched::Locked(c) = done {
        let old = c.old(&tx.c.ep);
        if !c.swapped(&tx.c.ep) {
            let it = &tx.items[i];
            let ours = it.shared.then_some(it.share_word);
            match judge(lock, locking, old, tx.c.lock_word, (terms, ours)) {
                Conflict::Retry(lock) => {
                    out.next.push((i, Stage::Record { off, lock }, expect));
                    out.again = true;
                }
                Conflict::Wait => {
                    out.next.push((i, Stage::Record { off, lock }, expect));
                    out.wait = true;
                }
                Conflict::Abort => {
                    out.failed
                        .get_or_insert(abort(AbortReason::LockConflict, &tx.items[i]));
                }
            }
            return false;
        }
        let it = &mut tx.items[i];
        match lock {
            Lock::Share { .. } => {
                it.shared = true;
                // The word as our share left it: its expiry is our share's.
                it.share_word = old.and_then(|w| share::one_more(w, terms)).unwrap_or(0);
            }
            _ => {
                it.locked = true;
                // An upgrade's CAS turned our read share into the exclusive lock.
                it.shared = false;
            }
        }
        it.offset = Some(off);
    }
    if done.bytes(&tx.c.ep).len() < len {
        out.failed
            .get_or_insert(abort(AbortReason::ReplicaFailure, &tx.items[i]));
        return false;
    }
    true
}

/// What a lock CAS that did not swap leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conflict {
    /// The word is free or shared after all, not as we guessed: CAS again from what it holds.
    Retry(Lock),
    /// WAIT_DIE: an older transaction waits for the younger exclusive holder.
    Wait,
    Abort,
}

/// Decides what a lock CAS that found `old` (`None`: a malformed RPC reply) leads to, for a
/// transaction whose lock word is `mine`, reading read share words on `terms` and holding
/// the share taken as `ours`, if any ([`share`]). Under WAIT_DIE the lock words' values
/// order the transactions (the older holds the smaller timestamp); a writer meeting read
/// shares dies, since the shares do not say whose they are (so a wait never points from
/// young to old, and no cycle of waits can form).
fn judge(
    lock: Lock,
    locking: Locking,
    old: Option<u64>,
    mine: u64,
    (terms, ours): (Option<share::Terms>, Option<u64>),
) -> Conflict {
    let Some(old) = old else {
        return Conflict::Abort;
    };
    let shares = share::is_share(old);
    match lock {
        Lock::Share { .. } if share::one_more(old, terms).is_some() => {
            return Conflict::Retry(Lock::Share { expect: old });
        }
        // Free after all: no shares left (a last reader's release is under way), or void.
        Lock::Exclusive { .. } if share::free_for_writer(old, terms) => {
            return Conflict::Retry(Lock::Exclusive { expect: old });
        }
        // An upgrade: the word counts one share, ours (it cannot have started over while
        // ours is usable), with another expiry than we guessed.
        Lock::Exclusive { .. }
            if shares
                && share::count(old) == 1
                && ours.is_some_and(|h| share::usable(h, terms)) =>
        {
            return Conflict::Retry(Lock::Exclusive { expect: old });
        }
        _ => {}
    }
    let wait_die = locking == Locking::TwoPhase { wait: true };
    let holder = old & !(INVISIBLE | SHARED);
    let mine = mine & !(INVISIBLE | SHARED);
    // WAIT_DIE waits for a younger holder, TOCC's ordered locking for an older one.
    let waits = if wait_die {
        mine < holder
    } else {
        mine > holder
    };
    if (wait_die || locking == Locking::Ordered) && !shares && holder != 0 && waits {
        Conflict::Wait
    } else {
        Conflict::Abort
    }
}

/// A bucket READ of the item's chain completed: the key's tombstones noted, the record taken
/// from its slot if found, else the walk goes on to the next bucket (or ends: absent).
fn on_bucket<P: Protocol>(
    tx: &mut Tx<'_, P>,
    map: &PoolMap,
    (i, expect): (usize, Option<u64>),
    (b, mut hops, locking): (u64, u64, Locking),
    read: Fetched,
    out: &mut Outcome<'_>,
) {
    let trust_inv = tx.c.cfg.ford.trust_invisible_bit;
    let (table_id, key, rw) = (tx.items[i].table, tx.items[i].key, tx.items[i].rw);
    let t = table(map, table_id);
    let codec = t.codec();
    let bytes = read.bytes(&tx.c.ep);
    if bytes.len() < t.bucket_bytes as usize {
        // Only a malformed RPC reply is short: treat the memory node as failed.
        out.failed
            .get_or_insert(abort(AbortReason::ReplicaFailure, &tx.items[i]));
        return;
    }
    let scan = t.scan(b, bytes, key);
    let it = &mut tx.items[i];
    if b == t.home_bucket(key) {
        it.version = 0;
        // The chain's metadata word, for a key that turns out absent (SUNDIAL's chain lease).
        it.meta = chain_meta(bytes);
    }
    // The key's tombstone may be in any bucket of the chain: the greatest seen
    // is the version a read of the absent key observes.
    if let Some((slot, _)) = scan.tombstone {
        let v = codec.header(t.slot_bytes(bytes, slot)).version;
        it.version = it.version.max(v);
    }
    if let Some((_, off)) = scan
        .found
        .filter(|_| matches!(locking, Locking::TwoPhase { .. } | Locking::Ordered))
    {
        // 2PL: the slot is found; it is locked and read in the next round.
        tx.c.cache.insert(table_id, key, off);
        let lock = first_lock(locking, rw);
        out.next.push((i, Stage::Record { off, lock }, expect));
    } else if let Some((slot, off)) = scan.found {
        tx.c.cache.insert(table_id, key, off);
        let rec = t.slot_bytes(bytes, slot);
        let decoded = decode(codec, rec, &mut it.value, trust_inv);
        // (A backup's invisible word says nothing: see `on_record`.)
        let primary = it.node == t.primary();
        match decoded {
            Ok(h) if h.lock & INVISIBLE == 0 || !primary => {
                fill(it, codec, &h, off, rec);
                it.cold = rw;
            }
            _ => {
                let lock = Lock::None;
                out.next.push((i, Stage::Record { off, lock }, expect));
                out.again = true;
            }
        }
    } else {
        match next_bucket(t, scan.next, &mut hops) {
            Ok(Some(at)) => out.next.push((i, Stage::Bucket { at, hops }, expect)),
            Ok(None) => it.exists = false,
            Err(()) => {
                out.failed
                    .get_or_insert(abort(AbortReason::CorruptChain, it));
            }
        }
    }
}

/// A home bucket's metadata word (at [`CHAIN_META_OFF`]), from the bucket's bytes.
#[inline]
pub(crate) fn chain_meta(bucket: &[u8]) -> u64 {
    let at = CHAIN_META_OFF as usize;
    u64::from_le_bytes(bucket[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_WAIT: Locking = Locking::TwoPhase { wait: false };
    const WAIT_DIE: Locking = Locking::TwoPhase { wait: true };

    /// [`judge`] without leases, holding no share.
    fn conflict(lock: Lock, locking: Locking, old: Option<u64>, mine: u64) -> Conflict {
        judge(lock, locking, old, mine, (None, None))
    }

    #[test]
    fn a_read_share_is_tried_again_from_the_count_the_word_holds() {
        let share = Lock::Share { expect: 0 };
        for locking in [NO_WAIT, WAIT_DIE] {
            assert_eq!(
                conflict(share, locking, Some(SHARED | 3), 9 << 16),
                Conflict::Retry(Lock::Share { expect: SHARED | 3 })
            );
            // A writer's word is no share: NO_WAIT aborts; WAIT_DIE by age (below).
            assert_ne!(
                conflict(share, locking, Some(5 << 16 | 2), 9 << 16),
                Conflict::Retry(share)
            );
        }
        // A word being installed (invisible) grants no share either.
        assert_eq!(
            conflict(share, NO_WAIT, Some(INVISIBLE | 2), 1),
            Conflict::Abort
        );
    }

    #[test]
    fn wait_die_waits_only_when_older_than_an_exclusive_holder() {
        let x = Lock::Exclusive { expect: 0 };
        let (old, young) = ((5 << 16) | 1, (9 << 16) | 2);
        assert_eq!(conflict(x, WAIT_DIE, Some(young), old), Conflict::Wait);
        assert_eq!(
            conflict(x, WAIT_DIE, Some(young | INVISIBLE), old),
            Conflict::Wait
        );
        assert_eq!(conflict(x, WAIT_DIE, Some(old), young), Conflict::Abort);
        // A writer meeting read shares dies, whatever its age.
        assert_eq!(conflict(x, WAIT_DIE, Some(SHARED | 1), 1), Conflict::Abort);
        // NO_WAIT never waits; neither does OCC's hitchhiked lock.
        assert_eq!(conflict(x, NO_WAIT, Some(young), old), Conflict::Abort);
        let occ = Locking::Optimistic { hitchhike: true };
        assert_eq!(conflict(x, occ, Some(young), old), Conflict::Abort);
        // A malformed RPC reply: abort.
        assert_eq!(conflict(x, WAIT_DIE, None, old), Conflict::Abort);
    }

    #[test]
    fn ordered_locking_waits_only_when_younger_than_the_holder() {
        let x = Lock::Exclusive { expect: 0 };
        let (old, young) = ((5 << 16) | 1, (9 << 16) | 2);
        let ordered = Locking::Ordered;
        assert_eq!(conflict(x, ordered, Some(old), young), Conflict::Wait);
        assert_eq!(
            conflict(x, ordered, Some(old | INVISIBLE), young),
            Conflict::Wait
        );
        assert_eq!(conflict(x, ordered, Some(young), old), Conflict::Abort);
        // An OCC committer's word (its owner alone) is the oldest: waited for.
        assert_eq!(conflict(x, ordered, Some(3), young), Conflict::Wait);
        assert_eq!(first_lock(ordered, false), x);
    }

    #[test]
    fn under_leases_a_void_share_word_is_free_and_an_upgrade_follows_its_expiry() {
        let at = |now_ns| {
            Some(share::Terms {
                now_ns,
                share_ns: 100_000,
                guard_ns: 10_000,
            })
        };
        let held = share::one_more(0, at(0)).unwrap();
        let x = Lock::Exclusive { expect: 0 };
        // Good: a writer meets it; void from its expiry on: the writer CASes from it.
        assert_eq!(
            judge(x, NO_WAIT, Some(held), 1, (at(50_000), None)),
            Conflict::Abort
        );
        assert_eq!(
            judge(x, NO_WAIT, Some(held), 1, (at(200_000), None)),
            Conflict::Retry(Lock::Exclusive { expect: held })
        );
        // A reader joins a good count and starts a void one over.
        let s = Lock::Share { expect: 0 };
        assert_eq!(
            judge(s, WAIT_DIE, Some(held), 1, (at(200_000), None)),
            Conflict::Retry(Lock::Share { expect: held })
        );
        // Our share alone, its expiry raised by a reader since gone: the upgrade CASes from
        // the word as it is, while ours is usable; not once it is not.
        let raised = share::one_more(held, at(50_000)).unwrap() - 1;
        let up = Lock::Exclusive {
            expect: share::alone(held),
        };
        let ours = Some(held);
        assert_eq!(
            judge(up, NO_WAIT, Some(raised), 1, (at(60_000), ours)),
            Conflict::Retry(Lock::Exclusive { expect: raised })
        );
        assert_eq!(
            judge(up, NO_WAIT, Some(raised), 1, (at(95_000), ours)),
            Conflict::Abort
        );
        // Two shares, ours and another's: no upgrade.
        let two = share::one_more(held, at(60_000)).unwrap();
        assert_eq!(
            judge(up, NO_WAIT, Some(two), 1, (at(60_000), ours)),
            Conflict::Abort
        );
    }

    #[test]
    fn a_word_left_with_no_shares_is_free_to_a_writer() {
        let x = Lock::Exclusive { expect: 0 };
        assert_eq!(
            conflict(x, NO_WAIT, Some(SHARED), 1),
            Conflict::Retry(Lock::Exclusive { expect: SHARED })
        );
        let back = Lock::Exclusive { expect: SHARED };
        assert_eq!(
            conflict(back, NO_WAIT, Some(0), 1),
            Conflict::Retry(Lock::Exclusive { expect: 0 })
        );
    }
}
