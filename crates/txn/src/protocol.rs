//! What a protocol is to the transaction core: one implementation of [`Protocol`], its phases
//! called by the core in the order every protocol here shares, and its own per-item,
//! per-transaction and per-coordinator state as associated types. The registry
//! (`registry.rs`) names each protocol once.
//!
//! The core drives a transaction as: [`Protocol::begin`], then any number of
//! [`Protocol::fetch`] and [`Protocol::insert`] calls (the application's reads and writes,
//! between which its logic runs), then at commit [`Protocol::lock`], [`Protocol::validate`],
//! [`Protocol::log`] and [`Protocol::install`], and [`Protocol::release`] once committed. An
//! abort anywhere (an `Err` from a phase, or the application's rollback) calls
//! [`Protocol::abort`] instead, which must give back everything the transaction holds. A
//! protocol that merges phases (DrTM+H locks and validates in one round; Motor writes its
//! op log in the install's batch) leaves the merged ones empty and says so where it merges.
//!
//! Phases post their verbs through the shared mechanisms (`crate::mechanisms`), so that
//! locking, stamped reads, validation, logs, installs and inserts exist once.

use crate::abort::Abort;
use crate::config::TxnConfig;
use crate::coord::Core;
use crate::item::{Access, Item, ItemIndex};
use crate::recovery::Recovered;
use crate::stage::Stages;
use crate::tx::Tx;
use dtxn_fabric::{Endpoint, FabricError};
use dtxn_store::log::LogEntry;
use dtxn_store::PoolMap;
use dtxn_store::RecordFormat;

/// A row to insert: (table, key, value).
pub(crate) type Row<'a> = (u32, u64, &'a [u8]);

/// A concurrency-control protocol, as the transaction core sees it. Every phase may post
/// verbs and await them; an `Err` aborts the transaction (the core then calls `abort`).
pub(crate) trait Protocol: Sized + 'static {
    /// How the protocol's tables lay out their records.
    const RECORDS: RecordFormat;
    /// Extra 8-byte words per record (timestamps, leases, queue-lock words) that the store
    /// lays out beside each record's header, for the protocol's own metadata.
    const META_WORDS: u8 = 0;
    /// Copies of each record its tables keep by default (RCC's MVCC version slots: older
    /// versions beside the record; see `dtxn_store::record`). 1: the record alone.
    const COPIES: u8 = 1;
    /// Whether others change its metadata words while a transaction holds the record (Scythe's
    /// takeout lock): commits then write a primary's record around them, never over them.
    const LIVE_META: bool = false;
    /// Whether it needs the memory nodes' RPC handlers whatever its stages (Scythe's tickets).
    const NEEDS_HANDLERS: bool = false;
    /// Whether its writers **freeze** a word beside what they lock (bit 63 of a record's
    /// metadata word 0, and of a chain's word at `CHAIN_META_OFF` under its insert lock:
    /// MVCC's rts words, SUNDIAL's leases), and unfreeze it before they unlock. Recovery then
    /// unfreezes a dead holder's freeze before it frees the lock: left frozen, it would abort
    /// every reader until a writer came to take it over.
    const FREEZES: bool = false;
    /// Whether every lock word it takes goes through the shared mechanisms that journal it
    /// (`mechanisms::journal`), so that recovery may trust the journal.
    const JOURNALED: bool = false;
    /// The section of [`TxnConfig`] holding its switches (`--set KEY.switch=value`), if any.
    const OPTIONS: Option<&'static str> = None;
    /// Re-replication copies while [`Protocol::installs_held`] holds every install, a bounded
    /// slice at a time between the copier's transactions (CALVIN's, whose installs take no
    /// lock); otherwise a whole pass at once under the slots' locks.
    const COPY_IN_SLICES: bool = false;
    /// Keeps state of its own on memory node 0 alone (the timestamp oracle, CALVIN's
    /// schedule): node 0 may not fail under it, whatever copies the pool's control words
    /// have (`docs/src/control-chain.md`, increments 5 and 7).
    const ON_NODE0: bool = false;
    /// The stages that have an RPC form (served by the memory nodes' CPUs).
    const RPC_FORMS: Stages = Stages::NONE;
    /// What the protocol keeps of an item beside the mechanisms' fields of [`Item`].
    type Item: Default + std::fmt::Debug;
    /// What the protocol keeps of a transaction (kept by the coordinator across
    /// transactions, for its buffers: [`Protocol::begin`] resets it).
    type Txn: Default;
    /// Per coordinator: vectors the phases reuse across transactions, so that the hot path
    /// allocates nothing once they have grown.
    type Scratch: Default;

    /// The stages `cfg` asks to run as RPCs (a subset of [`Protocol::RPC_FORMS`], checked by
    /// [`TxnConfig::validate`]).
    fn rpc(_cfg: &TxnConfig) -> Stages {
        Stages::NONE
    }

    /// Whether the shared undo log (`mechanisms/undo.rs`) is written for it under `cfg`
    /// (CALVIN writes a redo log of its install instead where coordinators can be recovered).
    fn undo_logged(_cfg: &TxnConfig) -> bool {
        true
    }

    /// A transaction starts.
    fn begin(_tx: &mut Tx<'_, Self>) {}

    /// Execution: fetches `accesses` (new items, or items read before and now wanted for
    /// update), one round trip per batch of reads where the protocol can.
    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort>;

    /// Inserts `rows`, together where the protocol can: the same as one by one, in order.
    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort>;

    /// Commit, first phase: takes the locks not taken during execution.
    async fn lock(_tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        Ok(())
    }

    /// Commit: checks that what the transaction read still holds at its serialization point.
    async fn validate(_tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        Ok(())
    }

    /// Commit: makes the transaction recoverable before anything is written in place.
    async fn log(_tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        Ok(())
    }

    /// Commit: writes the new records to every replica. `Ok` means committed.
    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort>;

    /// Queues what must ride the shared install's first batch ahead of its WRITEs, once the
    /// undo log has landed (MVCC's and SUNDIAL's sealed chain freezes:
    /// `mechanisms::lock::seal_chain_freezes`).
    fn before_install(_tx: &mut Tx<'_, Self>) {}

    /// After a commit: unlocks and closes the log, off the critical path.
    fn release(tx: &mut Tx<'_, Self>);

    /// After an abort anywhere: gives back every lock the transaction holds.
    async fn abort(tx: &mut Tx<'_, Self>);

    /// Recovery of a crashed coordinator (lock-owner id `owner`) whose newest log entry `e` is
    /// pending: finishes or undoes its transaction, and says which. (The recovery driver then
    /// releases every lock the dead coordinator holds, whatever this decided.) By default the
    /// shared undo-log settle (`mechanisms/settle.rs`), which every single-version protocol
    /// uses; Motor rolls its op log forward instead.
    async fn settle(
        ep: &mut Endpoint,
        map: &PoolMap,
        owner: u64,
        e: &LogEntry,
    ) -> Result<Recovered, FabricError> {
        crate::mechanisms::settle::settle(ep, map, owner, e, Self::LIVE_META).await
    }

    /// Whether recovery settles a newest log entry `e` that is not pending too (CALVIN's redo
    /// log, judged by its coordinator's epoch words whatever its status). No by default:
    /// an undo log's closed entry is over.
    fn judges_closed(_e: &LogEntry) -> bool {
        false
    }

    /// Recovery of crashed coordinators (by index), once their log entries are settled and
    /// their lock words cleared: gives back what else they hold (Scythe's takeout tickets),
    /// waiting until `deadline_ns` (the endpoint's clock) at most for what it must wait for.
    /// Per dead coordinator: whether it holds nothing more (else recovery runs again later),
    /// and how many it gave back.
    async fn release_held(
        _ep: &mut Endpoint,
        _map: &PoolMap,
        dead: &[u32],
        _deadline_ns: u64,
    ) -> Result<Vec<(bool, u32)>, FabricError> {
        Ok(vec![(true, 0); dead.len()])
    }

    /// Memory-node failover: live coordinator `me`, waiting between its transactions for a new
    /// view to be active, gives back what it owes others meanwhile (Scythe's takeout tickets
    /// not served yet: a dead coordinator's may queue behind them, and the view waits for
    /// the dead to be recovered; and before a re-replication copy, which keeps it from its
    /// transactions for a long while), waiting until `deadline_ns` at most. Whether nothing
    /// is owed any more. Nothing by default; not `release_held`, which is a dead
    /// coordinator's (CALVIN's retires it from the epochs: a live one that did so would find
    /// its own epoch word taken from it).
    async fn release_owed(
        _ep: &mut Endpoint,
        _map: &PoolMap,
        _me: u32,
        _deadline_ns: u64,
    ) -> Result<bool, FabricError> {
        Ok(true)
    }

    /// Memory-node failover: what a promoted primary of `map`'s view kept alone, beside the
    /// overflow counters and invisible words every protocol's tables get repaired
    /// ([`crate::failover::repair_promoted`], once nothing of an older view is in flight and
    /// before anyone uses a promoted primary), for the promoted tables `tables` (ids, of
    /// `map`). Nothing by default.
    async fn repair_promoted(
        _ep: &mut Endpoint,
        _map: &PoolMap,
        _tables: &[u32],
    ) -> Result<(), FabricError> {
        Ok(())
    }

    /// Re-replication: whether no install can be in flight, or start, on a record while the
    /// copier (live coordinator `me`, between its transactions, of `members`) copies it
    /// without taking the record's lock. True by default: the protocols that install under
    /// a record's lock are kept off by the copy's own lock CAS. CALVIN's installs take no
    /// lock; its schedule holds them while `me` does not dispatch its next epoch.
    /// `others_settled`: every other coordinator's membership slot is settled (done for good,
    /// recovered, or never held).
    async fn installs_held(
        _ep: &mut Endpoint,
        _map: &PoolMap,
        _me: u32,
        _members: u32,
        _others_settled: bool,
    ) -> Result<bool, FabricError> {
        Ok(true)
    }

    /// The coordinator leaves for good: it will run no more transactions (CALVIN's sequencer
    /// stops holding the epochs back). Nothing for the other protocols.
    async fn retire(_c: &mut Core, _s: &mut Self::Scratch) {}

    /// A finished transaction's item state goes back to the coordinator's spares.
    fn recycle(_s: &mut Self::Scratch, _x: Self::Item) {}
}

/// What a coordinator keeps for one protocol across transactions.
pub(crate) struct Slot<P: Protocol> {
    pub scratch: P::Scratch,
    pub keep: Keep<P>,
}

impl<P: Protocol> Default for Slot<P> {
    fn default() -> Self {
        Slot {
            scratch: Default::default(),
            keep: Keep {
                items: Vec::new(),
                index: ItemIndex::default(),
                txn: Default::default(),
            },
        }
    }
}

/// The buffers a transaction takes at its start and gives back when it finishes.
pub(crate) struct Keep<P: Protocol> {
    pub items: Vec<Item<P::Item>>,
    pub index: ItemIndex,
    pub txn: P::Txn,
}
