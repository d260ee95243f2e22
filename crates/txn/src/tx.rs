//! The transaction core: one transaction of one protocol, its items, the application's
//! operations on them, and the sequence of phases a commit runs. It names no protocol: the
//! protocol is `P`, and the public [`crate::Txn`] dispatches to the one chosen at run time.

use crate::abort::{Abort, AbortReason};
use crate::breakdown::{Breakdown, Phase};
use crate::coord::{CoordStats, Core, TxnOutcome};
use crate::item::{Access, Item, ItemIndex, NewValue};
use crate::mechanisms;
use crate::mechanisms::undo::UndoLog;
use crate::protocol::{Keep, Protocol, Row, Slot};
use crate::txn::TxKind;
use dtxn_check::history;
use dtxn_fabric::{NodeId, Stats};
use dtxn_store::TableInfo;

/// A transaction in progress under protocol `P`.
pub(crate) struct Tx<'c, P: Protocol> {
    /// The coordinator: its endpoint, pool map, configuration, caches and spare buffers.
    pub c: &'c mut Core,
    /// The protocol's per-coordinator scratch.
    pub s: &'c mut P::Scratch,
    stats: &'c mut CoordStats,
    /// Where the items, their index and the protocol's state go back when it finishes.
    keep: &'c mut Keep<P>,
    pub id: u64,
    pub kind: TxKind,
    pub items: Vec<Item<P::Item>>,
    index: ItemIndex,
    /// The protocol's own state of this transaction.
    pub st: P::Txn,
    /// The undo log written so far (protocols that log undo images).
    pub undo: UndoLog,
    start_ns: u64,
    stats_at_start: Stats,
    /// Versions installed, once the commit WRITEs have been posted (for the history).
    pub installed: bool,
    finished: bool,
    /// Round trips spent on a timestamp oracle.
    pub oracle_round_trips: u64,
}

impl<'c, P: Protocol> Tx<'c, P> {
    pub(crate) fn new(
        c: &'c mut Core,
        stats: &'c mut CoordStats,
        slot: &'c mut Slot<P>,
        id: u64,
        kind: TxKind,
    ) -> Tx<'c, P> {
        let Slot { scratch, keep } = slot;
        let mut items = std::mem::take(&mut keep.items);
        items.clear();
        let mut index = std::mem::take(&mut keep.index);
        index.clear();
        let st = std::mem::take(&mut keep.txn);
        let mut undo = std::mem::take(&mut c.undo_spare);
        undo.clear();
        let mut tx = Tx {
            start_ns: c.ep.now_ns(),
            stats_at_start: c.ep.stats(),
            c,
            s: scratch,
            stats,
            keep,
            id,
            kind,
            items,
            index,
            st,
            undo,
            installed: false,
            finished: false,
            oracle_round_trips: 0,
        };
        // The phases' times accumulate in the coordinator (the transaction stays small).
        if tx.c.breakdown {
            tx.c.last_breakdown = Breakdown::default();
        }
        // The transaction's own logic, on its thread's CPU (a profile's price; free unless set).
        tx.c.ep.charge_logic(1, 0);
        tx.c.attempts += 1;
        tx.c.attempt_word = mechanisms::attempt_word(tx.c.owner, tx.c.attempts);
        tx.c.lock_word = tx.c.attempt_word;
        P::begin(&mut tx);
        tx
    }

    pub(crate) fn find(&self, table: u32, key: u64) -> Option<usize> {
        self.index.find(&self.items, table, key)
    }

    /// Appends an item (its (table, key) not yet among the items) and returns its position.
    pub(crate) fn push_item(&mut self, it: Item<P::Item>) -> usize {
        debug_assert!(self.find(it.table, it.key).is_none());
        self.c.ep.charge_logic(0, 1);
        self.items.push(it);
        self.index.sync(&self.items);
        self.items.len() - 1
    }

    /// Appends a fresh item for `key` of table `t` (not among the items yet), read from
    /// `node`, with a zeroed value; returns its position.
    pub(crate) fn push_new_item(
        &mut self,
        t: &TableInfo,
        key: u64,
        rw: bool,
        node: NodeId,
    ) -> usize {
        let value = self
            .c
            .spare
            .take(t.value_size as usize, t.value_size as usize);
        // The image will hold the whole record: room for it now spares a reallocation when
        // the record is read. A read-only item keeps no image (one is taken if it is
        // upgraded).
        let image = if rw {
            self.c.spare.take(0, t.record_bytes as usize)
        } else {
            Vec::new()
        };
        self.push_item(Item {
            table: t.id,
            key,
            rw,
            offset: None,
            node,
            exists: false,
            version: 0,
            restores: 0,
            locked: false,
            shared: false,
            share_word: 0,
            cold: false,
            value,
            image,
            seen: None,
            new: NewValue::Keep,
            chain_lock: None,
            install: None,
            in_log: false,
            meta: 0,
            meta1: 0,
            ext: Default::default(),
        })
    }

    /// Whether the transaction writes anything.
    pub(crate) fn writes(&self) -> bool {
        self.items.iter().any(|i| i.written())
    }

    /// After a commit: the slots of the records this transaction inserted go into the address
    /// cache. Such a record is read soon after by others of its kind (TPC-C's StockLevel and
    /// Delivery read the newest and oldest orders' lines): knowing its slot spares them the
    /// bucket read. A slot freed and reused later is caught by the READ that goes through it
    /// (`check_slot`), as for every cached address.
    pub(crate) fn cache_inserted_slots(&mut self) {
        for it in self.items.iter().filter(|i| i.new == NewValue::Insert) {
            if let Some(off) = it.offset {
                self.c.cache.insert(it.table, it.key, off);
            }
        }
    }

    /// The clock, if the coordinator measures phases (else 0, without reading it).
    #[inline]
    fn clock(&self) -> u64 {
        if self.c.breakdown {
            self.c.ep.now_ns()
        } else {
            0
        }
    }

    /// Charges the time since `since` (from [`Tx::clock`]) to phase `p`.
    #[inline]
    fn charge(&mut self, p: Phase, since: u64) {
        if self.c.breakdown {
            let now = self.c.ep.now_ns();
            self.c.last_breakdown.add(p, now.saturating_sub(since));
        }
    }

    pub(crate) async fn fetch(&mut self, accesses: &[Access]) -> Result<(), Abort> {
        assert!(!self.finished, "the transaction is over");
        let t = self.clock();
        let r = P::fetch(self, accesses).await;
        self.charge(Phase::Read, t);
        if let Err(a) = r {
            self.abort_with(a).await;
            return Err(a);
        }
        if self.c.recorder.is_some() {
            self.note_seen(accesses);
        }
        Ok(())
    }

    /// For the history: the hash of each fetched item's value as the application now sees
    /// it (not of one it has written already: a fetch of it again changes nothing).
    fn note_seen(&mut self, accesses: &[Access]) {
        for a in accesses {
            if let Some(i) = self.find(a.table, a.key) {
                let it = &mut self.items[i];
                if it.new == NewValue::Keep {
                    it.seen = Some(if it.exists {
                        history::value_hash(&it.value)
                    } else {
                        history::ABSENT
                    });
                }
            }
        }
    }

    pub(crate) fn get(&self, table: u32, key: u64) -> Option<&[u8]> {
        let i = &self.items[self.find(table, key)?];
        let visible = (i.exists && i.new != NewValue::Delete) || i.new == NewValue::Insert;
        visible.then_some(i.value.as_slice())
    }

    fn writable(&mut self, table: u32, key: u64) -> Result<usize, Abort> {
        let abort = |reason| Abort { reason, table, key };
        let Some(i) = self.find(table, key) else {
            return Err(abort(AbortReason::BadRequest));
        };
        if !self.items[i].rw || self.kind == TxKind::ReadOnly {
            return Err(abort(AbortReason::BadRequest));
        }
        let it = &self.items[i];
        if it.new != NewValue::Insert && (!it.exists || it.new == NewValue::Delete) {
            return Err(abort(AbortReason::Missing));
        }
        Ok(i)
    }

    pub(crate) async fn update(&mut self, table: u32, key: u64, value: &[u8]) -> Result<(), Abort> {
        let r = self.writable(table, key).and_then(|i| {
            let it = &mut self.items[i];
            if value.len() != it.value.len() {
                return Err(Abort {
                    reason: AbortReason::BadRequest,
                    table,
                    key,
                });
            }
            it.value.copy_from_slice(value);
            if it.new != NewValue::Insert {
                it.new = NewValue::Update;
            }
            Ok(())
        });
        if let Err(a) = r {
            self.abort_with(a).await;
        }
        r
    }

    pub(crate) async fn delete(&mut self, table: u32, key: u64) -> Result<(), Abort> {
        let r = self.writable(table, key).map(|i| {
            let it = &mut self.items[i];
            if it.new == NewValue::Insert {
                // Deleting our own insert: the key stays absent; give the slot up (the chain
                // lock stays held, so the absence holds until the end).
                it.new = NewValue::Keep;
                it.install = None;
                if !it.locked {
                    // A slot chosen but not locked yet is given up; a locked one (Motor's
                    // insert over a tombstone) stays known, so that its lock is released.
                    it.offset = None;
                }
                it.cold = false;
                it.in_log = false;
            } else {
                it.new = NewValue::Delete;
            }
        });
        if let Err(a) = r {
            self.abort_with(a).await;
        }
        r
    }

    pub(crate) async fn insert_many(&mut self, rows: &[Row<'_>]) -> Result<(), Abort> {
        assert!(!self.finished, "the transaction is over");
        let t = self.clock();
        let r = P::insert(self, rows).await;
        self.charge(Phase::Insert, t);
        if let Err(a) = r {
            self.abort_with(a).await;
            return Err(a);
        }
        Ok(())
    }

    /// The commit's phases, in the order every protocol shares; then the release.
    // By reference, not by value: the public `Txn::commit` owns the transaction already, and
    // moving it once more into this future cost a copy of it per commit.
    pub(crate) async fn commit(&mut self) -> Result<(), Abort> {
        assert!(!self.finished, "the transaction is over");
        let r = self.commit_phases().await;
        match r {
            Ok(()) => {
                // The outcome is known before any lock is given back, and that is when the
                // history says the transaction ended: of two writers of a key, the one that
                // ended first then installed the older version (a history without its
                // warm-up relies on it). Its latency includes the release's posting.
                let decided_ns = self.c.ep.now_ns();
                let t = self.clock();
                P::release(self);
                self.charge(Phase::Release, t);
                self.cache_inserted_slots();
                self.finish(Ok(()), decided_ns);
            }
            Err(a) => self.abort_with(a).await,
        }
        r
    }

    async fn commit_phases(&mut self) -> Result<(), Abort> {
        let t = self.clock();
        let r = P::lock(self).await;
        self.charge(Phase::Lock, t);
        r?;
        let t = self.clock();
        let r = P::validate(self).await;
        self.charge(Phase::Validate, t);
        r?;
        let t = self.clock();
        let r = P::log(self).await;
        self.charge(Phase::Log, t);
        r?;
        let t = self.clock();
        let r = P::install(self).await;
        self.charge(Phase::Commit, t);
        r
    }

    pub(crate) async fn rollback(&mut self) {
        let a = Abort {
            reason: AbortReason::User,
            table: 0,
            key: 0,
        };
        self.abort_with(a).await;
    }

    /// Hands the transaction's buffers back to its coordinator, for the next transactions,
    /// once it is over (committed or aborted: the items are of no use after either).
    /// Under contention most attempts abort in a read or an insert; each would otherwise
    /// leave the next ones to allocate afresh.
    fn recycle(&mut self) {
        for it in self.items.drain(..) {
            self.c.spare.give(it.value);
            self.c.spare.give(it.image);
            P::recycle(self.s, it.ext);
        }
        self.keep.items = std::mem::take(&mut self.items);
        self.keep.index = std::mem::take(&mut self.index);
        self.keep.txn = std::mem::take(&mut self.st);
        self.c.undo_spare = std::mem::take(&mut self.undo);
    }

    pub(crate) async fn abort_with(&mut self, a: Abort) {
        if self.finished {
            return;
        }
        let t = self.clock();
        P::abort(self).await;
        self.charge(Phase::Abort, t);
        let decided_ns = self.c.ep.now_ns();
        self.finish(Err(a), decided_ns);
    }

    /// `decided_ns`: when the outcome was known (the history's end).
    fn finish(&mut self, result: Result<(), Abort>, decided_ns: u64) {
        self.finished = true;
        // Fenced mid-transaction: whatever failed first, the outcome is recovery's to
        // decide (it may roll the commit forward), so the history leaves it to recovery.
        let fenced = result.is_err() && self.c.ep.fenced();
        let result = result.map_err(|a| {
            if fenced {
                Abort {
                    reason: AbortReason::LeaseExpired,
                    ..a
                }
            } else {
                a
            }
        });
        let end_ns = self.c.ep.now_ns();
        match result {
            Ok(()) => self.stats.committed += 1,
            Err(a) => self.stats.count_abort(a.reason),
        }
        self.c.last = Some(TxnOutcome {
            result,
            fabric: self.c.ep.stats() - self.stats_at_start,
            oracle_round_trips: self.oracle_round_trips,
            start_ns: self.start_ns,
            end_ns,
        });
        if self.c.recorder.is_some() && !fenced {
            let h = self.history(result.is_ok(), decided_ns);
            if let Some(r) = &mut self.c.recorder {
                r.record(&h);
            }
        }
        self.recycle();
    }

    /// This transaction as the history checker sees it: the version of every item it read,
    /// and the version of every item it installed, each with the hash of its value.
    fn history(&self, committed: bool, end_ns: u64) -> history::Txn {
        let reads = self
            .items
            .iter()
            .map(|i| history::Read {
                table: i.table,
                key: i.key,
                // For an absent key, the tombstone's version (0 if it never existed).
                version: i.version,
                // In a committed transaction, an item never fetched was looked up by an
                // insert, which found the key absent (else it aborted). In an aborted one it
                // may be an item whose fetch failed: unknown.
                hash: i
                    .seen
                    .or((committed && !i.exists).then_some(history::ABSENT)),
            })
            .collect();
        let writes = if committed || self.installed {
            self.items
                .iter()
                .filter(|i| i.written())
                .map(|i| history::Write {
                    table: i.table,
                    key: i.key,
                    version: i.new_version(),
                    deleted: i.new == NewValue::Delete,
                    hash: Some(if i.new == NewValue::Delete {
                        history::ABSENT
                    } else {
                        history::value_hash(&i.value)
                    }),
                })
                .collect()
        } else {
            Vec::new()
        };
        history::Txn {
            txn: self.id,
            session: u64::from(self.c.ep.id().index),
            status: if committed {
                history::Status::Committed
            } else {
                history::Status::Aborted
            },
            start: self.start_ns,
            end: end_ns,
            reads,
            writes,
        }
    }
}

// A transaction dropped without `commit` or `rollback` keeps its locks: that is a bug of the
// caller (or a crashed compute node, whose coordinators are dropped mid-flight: what recovery
// is for).
