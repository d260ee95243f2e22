//! Motor (Zhang et al., OSDI'24): multi-versioning with consecutive version tuples (CVT),
//! serializable or snapshot isolation, on the store's multi-version tables
//! ([`dtxn_store::cvt`]).
//!
//! Phases, with their verbs and critical-path round trips (addresses cached):
//!
//! 0. **Start timestamp** (1 RT): FAA on the oracle word. The paper leaves the timestamp
//!    service out of its round-trip counts; dtxn counts it, separately
//!    ([`crate::TxnOutcome::oracle_round_trips`]).
//! 1. **Execute** (1 RT per batch of reads, 2 when a version must be rebuilt or the address
//!    was not cached). Read-write items: CAS(lock) + READ(CVT) + READ(Vpkg) on the primary in
//!    one doorbell batch: the CAS executes before the READs (G6), so both are read under the
//!    lock, and the newest version is the one a writer builds on (Motor reads the Vpkg a round
//!    trip later). First-committer-wins: the newest version must be at most the start
//!    timestamp, under either isolation. Read-only items: READ(CVT) + READ(Vpkg) together;
//!    the version a snapshot at the start timestamp sees is selected from the CVT, and when it
//!    is not the Vpkg's version it is rebuilt from the Vpkg and the pre-images of every newer
//!    version, read in a second round trip. Serializable read-write transactions abort early
//!    when any item has a version newer than their start. A CVT locked by another coordinator
//!    is read again (its writer may hold a commit timestamp below our start and not have
//!    installed yet: the snapshot race of the digest's section 5.3).
//! 2. **Mark** (1 RT, read-write transactions that write): every written record's lock word
//!    gets the COMMITTING bit, before the commit timestamp exists.
//! 3. **Commit timestamp** (1 RT): FAA, after every lock is held and marked.
//! 4. **Validate** (serializable, 1 RT if any item was read without our lock): READ each
//!    such item's CVT: not being committed, and the version a snapshot at the commit
//!    timestamp sees is still the one read.
//! 5. **Commit** (1 RT): to every replica in one batch, in this order on each memory node
//!    (G4): the **op log** (the new records and pre-images, in the coordinator's log slice, for
//!    a recovery agent to finish the commit), then per written record its pre-image chunk and
//!    its whole CVT (the new Vcell and value, versions dropped by garbage collection). No undo
//!    log: old versions are the undo.
//! 6. **Release** (detached): lock words to 0, after every replica is written.
//!
//! Read-only transactions take a start timestamp and execute: no validation, no locks.
//!
//! Inserts of a key without a CVT lock the key's chain (CAS + READ of the home bucket), claim
//! a free slot (CAS on its lock word + READ), and install a CVT created at the commit
//! timestamp. A reader that finds no CVT for a key treats a claimed (locked, empty) slot in its
//! chain as a possible insert of that key: it reads again (snapshot) or fails validation.
//! A delete installs a tombstone version; an insert over a tombstone reuses the key's CVT.
//!
//! Where dtxn differs from the published Motor, and why:
//! - Stamps instead of one-byte anchors (see [`dtxn_store::cvt`]): anchors are the sync
//!   paper's broken bookend scheme when a READ's lines are fetched out of order.
//! - Locks are released after every replica is written, not with the primary's commit WRITE,
//!   so that "unlocked" always means "installed everywhere".
//! - Snapshot readers wait out locked CVTs, and read-write items obey first-committer-wins
//!   under snapshot isolation too (digest, section 5.3).
//!
//! Module map: `execute.rs` (phase 1 and the CVT reads validation shares), `insert.rs`
//! (inserts' slot choice), `commit.rs` (phases 2 to 6).

mod chain;
mod commit;
mod execute;
mod insert;
mod recover;

use crate::abort::{Abort, AbortReason};
use crate::config::Isolation;
use crate::item::{Access, SPARE_BUFFERS};
use crate::mechanisms::{abort, timestamp};
use crate::protocol::{Protocol, Row};
use crate::recovery::Recovered;
use crate::tx::Tx;
use commit::Install;
use dtxn_fabric::{Endpoint, FabricError, NodeId, OpId};
use dtxn_store::cvt::{Cvt, MvCodec};
use dtxn_store::log::LogEntry;
use dtxn_store::PoolMap;
use dtxn_store::{RecordFormat, TableInfo};
use execute::Stage;

/// Motor: `--protocol motor`, its switches under `motor.*` ([`crate::MotorOptions`]).
pub(crate) struct Motor;

/// What Motor keeps of a transaction.
#[derive(Debug, Default)]
pub(crate) struct MotorTxn {
    /// The start timestamp (0 until taken).
    pub ts_start: u64,
    /// With a local oracle: the coordinators committing when our timestamp was taken.
    pub suspects: crate::clock::Suspects,
    /// A failed install left versions that recovery must settle: keep the locks.
    pub keep_locks: bool,
    /// With a local oracle: our committing bit is set.
    pub committing: bool,
    /// Locks taken on slots that turned out to be the wrong ones, to give back once the
    /// round's results are read.
    pub give_back: Vec<(NodeId, u64)>,
    /// The op log entry being built.
    pub log: Vec<u8>,
    /// The commit timestamp, once taken.
    pub tc: u64,
}

impl Protocol for Motor {
    const RECORDS: RecordFormat = RecordFormat::Cvt;
    const OPTIONS: Option<&'static str> = Some("motor");
    /// Node 0 holds the timestamp oracle alone.
    const ON_NODE0: bool = true;
    // Every lock CAS (execution's hitchhiked CVT locks, the chains' insert locks, the commit's
    // claims of free slots) is journaled before it, in its batch.
    const JOURNALED: bool = true;
    type Item = Option<Box<MvState>>;
    type Txn = MotorTxn;
    type Scratch = Scratch;

    fn begin(tx: &mut Tx<'_, Self>) {
        let st = &mut tx.st;
        st.ts_start = 0;
        st.suspects.clear();
        st.keep_locks = false;
        st.committing = false;
        st.give_back.clear();
        st.tc = 0;
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        execute::execute(tx, accesses).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        insert::insert_many(tx, rows).await
    }

    /// Phase 2: mark every written record committing (and claim inserts' slots; with
    /// `motor.lock_at_commit`, lock the written records read unlocked), before the commit
    /// timestamp exists. With a local oracle the mark is our bit in it instead.
    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            // Read-only (or nothing written): the snapshot at the start timestamp is the
            // serialization point; locks of read-for-update items just go.
            return Ok(());
        }
        let local = tx.c.local_oracle.clone();
        if let Some(o) = &local {
            o.set_committing(tx.c.owner, true);
            tx.st.committing = true;
        }
        commit::mark_committing(tx, local.is_none()).await
    }

    /// Phases 3 and 4: the commit timestamp, then (serializable) validation at it.
    async fn validate(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        let first = tx.items.iter().find(|i| i.written()).expect("a write");
        let fail = abort(AbortReason::ReplicaFailure, first);
        tx.st.tc = timestamp::next(tx).await.map_err(|()| fail)?;
        copy_committing(tx);
        if tx.c.cfg.motor.isolation == Isolation::Serializable {
            commit::validate(tx, tx.st.tc).await?;
        }
        Ok(())
    }

    // The op log needs no phase of its own: it goes in the install's batch, ahead of the new
    // records on each memory node's QP (G4).

    /// Phase 5: the op log and the new CVTs, to every replica in one round trip.
    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        let r = commit::install(tx, tx.st.tc).await;
        clear_committing(tx);
        r
    }

    /// Phase 6: unlock, after every replica is written.
    fn release(tx: &mut Tx<'_, Self>) {
        commit::release(tx);
    }

    async fn abort(tx: &mut Tx<'_, Self>) {
        clear_committing(tx);
        commit::release(tx);
    }

    async fn settle(
        ep: &mut Endpoint,
        map: &PoolMap,
        owner: u64,
        e: &LogEntry,
    ) -> Result<Recovered, FabricError> {
        recover::redo_motor(ep, map, owner, e).await
    }

    fn recycle(s: &mut Scratch, x: Option<Box<MvState>>) {
        if let Some(st) = x {
            s.give_state(st);
        }
    }
}

/// With a local oracle: our records are installed everywhere, or never will be, so no reader
/// need wait for us. (After a failed install the locks stay, and so does the bit: some
/// records may be new.)
fn clear_committing(tx: &mut Tx<'_, Motor>) {
    if tx.st.committing && !tx.st.keep_locks {
        if let Some(o) = &tx.c.local_oracle {
            o.set_committing(tx.c.owner, false);
        }
        tx.st.committing = false;
    }
}

/// Bit 62 of a lock word: its holder is committing. Set on every record a transaction writes
/// (and every slot it claims) before it takes its commit timestamp, so an unmarked lock seen
/// after a reader took its start timestamp belongs to a writer that will commit above it.
pub(crate) const COMMITTING: u64 = 1 << 62;

/// What Motor keeps of an item between phases.
#[derive(Debug, Clone, Default)]
pub(crate) struct MvState {
    /// The CVT as read (under our lock, for read-write items).
    pub(crate) cvt: Cvt,
    /// The Vcell of the version read, if it has a value.
    pub(crate) v0: Option<usize>,
    /// The newest value as read: what older versions are rebuilt from, and (read under our
    /// lock) the old value whose pre-images a commit keeps.
    pub(crate) base: Vec<u8>,
}

/// Vectors and item states Motor's phases reuse across rounds and transactions (one set per
/// coordinator), so that a transaction's hot path allocates nothing once they have grown. As
/// with FORD's scratch, a phase takes a vector with `mem::take` and puts it back when it
/// finishes; an abort may just drop it.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Execution and validation rounds: (item, stage).
    pub(crate) work: Vec<(usize, Stage)>,
    pub(crate) next: Vec<(usize, Stage)>,
    /// Execution and validation rounds: the ops posted; each item's span of them.
    pub(crate) ids: Vec<OpId>,
    pub(crate) spans: Vec<(usize, usize)>,
    /// Items' states, handed back by finished transactions, taken by CVT reads. Boxed as the
    /// items hold them: a state changes hands without being boxed again.
    #[allow(clippy::vec_box)]
    pub(crate) states: Vec<Box<MvState>>,
    /// Commit: what each written record gets, pointing into `bytes` (its CVT and chunk).
    pub(crate) installs: Vec<Install>,
    pub(crate) bytes: Vec<u8>,
    /// Commit: the memory nodes that get the op log.
    pub(crate) nodes: Vec<NodeId>,
    /// Mark round: the slots claimed, as (item, CAS, READ).
    pub(crate) claims: Vec<(usize, OpId, OpId)>,
    /// Inserts: (item, row) of every key to insert; those of keys without a CVT.
    pub(crate) todo: Vec<(usize, usize)>,
    pub(crate) fresh: Vec<usize>,
    /// Inserts' slot choice: the chain locks to take, as (item, node, address, CAS), and the
    /// chains' walks, as (item, bucket to read next, hops so far, first free slot seen).
    pub(crate) chain_cas: Vec<(usize, NodeId, u64, OpId)>,
    pub(crate) walks: Vec<(usize, u64, u64, Option<u64>)>,
    pub(crate) next_walks: Vec<(usize, u64, u64, Option<u64>)>,
}

impl Scratch {
    /// A spare state whose `base` is `len` bytes long (their content is left over).
    pub(crate) fn state(&mut self, len: usize) -> Box<MvState> {
        let mut st = self.states.pop().unwrap_or_default();
        st.base.resize(len, 0);
        st
    }

    /// Keeps `st` for a later CVT read (up to [`SPARE_BUFFERS`] states).
    pub(crate) fn give_state(&mut self, st: Box<MvState>) {
        if self.states.len() < SPARE_BUFFERS {
            self.states.push(st);
        }
    }
}

pub(crate) fn codec(t: &TableInfo) -> MvCodec {
    MvCodec::new(t).expect("motor runs on multi-version tables (checked at fetch)")
}

/// The start timestamp: the compute node's start clock while it is fresh (see
/// [`crate::StartClock`]), else the oracle.
pub(crate) async fn start(tx: &mut Tx<'_, Motor>) -> Result<(), ()> {
    if tx.st.ts_start != 0 {
        return Ok(());
    }
    tx.st.ts_start = match timestamp::cached_start(tx, tx.c.cfg.motor.start_clock_ns) {
        Some(ts) => ts,
        None => timestamp::next(tx).await?,
    };
    copy_committing(tx);
    Ok(())
}

/// With a local oracle: which coordinators are committing, copied right after a timestamp
/// was taken (see [`crate::LocalOracle`]).
pub(crate) fn copy_committing(tx: &mut Tx<'_, Motor>) {
    if let Some(o) = &tx.c.local_oracle {
        o.committing(&mut tx.st.suspects);
    }
}

/// Whether a lock word belongs to a writer that may be committing below our timestamp: its
/// mark in the pool, or (local oracle) its bit when we took the timestamp.
pub(crate) fn committing(tx: &Tx<'_, Motor>, lock: u64) -> bool {
    lock & COMMITTING != 0
        || (lock != 0 && tx.c.local_oracle.is_some() && tx.st.suspects.holds(lock))
}

/// With a local oracle: whether the lock's holder was committing when we took our timestamp
/// and has ended that commit since; then it is no longer waited on (see
/// [`crate::LocalOracle`]).
pub(crate) fn ended(tx: &mut Tx<'_, Motor>, lock: u64) -> bool {
    match &tx.c.local_oracle {
        Some(o) if lock & COMMITTING == 0 => o.forget_ended(&mut tx.st.suspects, lock),
        _ => false,
    }
}
