//! RCC's SUNDIAL (Wang et al., "RCC", section 3.5 of the RCC digest; Yu et al., VLDB'18):
//! OCC with logical leases. Each record has a lease `[wts, rts]`: the version it holds was
//! written at `wts` and may be read by any transaction ordered up to `rts`. A transaction picks
//! its commit timestamp to fit the leases it saw, and extends (*renews*) those that end too
//! early, so that a write to a record another transaction read does not abort the reader: the
//! reader is ordered before the writer in timestamp order (`--protocol sundial`).
//!
//! Record layout: single-version, one metadata word (line 0, read with the header in one
//! atomic READ, G3), the **lease word** `LOCK (bit 63) | wts_lo (bits 32..62) | delta (bits
//! 0..31)`: the record's header `version` is its `wts` (`wts_lo` its low 31 bits, which tell one
//! write from the next), `rts = wts + delta`, and `LOCK` **freezes** the lease (a writer is
//! about to replace the version: no renewal may succeed). RCC keeps the lock in another word
//! and checks it on a READ before the renewal's CAS: a writer can lock and read the old `rts`
//! between them, and then commit inside the lease it just extended (the TOCTOU race, digest
//! 3.5, note 1). One word for the lease and the freeze makes every renewal a CAS that fails
//! once the lease is frozen.
//!
//! Phases, with their critical-path round trips (addresses cached):
//!
//! 1. **Fetch** (1 RT per batch of reads), as FORD's: read-write items CAS(header lock) + READ,
//!    read-only items READ; each item keeps the lease word it read. The undo log in the
//!    background.
//! 2. **Lock** (only for cold read-write items and inserts' slots): CAS + READ(header).
//! 3. **Renew** (1 RT when anything needs it; RCC's RENEW stage). `commit_ts` = the max of
//!    every read item's `wts` and every written item's `rts + 1` (and an insert's stamp). Each
//!    written item's lease is frozen, CAS(seen -> seen | LOCK); a CAS that finds the lease
//!    renewed meanwhile raises `commit_ts` past the new `rts` and freezes again. Each read item
//!    whose `rts < commit_ts` is renewed, CAS(seen -> delta = commit_ts - wts); one that finds
//!    the lease frozen or rewritten aborts, one that finds it renewed far enough is done. If
//!    `commit_ts` rose, renewals already done are redone: a round per rise, at most
//!    `reread_limit`.
//! 4. **Validate absence** (only for keys read absent): FORD's chain re-read (see below).
//! 5. **Commit** (1 RT): FORD's coalescent install, each written record with version
//!    `commit_ts` and lease word `(commit_ts, delta 0, unfrozen)`.
//! 6. **Release** (detached): header locks to 0; chain leases written, then chain locks to 0.
//!
//! So a read-only transaction whose leases cover its reads commits after its fetches alone
//! (a single-item one always does), and a read-write one costs 2 RTs plus 1 when a lease must
//! be frozen or renewed.
//!
//! **Phantoms.** Timestamp order is not real-time order, so a key seen absent cannot rest on
//! "still absent at validation": an insert that commits later, with a smaller timestamp, would
//! be ordered before the reader that missed it. Every home bucket has a **chain lease** (its
//! word at [`CHAIN_META_OFF`], the same format, `wts` the chain's last insert's commit
//! timestamp): a read of an absent key keeps the word its home bucket's READ returned and
//! renews it like a record's; an insert freezes its chain's lease under the chain's insert
//! lock, takes `commit_ts > rts`, and its release writes the lease back unfrozen with
//! `wts = commit_ts` before it frees the chain lock. FORD's absence validation stays: a bucket
//! READ is not atomic past line 0, so it could return the chain lease of an insert whose slot
//! it read before the insert landed.
//!
//! Lease words are only ever changed by CAS the Renew stage's way (G11), or WRITE-n by the
//! holder of the freeze (install, unfreeze). An abort unfreezes (CAS frozen -> unfrozen) and
//! waits for it before the locks' release, so a lock's next holder never finds a freeze left
//! by a live coordinator; recovery unfreezes a dead one's before it frees its locks.
//!
//! SUNDIAL is serializable in timestamp order, **not strictly serializable**: a transaction
//! that starts after another ended may be ordered before it (its leases let it commit at an
//! older timestamp). `dtxn torture` checks its histories without real-time order.
//!
//! Limits: `wts_lo` has 31 bits, so a record rewritten 2^31 times between a read and its
//! renewal would be taken for unchanged; commit timestamps of 2^31 and above abort (the chain
//! lease holds its `wts` in 31 bits). A crashed coordinator's undo image carries the lease as
//! it was read, so settling an uncommitted install may shorten a lease (issue: recovery does
//! not know lease words).

use crate::abort::{Abort, AbortReason};
use crate::config::TxnConfig;
use crate::item::{Access, Item, NewValue};
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::{install, Install};
use crate::mechanisms::rpc::{self, CasRead};
use crate::mechanisms::{abort, absent, fetch, insert, lock, release, undo};
use crate::mechanisms::{needs_meta_words, table, word_at};
use crate::protocol::{Protocol, Row};
use crate::recovery::{read_buckets, scan_chunks};
use crate::stage::{Stage, Stages};
use crate::tx::Tx;
use dtxn_fabric::{Endpoint, FabricError, NodeId};
use dtxn_store::index::CHAIN_META_OFF;
use dtxn_store::log::LogStatus;
use dtxn_store::record::META_OFF;
use dtxn_store::PoolMap;
use dtxn_store::RecordFormat;

/// The lease word's freeze bit.
pub(crate) const LOCK: u64 = 1 << 63;
/// The lease word's `wts_lo` (bits 32..62) and `delta` (bits 0..31).
const WTS_SHIFT: u32 = 32;
pub(crate) const WTS_MASK: u64 = (1 << 31) - 1;
const DELTA_MASK: u64 = (1 << 32) - 1;

/// A lease word: `wts`'s low 31 bits, and `delta`.
#[inline]
pub(crate) fn lease(wts: u64, delta: u64) -> u64 {
    debug_assert!(delta <= DELTA_MASK);
    ((wts & WTS_MASK) << WTS_SHIFT) | delta
}

#[inline]
pub(crate) fn wts_lo(w: u64) -> u64 {
    (w >> WTS_SHIFT) & WTS_MASK
}

#[inline]
pub(crate) fn delta(w: u64) -> u64 {
    w & DELTA_MASK
}

/// SUNDIAL: `--protocol sundial`, its stages by RCC's hybrid code (`rcc.hybrid`).
pub(crate) struct Sundial;

/// What the renew round does with an item's lease.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// Nothing (an insert whose chain another item of ours froze; a read of a chain we
    /// freeze ourselves).
    #[default]
    None,
    /// A lease of something we write: freeze it.
    Freeze,
    /// A lease of something we read: renew it up to `commit_ts`.
    Renew,
}

/// An item's lease, as the renew round sees it.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    job: Job,
    /// The lease word's (node, address): the record's word 0, or its home bucket's chain word.
    at: Option<(NodeId, u64)>,
    /// The full `wts` the lease counts from: the record's version, or the chain's `wts_lo`.
    base: u64,
    /// The word as last seen (by the fetch, then by the round's CASes).
    seen: u64,
    /// The frozen word our CAS may have put there (set when the CAS is posted, cleared when
    /// it is known to have failed): what an abort turns back.
    frozen: Option<u64>,
}

impl Lease {
    fn rts(&self) -> u64 {
        self.base + delta(self.seen)
    }
}

impl Protocol for Sundial {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const META_WORDS: u8 = 1;
    const OPTIONS: Option<&'static str> = Some("rcc");
    const FREEZES: bool = true;
    // Journaled: its lock words are taken by the shared mechanisms alone (execution's hitchhiked locks, the cold
    // items' lock round, inserts' chain locks), which journal each; its leases are not locks
    // (recovery unfreezes a dead writer's beside its locks: `FREEZES`).
    const JOURNALED: bool = true;
    const RPC_FORMS: Stages = Stages::of(&Stage::ALL);
    type Item = Lease;
    /// The commit timestamp.
    type Txn = u64;
    /// The renew round's CASes: (item, CAS, the word it puts there).
    type Scratch = Vec<(usize, CasRead, u64)>;

    fn rpc(cfg: &TxnConfig) -> Stages {
        cfg.rcc.hybrid.rpc_stages().and(Self::RPC_FORMS)
    }

    fn begin(tx: &mut Tx<'_, Self>) {
        tx.st = 0;
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        for a in accesses {
            needs_meta_words(&tx.c.map, a.table, a.key, 1)?;
        }
        fetch::records(tx, accesses, Locking::Optimistic { hitchhike: true }).await?;
        undo::log_undo(tx).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        for &(t, k, _) in rows {
            needs_meta_words(&tx.c.map, t, k, 1)?;
        }
        insert::insert(tx, rows).await
    }

    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        lock::lock_cold(tx).await
    }

    async fn validate(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        plan(tx);
        renew(tx).await?;
        absent::validate_absent(tx).await
    }

    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        let ts = tx.st;
        for it in tx.items.iter_mut().filter(|i| i.written()) {
            it.install = Some(ts);
            it.meta = lease(ts, 0);
        }
        install(tx, Install::Coalescent).await
    }

    /// A chain lease we froze holds what our release will write, still frozen, should we die
    /// before the release (recovery thaws it).
    fn before_install(tx: &mut Tx<'_, Self>) {
        let ts = tx.st;
        lock::seal_chain_freezes(tx, |l, offset| {
            let (_, (n, at)) = l.frozen.zip(l.at)?;
            if offset.is_some_and(|o| o + META_OFF as u64 == at) {
                return None;
            }
            let sealed = LOCK | lease(ts, 0);
            l.frozen = Some(sealed);
            Some((n, at, sealed))
        });
    }

    /// The chain leases we froze go back unfrozen with `wts = commit_ts`, in the batch before
    /// the chain locks' release (same way, so in order): the next inserter of the chain then
    /// finds the lease it must exceed.
    fn release(tx: &mut Tx<'_, Self>) {
        let map = tx.c.map.clone();
        let via = tx.c.via(Stage::Release);
        let word = lease(tx.st, 0).to_le_bytes();
        for it in &tx.items {
            if let Some((_, lock)) = it.chain_lock {
                let home = lock - 8;
                for &n in &table(&map, it.table).replicas {
                    rpc::write(&mut tx.c.ep, via, n, home + CHAIN_META_OFF, &word);
                }
            }
        }
        release::release(tx, LogStatus::Committed);
    }

    /// Every lease we may have frozen is unfrozen (CAS frozen -> as it was: one we did not
    /// freeze is left alone), and that is waited for before the locks are given back.
    async fn abort(tx: &mut Tx<'_, Self>) {
        lock::unfreeze(tx, Stage::Renew, |x| x.frozen.zip(x.at)).await;
        release::release_on_abort(tx).await;
    }
    /// Failover: a promoted primary's leases are its backup's, as the last install (or an
    /// insert's release, for a chain) wrote them: renewals went to the failed primary alone.
    /// An old-view reader may have renewed one there and committed above its `wts`; a
    /// new-view writer taking the stale `rts` would commit below that reader, under a version
    /// it did not see. So every lease and chain lease of a promoted table is raised to
    /// `bound`, the largest timestamp on the live primaries, which no old-view transaction
    /// exceeded: a read-write one's timestamp is the version of what it wrote, installed on
    /// every replica before it committed (and a slot's version never goes down: a commit's
    /// timestamp is at least the version it replaces); a read-only one's is the largest
    /// version or chain `wts` it read, committed, so on every replica as well. Nothing runs
    /// while the repair does (every coordinator waits for the view to be active), so the
    /// words are written, not CASed.
    async fn repair_promoted(
        ep: &mut Endpoint,
        map: &PoolMap,
        tables: &[u32],
    ) -> Result<(), FabricError> {
        let mut bound = 0u64;
        let mut bytes = Vec::new();
        for t in map.tables().filter(|t| t.meta_words >= 1) {
            let codec = t.codec();
            for chunk in scan_chunks(t) {
                read_buckets(ep, t, t.primary(), &chunk, &mut bytes).await?;
                for (b, bucket) in chunk.clone().zip(bytes.chunks(t.bucket_bytes as usize)) {
                    if b < t.bucket_count {
                        let w = word_at(bucket, CHAIN_META_OFF as usize);
                        bound = bound.max(wts_lo(w) + delta(w));
                    }
                    for s in 0..t.slots_per_bucket {
                        let slot = t.slot_bytes(bucket, s);
                        let h = codec.header(slot);
                        let d = if h.valid {
                            delta(word_at(slot, META_OFF))
                        } else {
                            0
                        };
                        bound = bound.max(h.version + d);
                    }
                }
            }
        }
        for t in map
            .tables()
            .filter(|t| t.meta_words >= 1 && tables.contains(&t.id))
        {
            let (n, codec) = (t.primary(), t.codec());
            for chunk in scan_chunks(t) {
                read_buckets(ep, t, n, &chunk, &mut bytes).await?;
                for (b, bucket) in chunk.clone().zip(bytes.chunks(t.bucket_bytes as usize)) {
                    let base_at = t.bucket(b);
                    if b < t.bucket_count {
                        let w = word_at(bucket, CHAIN_META_OFF as usize);
                        if let Some(raised) = raise(wts_lo(w), w, bound) {
                            ep.write(n, base_at + CHAIN_META_OFF, &raised.to_le_bytes());
                        }
                    }
                    for s in 0..t.slots_per_bucket {
                        let slot = t.slot_bytes(bucket, s);
                        let h = codec.header(slot);
                        let w = word_at(slot, META_OFF);
                        if let Some(raised) = raise(h.version, w, bound).filter(|_| h.valid) {
                            let at = t.slot(base_at, s) + META_OFF as u64;
                            ep.write(n, at, &raised.to_le_bytes());
                        }
                    }
                }
                ep.post().await?;
            }
        }
        Ok(())
    }
}

/// The lease word `w` (of `wts` `base`) with its `rts` raised to `bound` and unfrozen, if it
/// ends below it or is frozen (a roll-back writes its frozen undo image to the backups too,
/// and only the primary's is unfrozen), and the delta fits (timestamps stay below 2^31).
fn raise(base: u64, w: u64, bound: u64) -> Option<u64> {
    let d = delta(w).max(bound.saturating_sub(base));
    (w & LOCK != 0 || base + delta(w) < bound)
        .then(|| lease(base, d))
        .filter(|_| d <= DELTA_MASK)
}

/// Each item's job, lease address and seen word, and the starting `commit_ts`: after every
/// read item's `wts` (and a key read absent's tombstone), after every written lease's `rts`,
/// at or above every insert's stamp.
fn plan(tx: &mut Tx<'_, Sundial>) {
    let map = tx.c.map.clone();
    let chains: Vec<(NodeId, u64)> = tx.items.iter().filter_map(|i| i.chain_lock).collect();
    let mut ts = tx.st;
    for it in tx.items.iter_mut() {
        let t = table(&map, it.table);
        let home = t.home_bucket(it.key);
        let ours = chains.contains(&(t.primary(), t.insert_lock(home)));
        let chain = (t.primary(), home + CHAIN_META_OFF);
        let (job, at, base) = match it.offset {
            _ if it.chain_lock.is_some() => (Job::Freeze, chain, wts_lo(it.meta)),
            _ if it.new == NewValue::Insert => (Job::None, chain, 0),
            Some(off) if it.exists => {
                let job = if it.written() {
                    Job::Freeze
                } else {
                    Job::Renew
                };
                (job, (t.primary(), off + META_OFF as u64), it.version)
            }
            _ if ours => (Job::None, chain, 0),
            _ => (Job::Renew, chain, wts_lo(it.meta)),
        };
        // A lease we freeze is expected unfrozen first: a freeze seen before our lock was
        // taken is gone by now (a live writer unfreezes before it unlocks). One found there
        // under our lock (left by a crashed coordinator) is taken over (`on_cas`).
        let seen = if job == Job::Freeze {
            it.meta & !LOCK
        } else {
            it.meta
        };
        it.ext = Lease {
            job,
            at: Some(at),
            base,
            seen,
            frozen: None,
        };
        ts = ts.max(it.version).max(it.install.unwrap_or(0));
        match job {
            Job::Freeze => ts = ts.max(it.ext.rts() + 1),
            Job::Renew => ts = ts.max(base),
            Job::None => {}
        }
    }
    tx.st = ts;
}

/// Whether item `it` needs a CAS in the next round, and which: (expect, new).
fn next_cas(it: &Item<Lease>, ts: u64) -> Result<Option<(u64, u64)>, Abort> {
    let l = &it.ext;
    match l.job {
        Job::None => Ok(None),
        Job::Freeze if l.frozen.is_some() => Ok(None),
        Job::Freeze => Ok(Some((l.seen, l.seen | LOCK))),
        Job::Renew if l.rts() >= ts => Ok(None),
        // A frozen lease cannot be extended: its writer commits past its `rts`.
        Job::Renew if l.seen & LOCK != 0 => Err(abort(AbortReason::Validation, it)),
        Job::Renew => {
            let d = ts - l.base;
            if d > DELTA_MASK {
                return Err(abort(AbortReason::Validation, it));
            }
            Ok(Some((l.seen, (l.seen & !DELTA_MASK) | d)))
        }
    }
}

/// The renew round: freezes and renewals, again while `commit_ts` rises (see the module's
/// phase 3).
async fn renew(tx: &mut Tx<'_, Sundial>) -> Result<(), Abort> {
    let mut posted = std::mem::take(tx.s);
    let r = renew_rounds(tx, &mut posted).await;
    *tx.s = posted;
    r?;
    frozen_into_images(tx);
    Ok(())
}

/// [`renew`]'s rounds, with their vector from the coordinator's scratch.
async fn renew_rounds(
    tx: &mut Tx<'_, Sundial>,
    posted: &mut Vec<(usize, CasRead, u64)>,
) -> Result<(), Abort> {
    let mut rounds = 0;
    loop {
        if tx.st > WTS_MASK {
            let it = tx.items.first().expect("an item");
            return Err(abort(AbortReason::Validation, it));
        }
        posted.clear();
        let via = tx.c.via(Stage::Renew);
        for i in 0..tx.items.len() {
            let Some((expect, new)) = next_cas(&tx.items[i], tx.st)? else {
                continue;
            };
            let (n, at) = tx.items[i].ext.at.expect("planned");
            let c = CasRead::post(&mut tx.c.ep, via, n, at, (expect, new), None);
            if tx.items[i].ext.job == Job::Freeze {
                tx.items[i].ext.frozen = Some(new);
            }
            posted.push((i, c, new));
        }
        if posted.is_empty() {
            break;
        }
        rounds += 1;
        if rounds > tx.c.cfg.reread_limit {
            return Err(abort(AbortReason::Validation, &tx.items[posted[0].0]));
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[posted[0].0]));
        }
        for &(i, c, new) in posted.iter() {
            on_cas(tx, i, c, new)?;
        }
    }
    Ok(())
}

/// One CAS of the renew round completed.
fn on_cas(tx: &mut Tx<'_, Sundial>, i: usize, c: CasRead, new: u64) -> Result<(), Abort> {
    let swapped = c.swapped(&tx.c.ep);
    let old = c.old(&tx.c.ep);
    let it = &mut tx.items[i];
    if swapped {
        it.ext.seen = new;
        return Ok(());
    }
    let Some(w) = old else {
        // Only a malformed RPC reply has no word: the memory node counts as failed.
        return Err(abort(AbortReason::ReplicaFailure, it));
    };
    let freeze = it.ext.job == Job::Freeze;
    if freeze {
        it.ext.frozen = None;
    }
    // Another version was installed (or, for a read, a writer froze the lease): the read is
    // not valid at any timestamp we can still take.
    if wts_lo(w) != wts_lo(it.ext.seen) || !freeze && w & LOCK != 0 {
        return Err(abort(AbortReason::Validation, it));
    }
    // Only `delta` grew (a reader renewed): a writer moves past the new `rts`; a reader's
    // renewal may have been done for it already.
    it.ext.seen = w;
    if freeze {
        tx.st = tx.st.max(it.ext.rts() + 1);
    }
    Ok(())
}

/// The undo images of frozen records carry the frozen word: a roll-back after a failed
/// install then leaves the lease as frozen as it was (the abort unfreezes it), never an older
/// lease that would let a renewal shorten what readers were promised.
fn frozen_into_images(tx: &mut Tx<'_, Sundial>) {
    let map = tx.c.map.clone();
    for it in tx.items.iter_mut() {
        if let (Some(f), true) = (it.ext.frozen, it.exists && it.written()) {
            if !it.image.is_empty() {
                table(&map, it.table)
                    .codec()
                    .set_meta_word(&mut it.image, 0, f);
            }
        }
    }
}
