//! RCC's MVCC (Wang et al., "RCC", section 3.4 of the RCC digest): multi-version timestamp
//! ordering. Every transaction takes a timestamp `ctts` at begin from its coordinator's local
//! clock (RCC's layout: clock high, coordinator id low, [`timestamp::local_clock`]), raised
//! past every larger `wts` or `rts` the coordinator has seen; transactions are serialized in
//! `ctts` order, with no validation phase: a read raises the record's read timestamp `rts`, a
//! write must be above every committed version's `wts` and above `rts` (`--protocol mvcc`).
//!
//! **Layout, and why.** RCC's static version slots, `--set mvcc.slots=K` (K = 4 by default,
//! 1 to 8; 1 is a single version): each record slot holds K copies of the record back to
//! back ([`dtxn_store::record`]'s *copies*). Copy 0 is a single-version stamped record
//! (FORD's, [`RecordFormat::Single`]) with one metadata word: its header `lock` is RCC's `tts`
//! (the holder's lock word is its `ctts`, owner id in the low bits as every lock word here),
//! its header `version` is the newest committed version's `wts`, stamped on every line, and
//! metadata word 0 (in line 0, so one atomic line holds `tts`, `wts` and `rts` together, G3)
//! is the **rts word**: `FROZEN (bit 63) | rts`. Copies 1..K hold older versions, each a whole
//! encoded record stamped with its own `wts`, its lock word holding the `wts` of the version
//! that replaced it. A commit displaces copy 0 into the oldest older copy (RCC's "overwrite
//! the oldest slot") and writes the new version over copy 0, in one batch (the shared
//! install, [`crate::mechanisms::install`]).
//!
//! Why copies rather than RCC's `wts[4]` array in the header, or Motor's CVTs: every shared
//! mechanism keeps working on copy 0 as on any single-version record (the stamped fetch and
//! its torn re-read, the hitchhiked lock, inserts, the undo log, `settle`'s roll forward and
//! back, the RPC forms, the install), and the older copies ride along as bytes: the fetch's
//! READ covers the whole slot (K copies, K x the bytes; under `mvcc.lazy_slots` a read-only
//! item's READ takes copy 0 alone and the older copies come in a second READ when needed),
//! the undo log keeps copy 0 alone, and the install posts one more WRITE per record.
//! Per-line stamps stay exact for every copy: the fetch checks copy 0's (a torn one is read
//! again), the chain walk each older copy's (a torn one, caught mid-write or left by a
//! crashed commit, is no link). A roll-back from the log leaves the older copy the commit
//! overwrote as it wrote it (the version it replaced, naming a successor that never
//! committed): harmless, since readers follow only links from committed versions. A
//! `wts[K]` array would not fit line 0 beside the header and the rts word (K = 4 needs 32
//! bytes of its 24 free), and copies written in place under it would need stamps tied to
//! the array anyway. Motor's CVT code holds versions as a newest value plus pre-images (an
//! older version is rebuilt, and a pre-image longer than 8 bytes lives in the slot's
//! attribute bar, a second READ), and it is typed on Motor's transaction (`Tx<'_, Motor>`,
//! its oracle and committing marks): sharing it would be a refactor of Motor first, for a
//! layout that is not RCC's.
//!
//! A reader does not trust an older copy because its `wts` is the largest below `ctts` (the
//! lines of one READ come from different moments, and a copy displaced by a commit that was
//! rolled back names a successor that never was): it follows the chain of copies from the
//! newest version down, each copy naming the version that replaced it ([`read_older`]).
//!
//! The rts word is **frozen** (bit 63) by a writer that holds the record's lock and has
//! checked W1: a reader's CAS then fails, so no reader is admitted below a version about to be
//! installed, and the install may WRITE the word (G11: the word changes only by CAS, or by a
//! WRITE of whoever froze it). An abort unfreezes it by CAS.
//!
//! Phases, with their critical-path round trips (addresses cached):
//!
//! 1. **Fetch** (1 RT per batch of reads): read-write items CAS(lock: 0 -> ctts) + READ (W2,
//!    RCC's lock, hitchhiked on the fetch; the READ after the CAS is RCC's second READ, and W1
//!    is checked atomically by the freeze below), read-only items READ. Each READ takes the
//!    record's K copies. Per-line stamps make a torn READ exact: it is read again. R1 for a
//!    read-only item whose newest version is not below `ctts`: it reads the newest older copy
//!    below `ctts`, found down the chain of copies, or aborts at once (`no-slot`: no slot
//!    holds its version); under `mvcc.lazy_slots` its READ took copy 0 alone, and its older
//!    copies are READ now (1 RT more, for those items only). The undo log (copy 0) in the
//!    background.
//! 2. **Lock** (only inserts' free slots and cold items): CAS + READ(header).
//! 3. **Raise + freeze** (1 RT when anything needs it; RCC's rts CAS and W1 re-check). R1:
//!    every item's `wts < ctts` (for a key read absent: its tombstone's), else abort. Each
//!    written record's rts word is frozen, CAS(rts -> rts | FROZEN): W1 (`rts < ctts`) holds
//!    on the word the CAS swapped, atomically; a CAS that finds the word raised by a reader
//!    checks W1 on what it found and tries again. Each read record's word is raised to `ctts`
//!    unless it is there already: CAS(rts -> ctts) with a READ of the header after it in the
//!    same batch (G6). No atomic max: a CAS that fails tries again from the word it found,
//!    and then the READ after it must show the version read unchanged (the word also changes
//!    when a version is installed). A word found frozen below `ctts` aborts the reader: a
//!    writer that passed W1 below us holds the record. Keys read absent raise their home
//!    bucket's chain word the same way; inserts freeze it.
//! 4. **Validate absence** (only for keys read absent): FORD's chain re-read.
//! 5. **Commit** (1 RT): FORD's coalescent install, each written record with version `ctts`
//!    and an unfrozen rts word `ctts`, its previous version first written over the oldest
//!    older copy (same batch, same QP: applied before the new version).
//! 6. **Release** (detached): frozen chain words written back unfrozen, then the locks.
//!
//! So a read-only transaction costs 2 RTs (fetch, raise; 1 if every rts is high enough or
//! every item was read from an older copy), a read-write one 3 (fetch, freeze, commit): the
//! slots add bytes, not round trips. Every stage follows RCC's hybrid code (`--set
//! rcc.hybrid=CODE`); every atomic on an rts word (raise, freeze, unfreeze) goes the fetch
//! stage's way (G11). As RPCs, a raise is one RAISE request (the memory node raises whatever
//! the word holds, unless frozen, and READs the header after it: no retry), a freeze a LOCK
//! request (CAS + READ). A read-only item's fetch as RPCs is itself a RAISE request, with the
//! READ of the whole record after the raise (RCC's one-request RPC read,
//! [`Locking::Timestamped`]): the rts word it returns is raised already (or frozen, or
//! higher), so phase 3 has nothing to raise, and a read-only transaction whose addresses are
//! cached costs 1 RT. Exact for the same reason as a raise with its READ after it: a writer
//! below us either froze before the raise (the word comes back frozen: we abort) or freezes
//! after it (W1 fails on the raised word).
//!
//! **The rts-bump ordering race** (digest 3.4, note 1): in RCC, a reader checks its READ and
//! raises `rts` afterwards, and a writer checks W1 on a READ after its lock; a writer below the
//! reader can lock and read the old `rts` before the raise, and commit a version the reader
//! should have read. Here the writer's W1 check *is* its freeze CAS on the rts word, and a
//! reader's raise is a CAS on the same word, so the two are ordered: raise first and the
//! freeze fails (W1 fails on the raised word, the writer aborts); freeze first and the raise
//! fails (the reader aborts). No R2 check of `tts` is needed: a lock alone promises nothing
//! until its holder's freeze. The reader's half: a raise that finds the word changed may have
//! been overtaken by a whole install (lock, freeze, new version, new word) below it, so the
//! READ after that CAS must show the version read (RCC's retry loop, which only CASes up from
//! what it finds, would commit the stale read). Tests: `crates/txn/tests/mvcc.rs`.
//!
//! **Torn reads** are exact, not the two equal READs' heuristic: every line of a record
//! carries its version (the writer's `ctts`, unique), and a READ whose lines disagree is read
//! again (the shared fetch).
//!
//! **Phantoms.** A key read absent raises its home bucket's chain word (at
//! [`CHAIN_META_OFF`]) to `ctts`; an insert (under the chain's insert lock) freezes that word
//! and must be above it; its release writes it back unfrozen. So no transaction below a reader
//! inserts a key the reader saw absent after it looked.
//!
//! MVCC with local clocks is serializable in timestamp order, **not strictly serializable**: a
//! transaction that starts after another ended, on a coordinator whose clock is behind, is
//! ordered before it. Histories are checked without real-time order.
//!
//! Limits: a read-write item (and a key read absent) still needs the newest version below
//! `ctts` (W1; a tombstone has no older copies). A crashed coordinator's logged undo image holds the rts
//! word as its fetch read it, so settling may lower `rts` (as SUNDIAL's leases). A freeze a
//! crashed writer left under its lock is undone by recovery before it frees the lock
//! (`Protocol::FREEZES`), logged or not (the undo log may not have landed).
//!
//! **Memory-node failover.** Readers raise `rts` on the primary alone: a promoted backup has
//! none of the raises made before the failure, and a read-only transaction's `ctts` is on no
//! live node, so no bound on it can be read there (SUNDIAL's repair has one). Instead, with
//! failover on, `ctts` carries the pool's view number above the clock
//! ([`timestamp::view_clock`]): every new-view transaction is above every old-view one, so
//! W1 against a stale promoted `rts` admits no writer below an old-view reader. The repair
//! ([`Mvcc::repair_promoted`]) unfreezes what failed installs' roll-backs left frozen on the
//! backups. Test: `crates/txn/tests/failover_mvcc.rs`, with its negative control.

use crate::abort::{Abort, AbortReason};
use crate::config::TxnConfig;
use crate::failover;
use crate::item::{Access, Item, NewValue};
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::{install, Install};
use crate::mechanisms::rpc::{self, CasRead, Read};
use crate::mechanisms::validate::header_of;
use crate::mechanisms::{abort, absent, fetch, insert, lock, release, undo};
use crate::mechanisms::{needs_meta_words, table, timestamp};
use crate::protocol::{Protocol, Row};
use crate::stage::{Stage, Stages};
use crate::tx::Tx;
use dtxn_fabric::{Endpoint, FabricError, NodeId};
use dtxn_store::index::CHAIN_META_OFF;
use dtxn_store::log::LogStatus;
use dtxn_store::record::{RecordHeader, HEADER_BYTES, META_OFF};
use dtxn_store::RecordFormat;
use dtxn_store::{PoolMap, TableInfo};

// The rts word's freeze bit (the memory nodes' RAISE requests know it).
use crate::mechanisms::rpc::FROZEN;

/// RCC's MVCC: `--protocol mvcc`, its stages by RCC's hybrid code (`rcc.hybrid`).
pub(crate) struct Mvcc;

/// What the raise + freeze round does with an item's rts word.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Job {
    #[default]
    None,
    /// A record or chain we read: raise its rts to `ctts`.
    Raise,
    /// A record we write, or a chain we insert into: freeze it, W1 on what it held.
    Freeze,
}

/// An item's rts word, as the raise + freeze round sees it.
#[derive(Debug, Default)]
pub(crate) struct Word {
    job: Job,
    /// The word's (node, address): the record's word 0, or its home bucket's chain word.
    at: Option<(NodeId, u64)>,
    /// The word as last seen.
    seen: u64,
    /// Raise: the word is at `ctts` or above.
    raised: bool,
    /// Raise: a CAS found the word changed, so a version may have been installed since the
    /// fetch: the record's version must be read again (after that CAS) before the read holds.
    check: bool,
    /// The frozen word our CAS may have put there (what an abort turns back).
    frozen: Option<u64>,
    /// A read of an older version slot (the record's newest is above us): exact as read, so
    /// no rts raise and no re-check (see [`read_older`]).
    older: bool,
}

impl Word {
    /// Whether the word needs no more raising (frozen: by a writer above us, if high enough).
    fn high_enough(w: u64, ts: u64) -> bool {
        w & !FROZEN >= ts
    }
}

/// Per coordinator: the greatest timestamp it handed out or saw (its clock never goes below
/// it), and the round's posted CASes and READs.
#[derive(Default)]
pub(crate) struct Scratch {
    last: u64,
    cas: Vec<(usize, CasRead, u64)>,
    reads: Vec<(usize, Read)>,
}

impl Protocol for Mvcc {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const META_WORDS: u8 = 1;
    /// RCC's four version slots (`--set mvcc.slots=K`).
    const COPIES: u8 = 4;
    const OPTIONS: Option<&'static str> = Some("rcc");
    const FREEZES: bool = true;
    // Journaled: its lock words are taken by the shared mechanisms alone (execution's hitchhiked locks, the cold
    // items' lock round, inserts' chain locks), which journal each; its rts words are not locks
    // (recovery unfreezes a dead writer's beside its locks: `FREEZES`).
    const JOURNALED: bool = true;
    const RPC_FORMS: Stages = Stages::of(&Stage::COMMON);
    type Item = Word;
    /// `ctts`.
    type Txn = u64;
    type Scratch = Scratch;

    fn rpc(cfg: &TxnConfig) -> Stages {
        cfg.rcc.hybrid.rpc_stages().and(Self::RPC_FORMS)
    }

    /// `ctts` from the local clock, above everything the coordinator has seen; it is the lock
    /// word of every lock the transaction takes (RCC's `tts`). With memory-node failover on,
    /// the view's number rides above the clock (see the module doc's failover).
    fn begin(tx: &mut Tx<'_, Self>) {
        let (now, last, owner) = (tx.c.ep.now_ns(), tx.s.last, tx.c.owner);
        let ts = match tx.c.failover {
            true => timestamp::view_clock(now, last, owner, tx.c.map.view().number),
            false => timestamp::local_clock(now, last, owner),
        };
        tx.s.last = ts;
        tx.st = ts;
        tx.c.lock_word = ts;
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        for a in accesses {
            needs_meta_words(&tx.c.map, a.table, a.key, 1)?;
        }
        let ts = tx.st;
        fetch::records(tx, accesses, Locking::Timestamped { ts }).await?;
        read_older(tx).await?;
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
        plan(tx)?;
        let mut s = std::mem::take(tx.s);
        let r = rounds(tx, &mut s).await;
        *tx.s = s;
        r?;
        frozen_into_images(tx);
        absent::validate_absent(tx).await
    }

    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        let ts = tx.st;
        for it in tx.items.iter_mut().filter(|i| i.written()) {
            it.install = Some(ts);
            it.meta = ts;
        }
        install(tx, Install::Coalescent).await
    }

    /// A chain word we froze holds what our release will write, still frozen, should we die
    /// before the release (recovery thaws it).
    fn before_install(tx: &mut Tx<'_, Self>) {
        let ts = tx.st;
        lock::seal_chain_freezes(tx, |w, offset| {
            let (f, (n, at)) = w.frozen.zip(w.at)?;
            if record_word(offset, at) {
                return None;
            }
            let sealed = FROZEN | (f & !FROZEN).max(ts);
            w.frozen = Some(sealed);
            Some((n, at, sealed))
        });
    }

    /// Chain words we froze go back unfrozen, at least `ctts` (our own absent reads of the
    /// chain), before the chain locks' release (same way, so in order). Records' words were
    /// written by the install.
    fn release(tx: &mut Tx<'_, Self>) {
        let map = tx.c.map.clone();
        let via = tx.c.via(Stage::Release);
        let ts = tx.st;
        for it in &tx.items {
            let (Some(f), Some((_, at))) = (it.ext.frozen, it.ext.at) else {
                continue;
            };
            if record_word(it.offset, at) {
                continue;
            }
            let word = (f & !FROZEN).max(ts).to_le_bytes();
            for &n in &table(&map, it.table).replicas {
                rpc::write(&mut tx.c.ep, via, n, at, &word);
            }
        }
        release::release(tx, LogStatus::Committed);
    }

    /// Every word we froze is unfrozen (CAS frozen -> as it was), and that is waited for
    /// before the locks are given back. Raises stay: an `rts` too high only costs a writer an
    /// abort, and lowering one could undo another reader's raise.
    async fn abort(tx: &mut Tx<'_, Self>) {
        lock::unfreeze(tx, Stage::Fetch, |x| x.frozen.zip(x.at)).await;
        release::release_on_abort(tx).await;
    }

    /// Failover: a promoted primary's rts words are its backup's, as installs and releases
    /// wrote them; raises went to the failed primary alone. They need no raising: every
    /// timestamp of the new view is above every one of an older view (the view's number
    /// rides above the clock, [`timestamp::view_clock`]), so W1 holds against every old-view
    /// reader whatever the promoted word says. What a backup may hold that a primary must not
    /// is a *frozen* word: a failed install's roll-back writes its frozen image to every
    /// replica, and only the primary's is unfrozen by the abort (readers would abort on it
    /// until the record's next writer took it over). Nothing runs while the repair does, so
    /// a frozen word on a promoted primary is stale: written back unfrozen.
    async fn repair_promoted(
        ep: &mut Endpoint,
        map: &PoolMap,
        tables: &[u32],
    ) -> Result<(), FabricError> {
        failover::each_promoted_bucket(ep, map, tables, |ep, t, b, at, bucket| {
            if t.meta_words < 1 {
                return;
            }
            let n = t.primary();
            let unfreeze = |ep: &mut Endpoint, word_at: usize, addr: u64| {
                let w = u64::from_le_bytes(bucket[word_at..word_at + 8].try_into().expect("word"));
                if w & FROZEN != 0 {
                    ep.write(n, addr, &(w & !FROZEN).to_le_bytes());
                }
            };
            if b < t.bucket_count {
                let c = CHAIN_META_OFF as usize;
                unfreeze(ep, c, at + c as u64);
            }
            for s in 0..t.slots_per_bucket {
                let slot = t.slot(at, s) - at;
                let m = slot as usize + META_OFF;
                unfreeze(ep, m, at + m as u64);
            }
        })
        .await
    }
}

/// Whether the word at `at` is the record's at `offset` (not a chain's).
fn record_word(offset: Option<u64>, at: u64) -> bool {
    offset.is_some_and(|o| o + META_OFF as u64 == at)
}

/// R1 (and W1 on `wts`) for every item, and each item's job on its rts word.
fn plan(tx: &mut Tx<'_, Mvcc>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let ts = tx.st;
    let mut seen_max = 0;
    // Chains whose word one of our items freezes: our own absent reads of them need no raise
    // (the release writes the word back at `ctts` or above).
    let mut frozen_chains: Vec<(NodeId, u64)> = Vec::new();
    for it in tx.items.iter_mut() {
        if it.ext.older {
            continue;
        }
        let t = table(&map, it.table);
        let chain = (t.primary(), t.home_bucket(it.key) + CHAIN_META_OFF);
        let (job, at) = match it.offset {
            _ if it.chain_lock.is_some() => (Job::Freeze, chain),
            _ if it.new == NewValue::Insert => (Job::None, chain),
            Some(off) if it.exists => {
                let job = if it.written() {
                    Job::Freeze
                } else {
                    Job::Raise
                };
                (job, (t.primary(), off + META_OFF as u64))
            }
            // A key absent and written (re-created over its tombstone, under the slot's lock):
            // the chain's absent readers must be below us.
            _ if it.written() => (Job::Freeze, chain),
            _ => (Job::Raise, chain),
        };
        // R1 / W1: the version read (a key absent: its tombstone's) is below us; an insert's
        // slot has no stamp above us.
        if it.version >= ts || it.install.is_some_and(|s| s > ts) {
            return Err(abort(AbortReason::NewerVersion, it));
        }
        seen_max = seen_max.max(it.version).max(it.meta & !FROZEN);
        if job == Job::Freeze && at == chain {
            if frozen_chains.contains(&chain) {
                it.ext = Word::default();
                continue;
            }
            frozen_chains.push(chain);
        }
        it.ext = Word {
            job,
            at: Some(at),
            seen: it.meta,
            ..Word::default()
        };
    }
    for it in tx.items.iter_mut() {
        if it.ext.job == Job::Raise && it.ext.at.is_some_and(|a| frozen_chains.contains(&a)) {
            it.ext.job = Job::None;
        }
    }
    tx.s.last = tx.s.last.max(seen_max);
    Ok(())
}

/// R1 over the version slots, at the fetch: a read-only item whose record's newest version is
/// not below us (`wts >= ctts`) reads the newest older copy below us instead, or aborts
/// ([`AbortReason::NoSlot`]) if no copy holds it. The copy is trusted only at the end of a
/// chain from the newest version down: each older copy carries the version that replaced it
/// (its lock word, written by that version's commit, [`crate::mechanisms::install`]), and
/// the chain is `v0` (the newest, visible: committed) -> the copy replaced by `v0` -> the copy
/// replaced by that one ... -> the first copy below us. A copy naming `x` as its successor is
/// written only by `x`'s commit, holding the lock (a version's commit displaces exactly its
/// predecessor, which was in copy 0 under its lock: committed), so the chain names
/// consecutive committed versions whatever moment each copy was read at (each copy's stamps
/// checked: a torn one is no link), and the copy read is
/// the newest committed version below us: its successor is above us, committed, and every
/// later version is above that. So the read needs no rts raise and no re-check (no version
/// can ever be installed between it and us). A copy that merely has the largest `wts` below
/// us is not enough: lines of one READ come from different moments, and a copy written by a
/// commit that was then rolled back names a successor that never was.
///
/// Under `mvcc.lazy_slots` the fetch READ took the newest version alone: the older copies of
/// the items that need one are READ now (one round trip more, for those reads only; the
/// chain's links hold whenever they are read).
async fn read_older(tx: &mut Tx<'_, Mvcc>) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let ts = tx.st;
    let needs = |it: &Item<Word>| !(it.rw || !it.exists || it.ext.older || it.version < ts);
    let mut reads = std::mem::take(&mut tx.s.reads);
    reads.clear();
    let via = tx.c.via(Stage::Fetch);
    for (i, it) in tx.items.iter().enumerate().filter(|(_, it)| needs(it)) {
        let t = table(&map, it.table);
        let (copies, b) = (usize::from(t.copies), t.copy_bytes());
        if copies > 1 && it.image.len() < copies * b {
            let off = it.offset.expect("exists") + b as u64;
            let len = (copies - 1) * b;
            reads.push((i, Read::post(&mut tx.c.ep, via, it.node, off, len)));
        }
    }
    if let Some(&(first, _)) = reads.first() {
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[first]));
        }
        for &(i, r) in &reads {
            let it = &mut tx.items[i];
            let (b, bytes) = (table(&map, it.table).copy_bytes(), r.bytes(&tx.c.ep));
            // Copy 0 is not looked at again: zeros stand for it.
            it.image.clear();
            it.image.resize(b, 0);
            it.image.extend_from_slice(bytes);
        }
    }
    tx.s.reads = reads;
    for it in tx.items.iter_mut() {
        if !needs(it) {
            continue;
        }
        tx.s.last = tx.s.last.max(it.version);
        let t = table(&map, it.table);
        let Some((c, v)) = older_copy(t, it, ts) else {
            return Err(abort(AbortReason::NoSlot, it));
        };
        let b = t.copy_bytes();
        let Item { image, value, .. } = it;
        if t.codec().decode(&image[c * b..(c + 1) * b], value).is_err() {
            return Err(abort(AbortReason::NoSlot, it));
        }
        it.version = v;
        it.ext.older = true;
    }
    Ok(())
}

/// The copy (index, version) at the end of the chain from the item's newest version down to
/// the first version below `ts` (see [`read_older`]), if the record keeps one.
fn older_copy<X>(t: &TableInfo, it: &Item<X>, ts: u64) -> Option<(usize, u64)> {
    let (copies, b) = (usize::from(t.copies), t.copy_bytes());
    if it.image.len() < copies * b {
        return None;
    }
    let codec = t.codec();
    // A torn copy (being overwritten, or left torn by a crashed commit: the undo log restores
    // copy 0 alone) is no link: its stamps are checked, as copy 0's were by the fetch.
    let replaced_by = |c: usize, next: u64| {
        let h = codec.check(&it.image[c * b..(c + 1) * b]).ok()?;
        (h.valid && h.key == it.key && h.table == it.table && h.lock == next && h.version < next)
            .then_some(h.version)
    };
    let mut next = it.version;
    for _ in 1..copies {
        let (c, v) = (1..copies).find_map(|c| replaced_by(c, next).map(|v| (c, v)))?;
        if v < ts {
            return Some((c, v));
        }
        next = v;
    }
    None
}

/// The raise + freeze rounds (the module's phase 3): again while a CAS found the word
/// changed, at most `reread_limit` + 1 rounds.
async fn rounds(tx: &mut Tx<'_, Mvcc>, s: &mut Scratch) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let ts = tx.st;
    let mut n_rounds = 0;
    loop {
        s.cas.clear();
        s.reads.clear();
        // Every atomic on an rts word goes one way (G11): the fetch stage's, RCC's READ.
        let via = tx.c.via(Stage::Fetch);
        let read_via = tx.c.via(Stage::Validate);
        for i in 0..tx.items.len() {
            let it = &tx.items[i];
            let w = &it.ext;
            let Some((n, at)) = w.at.filter(|_| w.job != Job::None) else {
                continue;
            };
            let record = record_word(it.offset, at);
            let cas = match w.job {
                Job::Freeze if w.frozen.is_none() => {
                    // W1 on the word as last seen (under our lock: a freeze found there is a
                    // crashed coordinator's, taken over).
                    if Word::high_enough(w.seen, ts) {
                        return Err(abort(AbortReason::NewerVersion, it));
                    }
                    Some((w.seen, w.seen | FROZEN))
                }
                Job::Raise if !w.raised => {
                    if w.seen & FROZEN != 0 && !Word::high_enough(w.seen, ts) {
                        // A writer that passed W1 below us holds it: it may commit a version
                        // we should have read.
                        return Err(abort(AbortReason::Validation, it));
                    }
                    (!Word::high_enough(w.seen, ts)).then_some((w.seen, ts))
                }
                _ => None,
            };
            let reread = (record && w.job == Job::Raise).then(|| {
                let off = it.offset.expect("a record");
                (off, HEADER_BYTES)
            });
            match cas {
                Some(c) => {
                    let posted = if w.job == Job::Raise {
                        CasRead::raise(&mut tx.c.ep, via, n, at, c, reread)
                    } else {
                        CasRead::post(&mut tx.c.ep, via, n, at, c, reread)
                    };
                    s.cas.push((i, posted, c.1));
                    if w.job == Job::Freeze {
                        tx.items[i].ext.frozen = Some(c.1);
                    }
                }
                None => {
                    if w.check && record {
                        let (off, len) = reread.expect("a record");
                        let p = table(&map, it.table).primary();
                        s.reads
                            .push((i, Read::post(&mut tx.c.ep, read_via, p, off, len)));
                    }
                    if w.job == Job::Raise {
                        // High enough already (a Raise that needs a CAS has one).
                        tx.items[i].ext.raised = true;
                    }
                }
            }
        }
        let Some(first) = s.cas.first().map(|c| c.0).or(s.reads.first().map(|r| r.0)) else {
            return Ok(());
        };
        n_rounds += 1;
        if n_rounds > tx.c.cfg.reread_limit + 1 {
            return Err(abort(AbortReason::Validation, &tx.items[first]));
        }
        if tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[first]));
        }
        for &(i, c, new) in &s.cas {
            on_cas(tx, i, c, new)?;
        }
        for &(i, r) in &s.reads {
            let h = header_of(r.bytes(&tx.c.ep));
            check_version(tx, i, h)?;
        }
    }
}

/// One CAS of the round completed.
fn on_cas(tx: &mut Tx<'_, Mvcc>, i: usize, c: CasRead, new: u64) -> Result<(), Abort> {
    let ts = tx.st;
    let swapped = c.swapped(&tx.c.ep);
    let old = c.old(&tx.c.ep);
    let it = &mut tx.items[i];
    let Some(w) = old.filter(|_| !swapped).or(swapped.then_some(new)) else {
        // Only a malformed RPC reply has no word: the memory node counts as failed.
        return Err(abort(AbortReason::ReplicaFailure, it));
    };
    tx.s.last = tx.s.last.max(w & !FROZEN);
    match it.ext.job {
        Job::Freeze if swapped => {}
        Job::Freeze => {
            it.ext.frozen = None;
            let ours = it.exists || it.chain_lock.is_some();
            if w & FROZEN != 0 && ours {
                // Frozen under our lock: a crashed coordinator's leftover, ours now.
                it.ext.frozen = Some(w);
                if Word::high_enough(w, ts) {
                    return Err(abort(AbortReason::NewerVersion, it));
                }
            } else if w & FROZEN != 0 {
                return Err(abort(AbortReason::LockConflict, it));
            }
            // A reader raised it meanwhile: W1 again on what it holds (next round).
            it.ext.seen = w;
        }
        Job::Raise if swapped => it.ext.raised = true,
        Job::Raise => {
            // Changed since we saw it: by another reader, or by a writer's freeze or install.
            // The READ after this CAS tells whether a version was installed. (A RAISE
            // request raised whatever it found, unless frozen.)
            it.ext.seen = if c.is_rpc() && w & FROZEN == 0 {
                w.max(ts)
            } else {
                w
            };
            if record_word(it.offset, it.ext.at.expect("planned").1) {
                it.ext.check = true;
                let bytes = c.bytes(&tx.c.ep);
                // An RPC CAS that did not swap returns no bytes: READ next round.
                if !bytes.is_empty() {
                    let h = header_of(bytes);
                    check_version(tx, i, h)?;
                }
            }
        }
        Job::None => {}
    }
    Ok(())
}

/// A READ of record item `i`'s header, executed after a CAS that found its rts word changed:
/// the version we read must still be the newest (else a writer installed one, possibly below
/// us, that we should have read).
fn check_version(tx: &mut Tx<'_, Mvcc>, i: usize, h: Option<RecordHeader>) -> Result<(), Abort> {
    let it = &mut tx.items[i];
    let Some(h) = h else {
        return Err(abort(AbortReason::ReplicaFailure, it));
    };
    if !h.valid || h.key != it.key || h.table != it.table || h.version != it.version {
        return Err(abort(AbortReason::Validation, it));
    }
    it.ext.check = false;
    Ok(())
}

/// The undo images of frozen records carry the frozen word: a roll-back after a failed
/// install leaves the word frozen (the abort unfreezes it), never an older `rts` that would
/// let a writer in below a reader.
fn frozen_into_images(tx: &mut Tx<'_, Mvcc>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use dtxn_store::{Plan, PoolShape, TableSpec};

    const T: u32 = 1;

    /// A 4-copy table, and an item of key 1 whose newest version is `copies[0]`'s and whose
    /// image is the slot: each copy given as (version, successor), `None` for an empty one.
    fn slot(copies: [Option<(u64, u64)>; 4]) -> (TableInfo, Item<Word>) {
        // 64 value bytes: two lines per copy, so that a copy can be torn.
        let spec = TableSpec::new(T, "t", 64, 16)
            .with_meta_words(1)
            .with_copies(4);
        let plan = Plan::new(&[spec], &PoolShape::default()).unwrap();
        let t = plan.table(T).unwrap().clone();
        let (codec, b) = (t.codec(), t.copy_bytes());
        let mut image = vec![0u8; t.record_bytes as usize];
        for (c, copy) in copies.iter().enumerate() {
            let Some((version, next)) = *copy else {
                continue;
            };
            let h = RecordHeader {
                lock: next,
                version,
                key: 1,
                table: T,
                valid: true,
                restores: 0,
            };
            codec.encode(&h, &[version as u8; 64], &mut image[c * b..(c + 1) * b]);
        }
        let it = Item {
            table: T,
            key: 1,
            rw: false,
            offset: Some(0),
            node: 0,
            exists: true,
            version: copies[0].expect("a newest version").0,
            restores: 0,
            locked: false,
            shared: false,
            share_word: 0,
            cold: false,
            value: vec![0; 64],
            image,
            seen: None,
            new: NewValue::Keep,
            chain_lock: None,
            in_log: false,
            install: None,
            meta: 0,
            meta1: 0,
            ext: Word::default(),
        };
        (t, it)
    }

    #[test]
    fn an_older_read_follows_the_chain_of_successors() {
        // Committed: 5, 10, 30, 50 (copy 0). The copies in slot order, not version order.
        let (t, it) = slot([Some((50, 0)), Some((10, 30)), Some((30, 50)), Some((5, 10))]);
        assert_eq!(older_copy(&t, &it, 40), Some((2, 30)));
        assert_eq!(older_copy(&t, &it, 30), Some((1, 10)));
        assert_eq!(older_copy(&t, &it, 6), Some((3, 5)));
        // Older than every version kept: no slot.
        assert_eq!(older_copy(&t, &it, 5), None);
    }

    /// A copy whose successor never committed (displaced by a commit that was rolled back,
    /// seen before the roll-back restored it) is off the chain, though its `wts` is the
    /// largest below the reader: 10's successor 45 was rolled back, then 30 and 50 committed,
    /// and this READ took copy 1 before 50's commit wrote `(30, 50)` there. Taking the copy
    /// with the largest `wts` below 40 (RCC's rule) would read 10, below the committed 30.
    #[test]
    fn a_copy_off_the_chain_is_never_read() {
        let (t, it) = slot([Some((50, 0)), Some((10, 45)), Some((5, 10)), None]);
        assert_eq!(older_copy(&t, &it, 40), None);
        // Another key's copy (a slot reused) is off the chain too.
        let (t, mut it) = slot([Some((50, 0)), Some((30, 50)), None, None]);
        assert_eq!(older_copy(&t, &it, 40), Some((1, 30)));
        it.key = 2;
        assert_eq!(older_copy(&t, &it, 40), None);
        // A torn copy (caught mid-write, or left torn by a crash) is no link either.
        let (t, mut it) = slot([Some((50, 0)), Some((30, 50)), None, None]);
        let b = t.copy_bytes();
        assert_eq!(b, 128);
        it.image[b + 64..b + 72].copy_from_slice(&31u64.to_le_bytes());
        assert_eq!(older_copy(&t, &it, 40), None);
    }
}
