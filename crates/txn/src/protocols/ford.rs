//! FORD (Zhang et al., FAST'22 and TOS'23): OCC on disaggregated memory, with hitchhiked
//! locking, coalescent commit, backup-enabled reads, selective remote flush and localized
//! validation. Its baselines, FaRM and DrTM+H, are built of the same mechanisms (`farm.rs`,
//! `drtmh.rs`).
//!
//! Phases, with their verbs and critical-path round trips (addresses cached):
//!
//! 1. **Execute** (1 RT per batch of reads). Read-write items: CAS(lock) + READ(record) on the
//!    primary in one doorbell batch (*hitchhiked locking*, G6); a failed CAS aborts at once
//!    (no-wait). Read-only items: READ(record) from the primary, or a backup with
//!    `backup_reads`. Cold items (address not cached) READ their bucket chain first; cold
//!    read-write items are locked at commit. Then the **undo log** (old images of the
//!    read-write set) is queued for every replica's log slice: it rides the next batch (a
//!    validation's, or the commit's), ahead of every in-place WRITE on each node's QP (G4),
//!    at no round trip of its own; with `flush` it is written and flushed in the background
//!    while the application's logic runs, and awaited before the commit.
//! 2. **Lock** (1 RT, only if some read-write item is cold): CAS(lock) + READ(header), version
//!    unchanged. Every lock before any validation READ: a read-only item checked while another
//!    transaction's lock is still to come lets two transactions each miss the other's write
//!    (write skew).
//! 3. **Validate** (1 RT, skipped when there is nothing to validate). Read-only items:
//!    READ(header) from the primary, version unchanged and not locked; absent keys still
//!    absent. Read-only transactions are validated too, even with a single item.
//! 4. **Commit** (1 RT, *coalescent*). Behind the undo log on each QP, every replica of every
//!    written record gets the new record in place in one batch, its lock word carrying the
//!    *invisible* bit (primary: our lock word | invisible; backups: our id | invisible, left
//!    for the next install to overwrite); an item locked but left unwritten is unlocked in the
//!    same batch; with `flush`, each backup is flushed after its last WRITE (*selective remote
//!    flush*). A failed replica rolls the transaction back from its old images.
//! 5. **Release** (detached, off the critical path): the primaries' lock words to 0 (unlock
//!    and make visible), the log entry to committed.
//!
//! So a read-write transaction without read-only items costs 2 RTs, with read-only items 3.
//!
//! **Localized validation** (with a [`crate::Vcache`]): read-only items whose version the
//! compute process's Vcache holds are validated locally, so validation costs no round trip on
//! a hit (read-write with read-only items: 2 RTs). See `vcache.rs` for what writers keep in it.
//!
//! Inserts lock the key's chain (the home bucket's insert lock) at execution and a free slot at
//! commit; reads of absent keys are validated by re-reading the chain (no phantoms). A deleted
//! record's slot keeps its key and version as a tombstone, reused only by an insert of the
//! same key: so a key's versions only grow, across deletes and re-inserts, and a read of an
//! absent key reports the version it observed. (The price: deleted keys keep their slots.)
//!
//! Where dtxn differs from the published FORD, and why (reference/ford.md section 9):
//! - A READ of a record is trusted only if its per-line version stamps agree (the store's
//!   torn-read detection): FORD's "invisible bit, then update in place" read in one READ is
//!   the sync paper's broken scheme S5. The invisible bit remains, for what it is right for:
//!   atomic visibility across items (a reader re-reads an invisible record, so it never sees
//!   one item of a committing transaction new and another old without validation noticing).
//! - Versions are `old + 1` under the lock: monotonic per key across any number of compute
//!   nodes, but for a roll-back, which puts the old version back one restore up, so that the
//!   next commit's stamps (at the undone install's version) differ from the undone install's.
//! - The commit writes lock word, version and data of a record in one WRITE: line 0 carries
//!   both, so no reader sees the new version without the invisible bit.

use crate::abort::Abort;
use crate::config::TxnConfig;
use crate::item::Access;
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::{install, Install};
use crate::mechanisms::{absent, fetch, insert, lock, release, undo, validate};
use crate::protocol::{Protocol, Row};
use crate::stage::{Stage, Stages};
use crate::tx::Tx;
use dtxn_store::log::LogStatus;
use dtxn_store::RecordFormat;

/// FORD: `--protocol ford`, its switches under `ford.*` ([`crate::FordOptions`]).
pub(crate) struct Ford;

impl Protocol for Ford {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const OPTIONS: Option<&'static str> = Some("ford");
    const JOURNALED: bool = true;
    const RPC_FORMS: Stages = Stages::of(&Stage::COMMON);
    type Item = ();
    type Txn = ();
    type Scratch = ();

    fn rpc(cfg: &TxnConfig) -> Stages {
        cfg.ford.rpc
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        let hitchhike = tx.c.cfg.ford.hitchhiked_locking;
        fetch::records(tx, accesses, Locking::Optimistic { hitchhike }).await?;
        undo::log_undo(tx).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        insert::insert(tx, rows).await
    }

    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        lock::lock_cold(tx).await
    }

    async fn validate(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        validate::validate_reads(tx).await?;
        absent::validate_absent(tx).await
    }

    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        let mode = if tx.c.cfg.ford.coalescent_commit {
            Install::Coalescent
        } else {
            Install::TwoPhase { revalidate: false }
        };
        install(tx, mode).await
    }

    fn release(tx: &mut Tx<'_, Self>) {
        release::release(tx, LogStatus::Committed);
    }

    async fn abort(tx: &mut Tx<'_, Self>) {
        release::release_on_abort(tx).await;
    }
}
