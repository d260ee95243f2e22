//! The transaction API: begin, read, read_for_update, update, delete, commit, rollback.

use crate::abort::{Abort, AbortReason};
use crate::config::Protocol;
use crate::coord::{Coordinator, TxnOutcome};
use crate::protocols::{ford, motor};
use dtxn_check::history;
use dtxn_fabric::{NodeId, Stats};
use dtxn_store::TableInfo;

/// Declared up front, as the papers' coordinators do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxKind {
    ReadOnly,
    ReadWrite,
}

/// One record the transaction touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub table: u32,
    pub key: u64,
    /// Read for update: the item is locked (read-write set) rather than validated (read set).
    pub for_update: bool,
}

impl Access {
    pub fn read(table: u32, key: u64) -> Access {
        Access {
            table,
            key,
            for_update: false,
        }
    }

    pub fn update(table: u32, key: u64) -> Access {
        Access {
            table,
            key,
            for_update: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NewValue {
    Keep,
    Update,
    Delete,
    /// A new record in a free slot of the key's chain (whose insert lock we hold).
    Insert,
}

/// A record in the transaction's read or read-write set.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub table: u32,
    pub key: u64,
    pub rw: bool,
    /// The record's slot (same offset on every replica), once known.
    pub offset: Option<u64>,
    /// The replica it was read from (validated against the same one).
    pub node: NodeId,
    pub exists: bool,
    /// Version observed at execution.
    pub version: u64,
    /// We hold its lock on the primary.
    pub locked: bool,
    /// Read through its bucket without a lock: locked (and version-checked) at validation.
    pub cold: bool,
    /// The value as read, then as the transaction wants it.
    pub value: Vec<u8>,
    /// The record's bytes as read: the undo image.
    pub image: Vec<u8>,
    pub new: NewValue,
    /// Inserts: the chain's insert lock we hold, as (node, address).
    pub chain_lock: Option<(NodeId, u64)>,
    /// Its old image is in the undo log already.
    pub in_log: bool,
    /// Inserts: the version the new record gets (above the slot's old stamps and the key's
    /// tombstone, so that neither ever repeats).
    pub install: Option<u64>,
    /// Multi-version protocols: the record's versions as read.
    pub mv: Option<Box<motor::MvState>>,
}

impl Item {
    /// The version a commit of this item installs.
    pub fn new_version(&self) -> u64 {
        self.install.unwrap_or(self.version + 1)
    }
}

/// Below this many items a linear scan finds an item faster than a hash probe.
const INDEX_MIN_ITEMS: usize = 16;
/// Value and image buffers (and Motor's item states) a coordinator keeps for its next
/// transactions.
pub(crate) const SPARE_BUFFERS: usize = 4096;

/// A coordinator's spare value and image buffers: handed back by finished transactions (and
/// by inserts that swap an item's buffer), taken by the next ones, so that items do not
/// allocate once the buffers have grown.
#[derive(Debug, Default)]
pub(crate) struct BufferPool(Vec<Vec<u8>>);

impl BufferPool {
    /// A zeroed buffer of `len` bytes with room for `room`.
    pub(crate) fn take(&mut self, len: usize, room: usize) -> Vec<u8> {
        let mut b = self.0.pop().unwrap_or_default();
        if b.capacity() < room {
            // A fresh allocation rather than a reallocation that would copy the old bytes.
            b = Vec::with_capacity(room);
        }
        b.clear();
        b.resize(len, 0);
        b
    }

    /// A buffer holding a copy of `bytes`.
    pub(crate) fn take_copy(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.take(0, bytes.len());
        b.extend_from_slice(bytes);
        b
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Keeps `b` for later (up to [`SPARE_BUFFERS`] of them).
    pub(crate) fn give(&mut self, b: Vec<u8>) {
        if b.capacity() > 0 && self.0.len() < SPARE_BUFFERS {
            self.0.push(b);
        }
    }
}

/// The transaction's items by (table, key): open addressing over item positions + 1 (0 is
/// empty), so that finding an item costs O(1) however many the transaction holds (a TPC-C
/// StockLevel holds about 400). Items are only ever appended; `items[..indexed]` are in the
/// table and the rest (pushed without [`Txn::push_item`]) are scanned linearly, so the index is
/// never wrong, only slower, when it lags.
#[derive(Debug, Default)]
pub(crate) struct ItemIndex {
    slots: Vec<u32>,
    indexed: usize,
}

impl ItemIndex {
    fn home(table: u32, key: u64, mask: usize) -> usize {
        let h = (key ^ (u64::from(table) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as usize & mask
    }

    fn find(&self, items: &[Item], table: u32, key: u64) -> Option<usize> {
        let is = |i: &Item| i.table == table && i.key == key;
        if self.slots.is_empty() {
            return items.iter().position(is);
        }
        let mask = self.slots.len() - 1;
        let mut s = Self::home(table, key, mask);
        loop {
            match self.slots[s] {
                0 => break,
                p if is(&items[p as usize - 1]) => return Some(p as usize - 1),
                _ => s = (s + 1) & mask,
            }
        }
        let tail = self.indexed.min(items.len());
        items[tail..].iter().position(is).map(|p| p + tail)
    }

    /// Indexes the items appended since the last call.
    fn sync(&mut self, items: &[Item]) {
        if items.len() < INDEX_MIN_ITEMS || self.indexed == items.len() {
            return;
        }
        if self.slots.len() < 2 * items.len() {
            // Rebuild at a quarter full.
            let n = (4 * items.len()).next_power_of_two();
            self.slots.clear();
            self.slots.resize(n, 0);
            self.indexed = 0;
        }
        let mask = self.slots.len() - 1;
        for (p, it) in items.iter().enumerate().skip(self.indexed) {
            let mut s = Self::home(it.table, it.key, mask);
            while self.slots[s] != 0 {
                s = (s + 1) & mask;
            }
            self.slots[s] = p as u32 + 1;
        }
        self.indexed = items.len();
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.indexed = 0;
    }
}

/// A transaction in progress. Reads return the value the transaction sees (its own writes
/// included); nothing uncommitted of another transaction is ever visible.
pub struct Txn<'c> {
    pub(crate) c: &'c mut Coordinator,
    pub(crate) id: u64,
    pub(crate) kind: TxKind,
    pub(crate) items: Vec<Item>,
    pub(crate) index: ItemIndex,
    pub(crate) start_ns: u64,
    pub(crate) stats_at_start: Stats,
    /// Items in the undo-log entry written so far.
    pub(crate) logged: usize,
    /// The undo-log entry's body so far (items are appended as they are locked), its running
    /// crc, and the memory nodes that hold it.
    pub(crate) log_body: Vec<u8>,
    pub(crate) log_crc: crc32fast::Hasher,
    pub(crate) log_nodes: Vec<NodeId>,
    /// Versions installed, once the commit WRITEs have been posted (for the history).
    pub(crate) installed: bool,
    pub(crate) finished: bool,
    /// Multi-version protocols: the start timestamp (0 until taken).
    pub(crate) ts_start: u64,
    /// Round trips spent on the timestamp oracle.
    pub(crate) oracle_round_trips: u64,
    /// A failed commit left versions that recovery must settle: keep the locks.
    pub(crate) keep_locks: bool,
    /// Locks taken on slots that turned out to be the wrong ones, to give back once the
    /// round's results are read (Motor).
    pub(crate) give_back: Vec<(NodeId, u64)>,
    /// Motor with a local oracle: the coordinators committing when our timestamp was taken.
    pub(crate) suspects: Vec<u64>,
}

impl<'c> Txn<'c> {
    pub(crate) fn new(c: &'c mut Coordinator, id: u64, kind: TxKind) -> Txn<'c> {
        let mut log_body = std::mem::take(&mut c.log_buf);
        log_body.clear();
        let mut log_nodes = std::mem::take(&mut c.log_nodes_buf);
        log_nodes.clear();
        let mut items = std::mem::take(&mut c.items_buf);
        items.clear();
        let mut index = std::mem::take(&mut c.index_buf);
        index.clear();
        let mut suspects = std::mem::take(&mut c.motor.suspects);
        suspects.clear();
        Txn {
            log_body,
            log_crc: crc32fast::Hasher::new(),
            log_nodes,
            start_ns: c.ep.now_ns(),
            stats_at_start: c.ep.stats(),
            c,
            id,
            kind,
            items,
            index,
            logged: 0,
            installed: false,
            finished: false,
            ts_start: 0,
            oracle_round_trips: 0,
            keep_locks: false,
            give_back: Vec::new(),
            suspects,
        }
    }

    fn multi_version(&self) -> bool {
        self.c.cfg.protocol == Protocol::Motor
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The coordinator's endpoint: its clock, RNG and sleep (e.g. think time inside a
    /// transaction, or a scripted interleaving in a test). Ops posted on it directly are
    /// outside the transaction.
    pub fn endpoint(&mut self) -> &mut dtxn_fabric::Endpoint {
        &mut self.c.ep
    }

    pub(crate) fn find(&self, table: u32, key: u64) -> Option<usize> {
        self.index.find(&self.items, table, key)
    }

    /// Appends an item (its (table, key) not yet among the items) and returns its position.
    pub(crate) fn push_item(&mut self, it: Item) -> usize {
        debug_assert!(self.find(it.table, it.key).is_none());
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
            locked: false,
            cold: false,
            value,
            image,
            new: NewValue::Keep,
            chain_lock: None,
            install: None,
            in_log: false,
            mv: None,
        })
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

    /// Reads `key` of `table` as a read-only item: `None` if it does not exist.
    pub async fn read(&mut self, table: u32, key: u64) -> Result<Option<&[u8]>, Abort> {
        self.fetch(&[Access::read(table, key)]).await?;
        Ok(self.get(table, key))
    }

    /// Reads `key` of `table` for update (locks it): `None` if it does not exist.
    pub async fn read_for_update(&mut self, table: u32, key: u64) -> Result<Option<&[u8]>, Abort> {
        self.fetch(&[Access::update(table, key)]).await?;
        Ok(self.get(table, key))
    }

    /// Fetches several records in one round trip (per protocol phase); read their values with
    /// [`get`](Self::get).
    pub async fn fetch(&mut self, accesses: &[Access]) -> Result<(), Abort> {
        assert!(!self.finished, "the transaction is over");
        let r = if self.multi_version() {
            motor::execute(self, accesses).await
        } else {
            ford::execute(self, accesses).await
        };
        if let Err(a) = r {
            self.abort_with(a).await;
            return Err(a);
        }
        Ok(())
    }

    /// The value of a fetched record as this transaction sees it (`None`: absent or deleted).
    pub fn get(&self, table: u32, key: u64) -> Option<&[u8]> {
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

    /// Replaces the value of a record read for update.
    pub async fn update(&mut self, table: u32, key: u64, value: &[u8]) -> Result<(), Abort> {
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

    /// Deletes a record read for update.
    pub async fn delete(&mut self, table: u32, key: u64) -> Result<(), Abort> {
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

    /// Inserts a new record. Aborts with `Exists` if the key is present.
    pub async fn insert(&mut self, table: u32, key: u64, value: &[u8]) -> Result<(), Abort> {
        self.insert_many(&[(table, key, value)]).await
    }

    /// Inserts several new records, `(table, key, value)`, in one round trip where their
    /// chains have no overflow buckets (rather than one each): the same as inserting them one
    /// by one, in order. Aborts with `Exists` if a key is present (or given twice).
    pub async fn insert_many(&mut self, rows: &[(u32, u64, &[u8])]) -> Result<(), Abort> {
        assert!(!self.finished, "the transaction is over");
        let r = if self.multi_version() {
            motor::insert_many(self, rows).await
        } else {
            ford::insert(self, rows).await
        };
        if let Err(a) = r {
            self.abort_with(a).await;
            return Err(a);
        }
        Ok(())
    }

    /// Validates and commits. `Ok` means durable on every replica and serialized.
    pub async fn commit(mut self) -> Result<(), Abort> {
        assert!(!self.finished, "the transaction is over");
        let r = if self.multi_version() {
            motor::commit(&mut self).await
        } else {
            ford::commit(&mut self).await
        };
        match r {
            Ok(()) => self.finish(Ok(())),
            Err(a) => self.abort_with(a).await,
        }
        r
    }

    /// The application's own rollback: releases everything, changes nothing.
    pub async fn rollback(mut self) {
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
        let c = &mut *self.c;
        for it in self.items.drain(..) {
            c.spare.give(it.value);
            c.spare.give(it.image);
            if let Some(st) = it.mv {
                c.motor.give_state(st);
            }
        }
        c.items_buf = std::mem::take(&mut self.items);
        c.index_buf = std::mem::take(&mut self.index);
        c.log_buf = std::mem::take(&mut self.log_body);
        c.log_nodes_buf = std::mem::take(&mut self.log_nodes);
        c.motor.suspects = std::mem::take(&mut self.suspects);
    }

    pub(crate) async fn abort_with(&mut self, a: Abort) {
        if self.finished {
            return;
        }
        if self.multi_version() {
            motor::release_on_abort(self).await;
        } else {
            ford::release_on_abort(self).await;
        }
        self.finish(Err(a));
    }

    fn finish(&mut self, result: Result<(), Abort>) {
        self.finished = true;
        let end_ns = self.c.ep.now_ns();
        match result {
            Ok(()) => self.c.stats.committed += 1,
            Err(a) => self.c.stats.count_abort(a.reason),
        }
        self.c.last = Some(TxnOutcome {
            result,
            fabric: self.c.ep.stats() - self.stats_at_start,
            oracle_round_trips: self.oracle_round_trips,
            start_ns: self.start_ns,
            end_ns,
        });
        if self.c.recorder.is_some() {
            let h = self.history(result.is_ok(), end_ns);
            if let Some(r) = &mut self.c.recorder {
                r.record(&h);
            }
        }
        self.recycle();
    }

    /// This transaction as the history checker sees it: the version of every item it read,
    /// and the version of every item it installed.
    fn history(&self, committed: bool, end_ns: u64) -> history::Txn {
        let reads = self
            .items
            .iter()
            .map(|i| history::Read {
                table: i.table,
                key: i.key,
                // For an absent key, the tombstone's version (0 if it never existed).
                version: i.version,
            })
            .collect();
        let writes = if committed || self.installed {
            self.items
                .iter()
                .filter(|i| i.new != NewValue::Keep)
                .map(|i| history::Write {
                    table: i.table,
                    key: i.key,
                    version: i.new_version(),
                    deleted: i.new == NewValue::Delete,
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

// A `Txn` dropped without `commit` or `rollback` keeps its locks: that is a bug of the caller
// (or a crashed compute node, whose coordinators are dropped mid-flight: what recovery is for).
