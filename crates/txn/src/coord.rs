//! A coordinator: one coroutine's state across transactions.

use crate::abort::{Abort, AbortReason};
use crate::config::TxnConfig;
use crate::item::BufferPool;
use crate::mechanisms::rpc::Via;
use crate::mechanisms::{self, undo::UndoLog};
use crate::registry::Slots;
use crate::stage::{Stage, Stages};
use crate::txn::{TxKind, Txn};
use crate::vcache::Vcache;
use dtxn_check::history;
use dtxn_fabric::{Endpoint, Stats};
use dtxn_store::{AddrCache, PoolMap};
use std::rc::Rc;
use std::sync::Arc;

/// Receives the history of every transaction (committed and aborted), for `dtxn check`.
pub trait Recorder {
    fn record(&mut self, txn: &history::Txn);
}

/// Counters of one coordinator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoordStats {
    pub committed: u64,
    /// Aborts by reason (indexed like [`AbortReason::ALL`]).
    pub aborted: [u64; AbortReason::ALL.len()],
}

impl CoordStats {
    pub fn aborts(&self) -> u64 {
        self.aborted.iter().sum()
    }

    pub fn count_abort(&mut self, r: AbortReason) {
        let i = AbortReason::ALL
            .iter()
            .position(|&x| x == r)
            .expect("listed");
        self.aborted[i] += 1;
    }
}

/// What a finished transaction cost, for the bench driver's per-type breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnOutcome {
    pub result: Result<(), Abort>,
    /// Verbs, bytes and critical-path round trips of this attempt.
    pub fabric: Stats,
    /// Of those round trips, the ones spent on the timestamp oracle (multi-version protocols;
    /// the papers leave them out of their counts).
    pub oracle_round_trips: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One coroutine's coordinator: runs one transaction at a time against the pool.
pub struct Coordinator {
    core: Core,
    pub stats: CoordStats,
    /// The protocol's own state, kept across transactions.
    slots: Slots,
    next_seq: u64,
}

/// What every protocol's transactions use of their coordinator.
pub(crate) struct Core {
    pub ep: Endpoint,
    pub map: Rc<PoolMap>,
    pub cfg: Rc<TxnConfig>,
    pub cache: AddrCache,
    /// Non-zero lock-owner id, below 2^16 (`mechanisms::OWNER_MASK`).
    pub owner: u64,
    /// Transaction attempts begun, this one included.
    pub attempts: u64,
    /// This attempt's own lock word ([`mechanisms::attempt_word`]): what its chain locks hold.
    pub attempt_word: u64,
    /// What the current transaction's exclusive locks put in a lock word: `attempt_word`,
    /// unless the protocol's `begin` puts its own bits above the owner id (WAIT_DIE's and
    /// MVCC's timestamps) or the owner id alone (Scythe's OCC, whose words order against
    /// TOCC's timestamps as the oldest).
    pub lock_word: u64,
    /// This coordinator's log slice (the same on every memory node).
    pub log_slice: Option<(u64, u64)>,
    /// Its lock journals, when on.
    pub journal: Option<mechanisms::journal::Journal>,
    /// Buffers handed back by finished transactions, for the next ones.
    pub spare: BufferPool,
    pub undo_spare: UndoLog,
    /// The stages that run as RPCs (the others one-sided).
    pub rpc: Stages,
    /// The shared mechanisms' vectors, reused across rounds and transactions.
    pub mech: mechanisms::Scratch,
    pub recorder: Option<Box<dyn Recorder>>,
    pub last: Option<TxnOutcome>,
    /// FORD's localized validation: the compute process's shared version cache.
    pub vcache: Option<Arc<Vcache>>,
    /// The compute node's start clock (multi-version protocols).
    pub start_clock: Option<Arc<crate::StartClock>>,
    /// The compute process's own timestamp oracle.
    pub local_oracle: Option<Arc<crate::LocalOracle>>,
    /// The compute node's TSO group (Scythe's batched oracle).
    pub tso_group: Option<Arc<crate::TsoGroup>>,
    /// Measure each transaction's time per phase.
    pub breakdown: bool,
    /// The last finished transaction's time per phase (kept apart from [`TxnOutcome`], which
    /// is copied per transaction and stays small).
    pub last_breakdown: crate::Breakdown,
    /// Memory-node failover is on: a memory node found down is failed for good (the
    /// membership service changes the view without it), never restarted into this view.
    pub failover: bool,
    /// The current transaction retries the one before it, which aborted ([`Coordinator::
    /// retry_next`]): WAIT_DIE keeps that one's age.
    pub retry: bool,
    /// [`Coordinator::retry_next`] was called: the next `begin` is a retry.
    pub retry_next: bool,
}

impl Core {
    /// How a stage's verbs travel in this run.
    #[inline]
    pub(crate) fn via(&self, s: Stage) -> Via {
        Via::rpc(self.rpc.has(s))
    }
}

impl Coordinator {
    pub fn new(ep: Endpoint, map: Rc<PoolMap>, cfg: Rc<TxnConfig>) -> Coordinator {
        let index = ep.id().index;
        let rpc = cfg.protocol.rpc_stages(&cfg);
        let journal = mechanisms::journal::at(&map, index)
            .filter(|_| cfg.lock_journal && cfg.protocol.journaled() && !rpc.has(Stage::Release))
            .map(|at| mechanisms::journal::Journal::new(at, usize::from(map.node_count())));
        let log_slice = map.log_slice(index).map(|s| match journal {
            Some(_) => mechanisms::journal::log_room(s),
            None => s,
        });
        Coordinator {
            slots: Slots::new(cfg.protocol),
            core: Core {
                cache: AddrCache::new(cfg.addr_cache_entries),
                owner: u64::from(index) + 1,
                attempts: 0,
                attempt_word: u64::from(index) + 1,
                lock_word: u64::from(index) + 1,
                log_slice,
                journal,
                spare: Default::default(),
                undo_spare: Default::default(),
                mech: Default::default(),
                rpc,
                ep,
                map,
                cfg,
                recorder: None,
                last: None,
                vcache: None,
                start_clock: None,
                local_oracle: None,
                tso_group: None,
                breakdown: false,
                last_breakdown: Default::default(),
                failover: false,
                retry: false,
                retry_next: false,
            },
            stats: CoordStats::default(),
            next_seq: 0,
        }
    }

    /// Takes Motor's timestamps from the compute process's own counter instead of the pool's
    /// oracle word: only for a process that holds the pool alone (`attach(ep, true)`), or
    /// timestamps of two processes would collide. `false` (and nothing set) if the oracle was
    /// made for fewer coordinators than this one's index.
    pub fn set_local_oracle(&mut self, o: Arc<crate::LocalOracle>) -> bool {
        if !o.tracks(self.core.owner) {
            return false;
        }
        self.core.local_oracle = Some(o);
        true
    }

    /// Takes timestamps through the compute node's TSO group (Scythe with
    /// `scythe.batched_tso`: one FAA per batch of concurrent requests, see
    /// [`crate::TsoGroup`]); every coordinator of a compute node shares one. Not for Motor,
    /// whose snapshots need timestamps in real-time order.
    pub fn set_tso_group(&mut self, g: Arc<crate::TsoGroup>) {
        self.core.tso_group = Some(g);
    }

    /// Shares the compute node's start clock (Motor: start timestamps without a round trip,
    /// see [`crate::StartClock`]); used when `motor.start_clock_ns` is not 0.
    pub fn set_start_clock(&mut self, c: Arc<crate::StartClock>) {
        self.core.start_clock = Some(c);
    }

    /// Turns on FORD's localized validation with the compute process's Vcache. Every writer of
    /// the pool must use this same Vcache (see [`Vcache`]).
    pub fn set_vcache(&mut self, v: Arc<Vcache>) {
        self.core.vcache = Some(v);
    }

    /// Starts the address cache warm: a miss is looked up in `warm`, every record's address
    /// as loaded (see [`dtxn_store::WarmAddrs`]). Nothing changes without an address cache
    /// (`addr_cache_entries = 0`).
    pub fn set_warm_addresses(&mut self, warm: Arc<dtxn_store::WarmAddrs>) {
        self.core.cache.set_warm(warm);
    }

    /// Measures each transaction's time per phase ([`Coordinator::last_breakdown`]): two
    /// clock reads per phase, so off unless asked.
    pub fn set_breakdown(&mut self, on: bool) {
        self.core.breakdown = on;
    }

    /// Memory-node failover is on (`membership::Service` runs beside this coordinator): a
    /// memory node found down is failed for good. Motor then finishes a commit whose install
    /// failed on one on the live replicas (it has no undo log to roll back by); MVCC's
    /// timestamps carry the view's number (`mechanisms::timestamp::view_clock`).
    pub fn set_failover(&mut self, on: bool) {
        self.core.failover = on;
    }

    pub fn set_recorder(&mut self, r: Box<dyn Recorder>) {
        self.core.recorder = Some(r);
    }

    pub fn endpoint(&mut self) -> &mut Endpoint {
        &mut self.core.ep
    }

    pub fn map(&self) -> &PoolMap {
        &self.core.map
    }

    /// Works in another view of the pool from the next transaction on (memory-node
    /// failover: `membership::Service::tick` says when). Records stay at the same offsets on
    /// every replica, so the address cache stays true.
    pub fn set_map(&mut self, map: Rc<PoolMap>) {
        self.core.map = map;
    }

    pub fn config(&self) -> &TxnConfig {
        &self.core.cfg
    }

    /// The last finished transaction's time per phase (zeros unless
    /// [`Coordinator::set_breakdown`] turned the measuring on).
    pub fn last_breakdown(&self) -> &crate::Breakdown {
        &self.core.last_breakdown
    }

    /// The id of the transaction begun last (what its log entry and its history record
    /// carry), if any: the one in flight, when this coordinator stopped in one. A recovery
    /// that rolls forward another id settled an earlier, acknowledged transaction whose log
    /// entry's close was cut off.
    pub fn last_begun(&self) -> Option<u64> {
        (self.next_seq > 0).then_some((self.core.owner << 40) | (self.next_seq & ((1 << 40) - 1)))
    }

    /// The outcome of the last finished transaction.
    pub fn last_outcome(&self) -> Option<TxnOutcome> {
        self.core.last
    }

    /// Value and image buffers kept for the next transactions (for tests: an aborted
    /// transaction gives its buffers back as a committed one does).
    #[doc(hidden)]
    pub fn spare_buffers(&self) -> usize {
        self.core.spare.len()
    }

    /// The coordinator leaves for good: it runs no more transactions. Call it when a run is
    /// over for this coordinator (CALVIN's epochs wait for every coordinator that has not
    /// left; the other protocols do nothing).
    pub async fn retire(&mut self) {
        self.slots.retire(&mut self.core).await;
    }

    /// The next [`Coordinator::begin`] retries the transaction that just aborted (the same
    /// one, as `dtxn bench --retry`'s clients do), not a new one. WAIT_DIE then keeps the
    /// aborted attempt's age (its timestamp plus one tick of the clock, 1 us, so that the
    /// retry's lock words differ from the attempt's): a transaction that dies ages until it is
    /// the oldest, and the oldest waits for every exclusive holder instead of dying (with a new
    /// timestamp at each attempt it could die on them for ever). The other protocols take no
    /// notice.
    pub fn retry_next(&mut self) {
        self.core.retry_next = true;
    }

    /// Starts a transaction. Finish it with [`Txn::commit`] or [`Txn::rollback`]; a read that
    /// aborts has already released everything, and the transaction is then just dropped.
    pub fn begin(&mut self, kind: TxKind) -> Txn<'_> {
        self.next_seq += 1;
        self.core.retry = std::mem::take(&mut self.core.retry_next);
        let id = self.last_begun().expect("one begun");
        if let Some(j) = &mut self.core.journal {
            j.begin();
        }
        self.slots.begin(&mut self.core, &mut self.stats, id, kind)
    }
}
