//! RCC's two-phase-locking protocols (Wang et al., "RCC", section 3.1 and 3.2 of the RCC
//! digest): NO_WAIT (`--protocol nowait`) and WAIT_DIE (`--protocol waitdie`), one module,
//! since they differ only in what a conflict does (`WAIT`).
//!
//! Phases, with their verbs and critical-path round trips (addresses cached):
//!
//! 1. **Fetch + lock** (1 RT per batch of reads). Every item is locked before it is read, on
//!    its primary, with CAS + READ(record) in one doorbell batch (G6): read-write items
//!    exclusively (CAS 0 -> our lock word), read-only items with a **read share** (CAS n ->
//!    n + 1 on a word counting shares, `SHARED`; the published code locks reads exclusively,
//!    which makes every two readers of a record conflict). A word holding more shares than
//!    guessed is CASed again from what it holds. A cold item (address not cached) walks its
//!    chain first, then is locked and read in the next round. Then the undo log goes to every
//!    replica in the background, as FORD's does.
//!    - **NO_WAIT**: any conflict aborts at once.
//!    - **WAIT_DIE**: each transaction takes a timestamp from its coordinator's clock at
//!      begin (RCC's layout: clock high, coordinator id low) and puts it in every lock word
//!      it holds exclusively. On a conflict with an exclusive holder, an older requester waits
//!      (yields to its thread's other coroutines, backs off, tries again), a younger one dies.
//!      A writer meeting read shares dies: a share count does not say whose shares they are,
//!      and waiting on an unknown reader could close a cycle of waits. A retried transaction
//!      (`Coordinator::retry_next`, `dtxn bench --retry`) keeps its age (its timestamp one
//!      tick above the attempt before's), so it ages: once the oldest, it waits for every
//!      exclusive holder instead of dying.
//! 2. **Lock** (only for inserts): the free slots of inserted keys, CAS + READ(header).
//! 3. **Validate** (only for absent keys): 2PL locks records, not the gaps between them, so a
//!    read of an absent key is validated as FORD validates it (its chain re-read). Under
//!    leases, every read share is checked to be still good (no verb: the coordinator's clock).
//! 4. **Commit** (1 RT): every replica of every written record in one batch, after the undo
//!    log's completion (FORD's coalescent commit; RCC logs to the backups and then updates,
//!    2 RTs: the undo log written during execution takes the log off the critical path).
//! 5. **Release** (detached): exclusive locks WRITE 0, read shares FAA(-1) then CAS(a word of
//!    no shares -> 0); the log entry closed.
//!
//! So a read-write transaction costs 2 RTs and a read-only one 1, one-sided or as RPCs: each
//! stage follows RCC's hybrid code (`--set rcc.hybrid=CODE`, [`crate::HybridCode`]). As RPCs,
//! a read share is one SHARE request (the memory node adds the share if no one holds the word
//! exclusively: no guessing), a release one UNSHARE. Read shares always go the lock stage's
//! way, since their atomics must (G11); exclusive unlocks go the release stage's.
//!
//! A crashed coordinator's exclusive locks are freed by recovery. Its read shares cannot be (a
//! count does not say whose they are): where coordinators hold leases, a share is itself a
//! lease ([`share`]: the word says until when its shares are good; after that they are
//! void and the word free), so a transaction checks at validation that it may still rely on
//! every share, and a share given back too late is left to expire instead.

use crate::abort::Abort;
use crate::abort::AbortReason;
use crate::config::TxnConfig;
use crate::item::Access;
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::{install, Install};
use crate::mechanisms::{abort, absent, fetch, insert, lock, release, share, timestamp, undo};
use crate::protocol::{Protocol, Row};
use crate::stage::{Stage, Stages};
use crate::tx::Tx;
use dtxn_store::log::LogStatus;
use dtxn_store::RecordFormat;

/// NO_WAIT (`WAIT` false) and WAIT_DIE (`WAIT` true).
pub(crate) struct TwoPl<const WAIT: bool>;

impl<const WAIT: bool> Protocol for TwoPl<WAIT> {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const OPTIONS: Option<&'static str> = Some("rcc");
    /// Every exclusive lock goes through the shared fetch, lock and insert mechanisms, which
    /// journal it; read shares need no journal (they expire).
    const JOURNALED: bool = true;
    const RPC_FORMS: Stages = Stages::of(&Stage::COMMON);
    type Item = ();
    type Txn = ();
    /// WAIT_DIE: the coordinator's last timestamp.
    type Scratch = u64;

    fn rpc(cfg: &TxnConfig) -> Stages {
        cfg.rcc.hybrid.rpc_stages().and(Self::RPC_FORMS)
    }

    /// WAIT_DIE: a fresh timestamp (a retry keeps its age), in the lock word of every lock the
    /// transaction takes.
    fn begin(tx: &mut Tx<'_, Self>) {
        if WAIT {
            // A retry keeps its age (wait-die's own rule; the RCC paper does not say): it
            // grows older than every transaction begun since, so it waits for holders it died
            // on before. Its timestamp is the attempt before's plus one tick of the clock (1
            // us), as if no time had passed, so that its lock words differ from that attempt's:
            // their releases may still be in flight, and a lock batch that fails gives back
            // every word still holding ours (CAS ours -> 0), which must not free one of them.
            let now = match tx.c.retry && *tx.s != 0 {
                true => 0,
                false => tx.c.ep.now_ns(),
            };
            *tx.s = timestamp::local_clock(now, *tx.s, tx.c.owner);
            tx.c.lock_word = *tx.s;
        }
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        fetch::records(tx, accesses, Locking::TwoPhase { wait: WAIT }).await?;
        undo::log_undo(tx).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        insert::insert(tx, rows).await
    }

    /// The inserts' free slots: every other read-write item was locked as it was read.
    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        lock::lock_cold(tx).await
    }

    /// Absent keys validated; then, where shares expire (leases held), every share still one
    /// we may rely on: the transaction holds all its locks and shares at once here, its
    /// serialization point ([`share`]).
    async fn validate(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        absent::validate_absent(tx).await?;
        let terms = share::Terms::of(&tx.c.ep);
        if terms.is_some() {
            if let Some(it) = tx
                .items
                .iter()
                .find(|it| it.shared && !share::usable(it.share_word, terms))
            {
                return Err(abort(AbortReason::Validation, it));
            }
        }
        Ok(())
    }

    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        install(tx, Install::Coalescent).await
    }

    fn release(tx: &mut Tx<'_, Self>) {
        release::release(tx, LogStatus::Committed);
    }

    async fn abort(tx: &mut Tx<'_, Self>) {
        release::release_on_abort(tx).await;
    }
}
