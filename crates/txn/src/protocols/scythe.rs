//! Scythe (Lu et al., TACO'24; the Scythe digest): hot-aware concurrency control. A transaction
//! runs OCC; an attempt that meets a hot record (a takeout-lock queue longer than the cold
//! watermark, 3) aborts, and its retries run **TOCC**, timestamp-ordered and waiting in FIFO
//! ticket queues (`--protocol scythe`; switches `--set scythe.KEY=VALUE`).
//!
//! Record layout: single-version, DrTM+H's header lock word (CAS-only, the one lock every
//! writer and every TOCC reader takes), and the takeout lock in metadata words 0 and 1
//! ([`crate::mechanisms::takeout`]: GRANT written only by the memory node's CPU, UPPER only by
//! NICs' FAAs). The takeout queue orders TOCC transactions into the header lock; mutual
//! exclusion is the header lock's, so a queue that went wrong could cost liveness, never
//! serializability. Commits write a primary's record around the two words (`LIVE_META`):
//! tickets are granted and released while the record is held.
//!
//! **OCC** (every transaction's first attempt): DrTM+H's phases, as `protocols/drtmh.rs`:
//!
//! 1. **Fetch** (1 RT per batch): READ(record), no lock; line 0 brings the takeout words with
//!    the version (one atomic line, G3). A queue above the cold watermark aborts the attempt
//!    at once (the paper's early abort) and makes the retries TOCC.
//! 2. **Lock + validate** (1 RT): CAS + READ(header) of the read-write items, READ(header) of
//!    the read-only ones (version unchanged, header unlocked: a TOCC reader holds the header).
//! 3. **Commit** (2 RTs): the backups (read-only items validated again), then the primaries.
//! 4. **Release** (detached): header locks WRITE 0.
//!
//! **TOCC** (the retries of an attempt that met a hot record):
//!
//! 0. **Timestamp** (1 RT, the oracle's FAA; a fresh one per attempt, so a transaction
//!    rejected for timestamp order is not rejected again for the same reason).
//! 1. **Tickets** (1 RT): a `TICKET(ts, hot watermark)` RPC per accessed record whose address
//!    is cached, read-only ones included (TOCC reads are exclusive, held to the end), packed
//!    per memory node; rejected (a larger timestamp already granted, or more than 10 queued):
//!    abort. Then **wait** for those with tickets ahead: sleep about `ahead x SRTT`, READ the
//!    UPPER words, again until served (0 RTs when the queues were empty).
//! 2. **Fetch + lock** (1 RT): CAS(header, `ts|owner`) + READ(record) for every item, reads
//!    included (`Locking::Ordered`). The header may be held by an OCC committer (never waits:
//!    waited for), or by an older TOCC that reached the record without a ticket (its address
//!    was not cached): waited for; a younger holder makes us die. Every wait, in a queue or on
//!    a header, points from a larger timestamp to a smaller one: no cycle, no deadlock.
//! 3. **Validate**: none (everything read is locked), but keys read absent (FORD's chain
//!    re-read: a lock on a record does not lock the gap).
//! 4. **Commit** (1 RT): every replica, coalescent.
//! 5. **Release** (detached): header locks WRITE 0, then FAA(UPPER, 1) per ticket. An abort
//!    waits for every granted ticket's turn and releases it too: a granted ticket is a
//!    commitment the queue cannot pass (under a lease, a quarter lease at most: the tickets
//!    still waiting are owed, paid before the next attempt).
//!
//! **OCC and TOCC on one record** (digest 3.5, Fig. 17): both take the same header lock, OCC
//! for its writes at commit, TOCC for everything from its read on; OCC validation fails on a
//! header held by a TOCC reader or writer, so an OCC transaction never commits over a TOCC read
//! set, and a TOCC transaction holding a record never sees it change. Serializability is then
//! DrTM+H's OCC mixed with strict two-phase locking on the same lock words; the queues decide
//! only who gets the header next.
//!
//! Policy: the mode belongs to an attempt. A coordinator's next attempt runs TOCC after an
//! attempt that saw a queue above the cold watermark or lost an OCC conflict at commit (a
//! deviation: here OCC takes no tickets, so queues come from TOCC alone and need a first
//! TOCC attempt to form), or after a TOCC attempt that aborted (sticky for the retries); OCC
//! after a commit. The core does not tell a retry from a new
//! transaction, so "the retries" are the coordinator's next attempts until one commits.
//! Read-only transactions always run OCC.
//!
//! `scythe.occ_tickets=true` (the paper's OCC): before its lock round an OCC attempt takes a
//! timestamp and a `TICKET(ts, 3)` per written record and waits for its turns (2 more RTs); a
//! refusal for a queue above the cold watermark makes the retries TOCC.
//!
//! `scythe.takeout_lock=false` (the paper's CAS-lock ablation): TOCC takes no tickets, only
//! the header lock in timestamp order (waiting for older holders, dying for younger ones).
//!
//! **A crashed coordinator** (issue #23): the memory node's CPU journals every grant in the
//! requester's grant journal (the tail of its log slice), and recovery releases the dead
//! one's tickets from it, each at its turn (`Protocol::release_held`, [`takeout::release_dead`]);
//! a live wait for a turn ends after a quarter lease (the coordinator serves recovery between
//! attempts), leaving the tickets not yet served **owed**, paid before the next attempt goes
//! on. Recovery's roll-back writes around the takeout words (`LIVE_META`).
//!
//! Limits: tickets and reads are two round trips, not the
//! paper's one RPC; RRPC is the fabric's: a batch's requests to one memory node share one
//! message (`--rpc-pack-limit 512` on sim: the paper's size rule; Scythe's are 32 B).

use crate::abort::{Abort, AbortReason};
use crate::config::{ScytheMode, TxnConfig};
use crate::coord::Core;
use crate::failover;
use crate::item::Access;
use crate::mechanisms::absent::validate_absent;
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::{install, Install};
use crate::mechanisms::lock::{cold_rw, lock_cold, lock_round, Want};
use crate::mechanisms::takeout::{self, Ticket};
use crate::mechanisms::validate::validate_reads;
use crate::mechanisms::{abort, fetch, insert, release, table, timestamp, undo};
use crate::protocol::{Protocol, Row};
use crate::stage::Stages;
use crate::tx::Tx;
use crate::txn::TxKind;
use dtxn_fabric::{Endpoint, FabricError, OpId};
use dtxn_store::log::LogStatus;
use dtxn_store::record::META_OFF;
use dtxn_store::PoolMap;
use dtxn_store::RecordFormat;

/// Scythe: `--protocol scythe`.
pub(crate) struct Scythe;

/// One attempt.
#[derive(Debug, Default)]
pub(crate) struct Attempt {
    /// This attempt runs TOCC.
    tocc: bool,
    /// Its timestamp (TOCC; 0 until taken).
    ts: u64,
    /// Its granted tickets, with how many were ahead when last seen, and their records.
    tickets: Vec<(Ticket, u64)>,
    keys: Vec<(u32, u64)>,
    /// Its wait for its turns ran out (its abort then waits no more before the engine's
    /// next attempt: the coordinator's recovery service may be what the queue waits for).
    waited_out: bool,
}

/// What a coordinator keeps across attempts.
#[derive(Debug, Default)]
pub(crate) struct Coord {
    /// The next attempt runs TOCC.
    next_tocc: bool,
    /// Smoothed round trip of the queue polls (ns).
    srtt: u64,
    polls: Vec<(usize, OpId)>,
    /// The ticket requests of a round: (access, GRANT address, request).
    requests: Vec<(usize, u64, OpId)>,
    /// Its grant journal (on every memory node; 0: none), once looked up.
    journal: Option<u64>,
    /// Tickets of aborted attempts whose turn had not come when their wait ended: released
    /// as it comes, before the next attempt goes on (only their holder may pass them on).
    owed: Vec<(Ticket, u64)>,
    /// A ticket round failed on a memory node down: the grants of the live nodes it reached
    /// are known to the grant journals alone, released from there before the next attempt.
    unsure: bool,
    /// The last ticket round had a ticket refused for its queue, above the cold watermark
    /// (noted as the replies are read: the waits for turns that follow post batches of
    /// their own, and the replies go with the round's).
    refused_hot: bool,
}

/// A header lock word for an OCC holder: its owner alone, the oldest there is (a TOCC
/// transaction waits for it; it never waits).
fn tocc_word(ts: u64, owner: u64) -> u64 {
    (ts << 16) | owner
}

impl Protocol for Scythe {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const META_WORDS: u8 = takeout::WORDS;
    const LIVE_META: bool = true;
    const NEEDS_HANDLERS: bool = true;
    /// Node 0 holds TOCC's timestamp oracle alone.
    const ON_NODE0: bool = true;
    // Journaled: its header locks are taken by the shared mechanisms alone (TOCC's ordered locks at
    // execution, OCC's lock round, inserts' chain locks), which journal each; its takeout
    // tickets are released from the grant journals instead.
    const JOURNALED: bool = true;
    const OPTIONS: Option<&'static str> = Some("scythe");
    const RPC_FORMS: Stages = Stages::NONE;
    type Item = ();
    type Txn = Attempt;
    type Scratch = Coord;

    fn rpc(_cfg: &TxnConfig) -> Stages {
        Stages::NONE
    }

    fn begin(tx: &mut Tx<'_, Self>) {
        let tocc = match tx.c.cfg.scythe.mode {
            ScytheMode::HotAware => tx.s.next_tocc,
            ScytheMode::Occ => false,
            ScytheMode::Tocc => true,
        };
        tx.st.tocc = tocc && tx.kind != TxKind::ReadOnly;
        tx.st.ts = 0;
        tx.st.tickets.clear();
        tx.st.keys.clear();
        tx.st.waited_out = false;
        tx.c.lock_word = tx.c.owner;
        if tx.s.journal.is_none() {
            // The journal is the slice's tail: the undo log keeps the rest.
            let index = (tx.c.owner - 1) as u32;
            let journal = takeout::journal(&tx.c.map, index);
            if let (Some(_), Some((off, len))) = (journal, tx.c.log_slice) {
                tx.c.log_slice = Some((off, len - takeout::JOURNAL_BYTES));
            }
            tx.s.journal = Some(journal.unwrap_or(0));
        }
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        settle_owed(tx, accesses).await?;
        if tx.st.tocc {
            stamp(tx).await?;
            if tx.c.cfg.scythe.takeout_lock {
                tickets(tx, accesses, takeout::HOT_WATERMARK).await?;
            }
            fetch::records(tx, accesses, Locking::Ordered).await?;
        } else {
            fetch::records(tx, accesses, Locking::Optimistic { hitchhike: false }).await?;
            too_hot(tx, accesses)?;
        }
        undo::log_undo(tx).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        insert::insert(tx, rows).await
    }

    /// OCC: DrTM+H's merged lock-and-validate round. TOCC: only inserts' free slots are left.
    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if tx.st.tocc {
            return lock_cold(tx).await;
        }
        if tx.c.cfg.scythe.occ_tickets && tx.c.cfg.scythe.takeout_lock {
            occ_tickets(tx).await?;
        }
        let r = lock_round(tx, |it| {
            if cold_rw(it) {
                Some(Want {
                    lock: true,
                    header: true,
                })
            } else {
                let read = !it.rw && it.exists && it.offset.is_some();
                read.then_some(Want {
                    lock: false,
                    header: true,
                })
            }
        })
        .await;
        lost_conflict(tx, r)
    }

    /// Absent keys; OCC also validates its reads again when it has no install to do it in
    /// (DrTM+H's).
    async fn validate(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        validate_absent(tx).await?;
        if !tx.st.tocc && !tx.writes() && tx.items.iter().any(|i| i.rw) {
            let r = validate_reads(tx).await;
            lost_conflict(tx, r)?;
        }
        Ok(())
    }

    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        if tx.st.tocc {
            return install(tx, Install::Coalescent).await;
        }
        let revalidate = !tx.c.cfg.ford.skip_revalidation;
        let r = install(tx, Install::TwoPhase { revalidate }).await;
        lost_conflict(tx, r)
    }

    /// Header locks, then the tickets (all served: each was waited for before its record was
    /// locked). The next attempt is a new transaction: OCC.
    fn release(tx: &mut Tx<'_, Self>) {
        release::release(tx, LogStatus::Committed);
        for &(t, _) in &tx.st.tickets {
            takeout::release(&mut tx.c.ep, t.node, t.at);
        }
        let _ = tx.c.ep.post_detached();
        tx.st.tickets.clear();
        tx.s.next_tocc = false;
    }

    /// Header locks, then every granted ticket, each once its turn came (a ticket the queue
    /// is still behind is waited for: only its holder may pass it on). A wait that ends (its
    /// deadline, a node down) leaves the tickets not yet served owed: released before the next
    /// attempt goes on, or by recovery if this coordinator dies first.
    async fn abort(tx: &mut Tx<'_, Self>) {
        release::release_on_abort(tx).await;
        if tx.st.tocc {
            tx.s.next_tocc = true;
        }
        if tx.st.tickets.is_empty() {
            return;
        }
        let mut tickets = std::mem::take(&mut tx.st.tickets);
        let deadline = match tx.st.waited_out {
            true => tx.c.ep.now_ns(),
            false => takeout::wait_deadline(&tx.c.ep),
        };
        let _ = pay(tx, &mut tickets, deadline).await;
        tx.s.owed.append(&mut tickets);
        tx.st.tickets = tickets;
    }

    /// Tickets still owed are waited for (without a deadline: the poll limit alone) and
    /// released before the coordinator leaves.
    async fn retire(c: &mut Core, s: &mut Self::Scratch) {
        if s.owed.is_empty() {
            return;
        }
        let mut owed = std::mem::take(&mut s.owed);
        let view = c.map.view();
        owed.retain(|(t, _)| t.alive_in(view));
        let _ =
            takeout::wait_turns(&mut c.ep, &mut owed, &mut s.srtt, &mut s.polls, u64::MAX).await;
        owed.retain(|&(t, ahead)| {
            if ahead == 0 {
                takeout::release(&mut c.ep, t.node, t.at);
            }
            ahead > 0 && ahead != takeout::PASSED
        });
        let _ = c.ep.post().await;
        s.owed = owed;
    }

    /// Recovery, after the dead coordinators' lock words are cleared: their tickets, each
    /// once its turn comes (the grant journals say which they hold).
    async fn release_held(
        ep: &mut Endpoint,
        map: &PoolMap,
        dead: &[u32],
        deadline_ns: u64,
    ) -> Result<Vec<(bool, u32)>, FabricError> {
        takeout::release_dead(ep, map, dead, deadline_ns).await
    }

    /// A live coordinator's owed tickets are in its grant journal as a dead one's are: the
    /// same release, from its own journal.
    async fn release_owed(
        ep: &mut Endpoint,
        map: &PoolMap,
        me: u32,
        deadline_ns: u64,
    ) -> Result<bool, FabricError> {
        let done = takeout::release_dead(ep, map, &[me], deadline_ns).await?;
        Ok(done.first().is_none_or(|d| d.0))
    }

    /// Failover: a promoted primary's takeout words are its backup's, which no CPU granted
    /// from and no NIC released to: commits write a backup's record whole, its GRANT word as
    /// the committer read it on the primary and its UPPER word whatever the commit's buffer
    /// held, so its queue (`lower - upper`) may read as long as anything, and a queue above
    /// the watermarks refuses every ticket and aborts every OCC attempt for good. Nothing of
    /// an older view is in flight (a ticket is the primary's: none was ever granted on a
    /// backup, and the failed node's died with it), so every promoted lock starts as an
    /// empty queue: GRANT written to `lower = upper`, `queued_ts` 0 (no ticket older than the
    /// next grant is waiting). UPPER, the NICs' count of releases, is left as it is.
    async fn repair_promoted(
        ep: &mut Endpoint,
        map: &PoolMap,
        tables: &[u32],
    ) -> Result<(), FabricError> {
        failover::each_promoted_bucket(ep, map, tables, |ep, t, _, at, bucket| {
            if t.meta_words < takeout::WORDS {
                return;
            }
            for s in 0..t.slots_per_bucket {
                let m = (t.slot(at, s) - at) as usize + META_OFF;
                let word = |i: usize| {
                    let w = &bucket[m + 8 * i..m + 8 * i + 8];
                    u64::from_le_bytes(w.try_into().expect("word"))
                };
                let (grant, upper) = (word(0), word(1));
                let empty = takeout::grant_word(0, upper as u16);
                if takeout::queue(grant, upper) != 0 {
                    ep.write(t.primary(), at + m as u64, &empty.to_le_bytes());
                }
            }
        })
        .await
    }
}

/// Waits for `tickets`' turns until `deadline_ns` and releases those served; leaves the others
/// in `tickets`. Whether the wait ended on a memory node that did not answer.
async fn pay(tx: &mut Tx<'_, Scythe>, tickets: &mut Vec<(Ticket, u64)>, deadline_ns: u64) -> bool {
    // A ticket on a memory node that failed since its grant died with its queue: nobody
    // waits behind it, and its turn never comes. (Judged by failed alone, a ticket on a
    // node back from a failure, joining or rejoined, was waited for on a queue that is not
    // its own until every deadline: its coordinator aborted each attempt from then on.)
    let view = tx.c.map.view();
    tickets.retain(|(t, _)| t.alive_in(view));
    let mut polls = std::mem::take(&mut tx.s.polls);
    let r = takeout::wait_turns(
        &mut tx.c.ep,
        tickets,
        &mut tx.s.srtt,
        &mut polls,
        deadline_ns,
    )
    .await;
    tx.s.polls = polls;
    let ep = &mut tx.c.ep;
    let before = tickets.len();
    tickets.retain(|&(t, ahead)| {
        if ahead == 0 {
            takeout::release(ep, t.node, t.at);
        }
        ahead > 0 && ahead != takeout::PASSED
    });
    if tickets.len() < before {
        let _ = ep.post_detached();
    }
    r == Err(takeout::WaitEnd::Unreachable)
}

/// Before an attempt goes on: the tickets earlier attempts still owe, released as their turn
/// comes; if some still wait at the deadline, the attempt aborts (its coordinator serves
/// recovery between attempts: the queue ahead may wait for a dead coordinator's ticket).
async fn settle_owed(tx: &mut Tx<'_, Scythe>, accesses: &[Access]) -> Result<(), Abort> {
    if tx.s.unsure {
        // Every ticket this coordinator holds is owed now (between attempts; its releases
        // posted before on each node's QP execute before these READs): its journals name
        // them all, the ones granted by a round whose replies were lost included. Those
        // released here, still in `owed`, read as passed on.
        let map = tx.c.map.clone();
        let index = (tx.c.owner - 1) as u32;
        let deadline = takeout::wait_deadline(&tx.c.ep);
        let a = accesses.first().copied().unwrap_or(Access::read(0, 0));
        let abort = |reason| Abort {
            reason,
            table: a.table,
            key: a.key,
        };
        match takeout::release_dead(&mut tx.c.ep, &map, &[index], deadline).await {
            Ok(done) if done.first().is_none_or(|d| d.0) => tx.s.unsure = false,
            Ok(_) => return Err(abort(AbortReason::LockConflict)),
            Err(_) => return Err(abort(AbortReason::ReplicaFailure)),
        }
    }
    if tx.s.owed.is_empty() {
        return Ok(());
    }
    let mut owed = std::mem::take(&mut tx.s.owed);
    let deadline = takeout::wait_deadline(&tx.c.ep);
    let down = pay(tx, &mut owed, deadline).await;
    let left = owed.is_empty();
    tx.s.owed = owed;
    if left {
        return Ok(());
    }
    let a = accesses.first().copied().unwrap_or(Access::read(0, 0));
    // A node that did not answer: said so, so that the coordinator probes the memory nodes
    // (a lock conflict would have it retry against a dead node until a periodic scan).
    Err(Abort {
        reason: match down {
            true => AbortReason::ReplicaFailure,
            false => AbortReason::LockConflict,
        },
        table: a.table,
        key: a.key,
    })
}

/// The ticket requests' replies: each granted ticket recorded (so that it is released, even
/// if another was rejected); the first failure, if any.
fn on_replies(
    tx: &mut Tx<'_, Scythe>,
    map: &PoolMap,
    accesses: &[Access],
    requests: &[(usize, u64, OpId)],
    posted: bool,
) -> Option<Abort> {
    let mut failed = None;
    for &(j, at, id) in requests {
        let a = accesses[j];
        let bad = |reason| Abort {
            reason,
            table: a.table,
            key: a.key,
        };
        if !posted {
            return Some(bad(AbortReason::ReplicaFailure));
        }
        match takeout::reply(&tx.c.ep, id) {
            // No free journal slot: on without a ticket (as an uncached record).
            Some(r) if r.full => {}
            Some(r) if r.granted => {
                let ticket = Ticket {
                    node: table(map, a.table).primary(),
                    at,
                    ticket: r.ticket(),
                    full: r.full_ticket(),
                    view: map.view(),
                };
                tx.st.tickets.push((ticket, r.queue()));
                tx.st.keys.push((a.table, a.key));
            }
            Some(r) => {
                tx.s.refused_hot |= r.queue() > takeout::COLD_WATERMARK;
                failed.get_or_insert(bad(AbortReason::LockConflict));
            }
            None => {
                failed.get_or_insert(bad(AbortReason::ReplicaFailure));
            }
        }
    }
    failed
}

/// OCC: an attempt that lost a conflict (a lock held, a read overwritten) has met a record
/// hot enough: its retries run TOCC. Queues form only from TOCC's tickets here (OCC takes
/// none: its commit locks are DrTM+H's CAS), so without this signal a queue above the cold
/// watermark could never appear in the first place. (The paper's OCC queues its commit locks
/// in the takeout lock too, and switches on the queue alone.)
fn lost_conflict(tx: &mut Tx<'_, Scythe>, r: Result<(), Abort>) -> Result<(), Abort> {
    if let Err(a) = r {
        if matches!(
            a.reason,
            AbortReason::LockConflict | AbortReason::Validation
        ) {
            tx.s.next_tocc = true;
        }
    }
    r
}

/// TOCC: the attempt's timestamp, once, from the oracle; it orders the attempt in the queues
/// and in the header locks it holds.
async fn stamp(tx: &mut Tx<'_, Scythe>) -> Result<(), Abort> {
    if tx.st.ts != 0 {
        return Ok(());
    }
    let failed = Abort {
        reason: AbortReason::ReplicaFailure,
        table: 0,
        key: 0,
    };
    let ts = timestamp::next(tx).await.map_err(|()| failed)?;
    // The header word keeps 45 bits of it (below the flags), GRANT 48.
    if ts >= 1 << 45 {
        return Err(failed);
    }
    tx.st.ts = ts;
    tx.c.lock_word = tocc_word(ts, tx.c.owner);
    Ok(())
}

/// OCC with `scythe.occ_tickets` (the paper's OCC): before its commit locks, a ticket for
/// every record it writes, refused above the cold watermark, and its turn waited for. A
/// refusal for the queue (above 3: the record is hot) makes the retries TOCC. The timestamp
/// orders the tickets only (R1 keeps every wait pointing to an older ticket); the header
/// lock word stays OCC's (its owner alone: TOCC waits for an OCC committer, which, its turns
/// come, never waits).
async fn occ_tickets(tx: &mut Tx<'_, Scythe>) -> Result<(), Abort> {
    let writes: Vec<Access> = tx
        .items
        .iter()
        .filter(|it| it.rw && it.exists)
        .map(|it| Access::update(it.table, it.key))
        .collect();
    if writes.is_empty() {
        return Ok(());
    }
    let word = tx.c.lock_word;
    let r = stamp(tx).await;
    tx.c.lock_word = word;
    r?;
    tx.s.refused_hot = false;
    let r = tickets(tx, &writes, takeout::COLD_WATERMARK).await;
    if r.is_err() && tx.s.refused_hot {
        tx.s.next_tocc = true;
    }
    r
}

/// OCC: an attempt that read a record with a queue above the cold watermark aborts now (its
/// validation would meet the queue's holder) and its retries run TOCC.
fn too_hot(tx: &mut Tx<'_, Scythe>, accesses: &[Access]) -> Result<(), Abort> {
    for a in accesses {
        let Some(i) = tx.find(a.table, a.key) else {
            continue;
        };
        let it = &tx.items[i];
        let q = takeout::queue(it.meta, it.meta1);
        if it.exists && q > takeout::COLD_WATERMARK && tx.kind != TxKind::ReadOnly {
            tx.s.next_tocc = true;
            return Err(abort(AbortReason::LockConflict, it));
        }
    }
    Ok(())
}

/// TOCC: a ticket for every accessed record whose address is cached and that holds none of
/// ours yet, in one round; then the wait for their turns. A rejection aborts (after every
/// reply is looked at, so that each granted ticket is recorded and released).
async fn tickets(tx: &mut Tx<'_, Scythe>, accesses: &[Access], limit: u64) -> Result<(), Abort> {
    let map = tx.c.map.clone();
    let ts = tx.st.ts;
    let mut requests = std::mem::take(&mut tx.s.requests);
    requests.clear();
    for (j, a) in accesses.iter().enumerate() {
        // One ticket per record and attempt: a second would wait behind the first, which
        // only this attempt can release (TPC-C's NewOrder may order one item twice).
        let asked = accesses[..j]
            .iter()
            .any(|b| (b.table, b.key) == (a.table, a.key));
        if asked || tx.st.keys.contains(&(a.table, a.key)) {
            continue;
        }
        let Ok(t) = map.table(a.table) else { continue };
        if t.meta_words < takeout::WORDS {
            continue;
        }
        let Some(off) = tx.c.cache.get(a.table, a.key) else {
            continue;
        };
        let at = off + META_OFF as u64;
        let journal = tx.s.journal.unwrap_or(0);
        let id = takeout::request(&mut tx.c.ep, t.primary(), at, ts, limit, journal);
        requests.push((j, at, id));
    }
    if requests.is_empty() {
        tx.s.requests = requests;
        return Ok(());
    }
    let posted = tx.c.ep.post().await.is_ok();
    tx.s.unsure |= !posted;
    tx.s.refused_hot = false;
    let failed = on_replies(tx, &map, accesses, &requests, posted);
    tx.s.requests = requests;
    if let Some(a) = failed {
        return Err(a);
    }
    let mut tickets = std::mem::take(&mut tx.st.tickets);
    let mut polls = std::mem::take(&mut tx.s.polls);
    if tx.s.srtt == 0 {
        tx.s.srtt = 3_000;
    }
    let deadline = takeout::wait_deadline(&tx.c.ep);
    let r = takeout::wait_turns(
        &mut tx.c.ep,
        &mut tickets,
        &mut tx.s.srtt,
        &mut polls,
        deadline,
    )
    .await;
    tx.st.tickets = tickets;
    tx.s.polls = polls;
    tx.st.waited_out = r.is_err();
    r.map_err(|end| {
        let a = accesses[0];
        Abort {
            reason: match end {
                takeout::WaitEnd::Unreachable => AbortReason::ReplicaFailure,
                takeout::WaitEnd::TimedOut => AbortReason::LockConflict,
            },
            table: a.table,
            key: a.key,
        }
    })
}
