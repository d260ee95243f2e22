//! What a transaction holds of each record it touches: its items, found by (table, key), and
//! the spare buffers they are made of.

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

/// A record in the transaction's read or read-write set: the fields the shared mechanisms
/// keep (locking, stamped reads, the undo log, inserts), and `ext`, what the protocol keeps
/// of it besides ([`crate::protocol::Protocol::Item`]).
#[derive(Debug, Clone)]
pub(crate) struct Item<X> {
    pub table: u32,
    pub key: u64,
    pub rw: bool,
    /// The record's slot (same offset on every replica), once known.
    pub offset: Option<u64>,
    /// The replica it was read from (validated against the same one).
    pub node: dtxn_fabric::NodeId,
    pub exists: bool,
    /// Version observed at execution.
    pub version: u64,
    /// The record's roll-back count as read with that version (`dtxn_store::record`): a
    /// commit installs it again, so that its stamps differ from those of an install rolled
    /// back at the version it replaces.
    pub restores: u8,
    /// We hold its lock on the primary.
    pub locked: bool,
    /// We hold a read share of its lock on the primary (2PL).
    pub shared: bool,
    /// The lock word right after our share was taken: its expiry is our share's
    /// ([`crate::mechanisms::share`]).
    pub share_word: u64,
    /// Read through its bucket without a lock: locked (and version-checked) at commit.
    pub cold: bool,
    /// The value as read, then as the transaction wants it.
    pub value: Vec<u8>,
    /// The record's bytes as read: the undo image.
    pub image: Vec<u8>,
    /// The hash of the value as the application was given it (`history::value_hash`, or
    /// `history::ABSENT`), taken after each fetch while a history is recorded.
    pub seen: Option<u64>,
    pub new: NewValue,
    /// Inserts: the chain's insert lock we hold, as (node, address).
    pub chain_lock: Option<(dtxn_fabric::NodeId, u64)>,
    /// Its old image is in the undo log already.
    pub in_log: bool,
    /// The version a commit installs, when it is not `version + 1` (an insert's: above the
    /// slot's old stamps and the key's tombstone, so that neither ever repeats; a
    /// multi-version commit's: its commit timestamp).
    pub install: Option<u64>,
    /// Metadata word 0 (a protocol's with [`crate::protocol::Protocol::META_WORDS`]): as
    /// read with the record, or for a key read absent (or inserted) its home bucket's word at
    /// [`dtxn_store::index::CHAIN_META_OFF`]; then, before the install, what the commit writes
    /// into the new record's word 0.
    pub meta: u64,
    /// Metadata word 1, as read with the record (Scythe's takeout lock's UPPER, read with
    /// its GRANT in word 0: the queue the record had).
    pub meta1: u64,
    /// The protocol's own state of this item.
    pub ext: X,
}

impl<X> Item<X> {
    /// The version a commit of this item installs.
    pub fn new_version(&self) -> u64 {
        self.install.unwrap_or(self.version + 1)
    }

    /// Whether the transaction's commit writes it.
    pub fn written(&self) -> bool {
        self.new != NewValue::Keep
    }
}

/// Below this many items a linear scan finds an item faster than a hash probe.
const INDEX_MIN_ITEMS: usize = 16;
/// Value and image buffers (and protocols' item states) a coordinator keeps for its next
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
/// table and the rest (pushed without [`crate::tx::Tx::push_item`]) are scanned linearly, so
/// the index is never wrong, only slower, when it lags.
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

    pub(crate) fn find<X>(&self, items: &[Item<X>], table: u32, key: u64) -> Option<usize> {
        let is = |i: &Item<X>| i.table == table && i.key == key;
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
    pub(crate) fn sync<X>(&mut self, items: &[Item<X>]) {
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

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.indexed = 0;
    }
}
