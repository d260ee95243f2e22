//! Reading a table with the memory node's own CPU, after a run (for `--verify`): no
//! coordinator is running then, so what the primary holds is the committed state.

use dtxn_fabric::{NodeId, Pool};
use dtxn_store::cvt::MvCodec;
use dtxn_store::record::LOCK_OFF;
use dtxn_store::TableInfo;

/// One valid record of a table, as its primary holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRecord {
    pub key: u64,
    pub version: u64,
    /// The lock word: 0 once every transaction has released it.
    pub lock: u64,
    pub value: Vec<u8>,
}

/// Every valid record of `table` on its primary, in slot order. A record whose lines disagree
/// on the version (a torn install that was never finished) is reported with `version` =
/// `u64::MAX`, so that a check can flag it.
pub fn scan_table(pool: &Pool, table: &TableInfo) -> Vec<LocalRecord> {
    scan_replica(pool, table, table.primary())
}

/// [`scan_table`] of the replica of `table` on memory node `node` (a backup, to check what
/// it holds against the primary).
pub fn scan_replica(pool: &Pool, table: &TableInfo, node: NodeId) -> Vec<LocalRecord> {
    let codec = table.codec();
    let mv = MvCodec::new(table);
    let mut out = Vec::new();
    for_each_record(pool, table, node, |_, rec| {
        if let Some(k) = &mv {
            // A multi-version record: its newest version, unless that is a delete.
            if let Some(r) = newest_version(table, k, rec) {
                out.push(r);
            }
            return;
        }
        let h = codec.header(rec);
        let mut value = vec![0u8; table.value_size as usize];
        let version = match codec.decode(rec, &mut value) {
            Ok(h) => h.version,
            Err(_) => u64::MAX,
        };
        out.push(LocalRecord {
            key: h.key,
            version,
            lock: h.lock,
            value,
        });
    });
    out
}

/// After a run under leases (no coordinator left), clears every 2PL read share word left on
/// the primaries of `tables`: void shares (a dead coordinator's, or given back too late and
/// left to expire), which count nothing a live transaction relies on
/// ([`dtxn_txn::is_read_share_word`]). Returns how many words it cleared.
pub fn clear_read_shares(pool: &Pool, tables: &[TableInfo]) -> u64 {
    let mut cleared = 0;
    for table in tables {
        let codec = table.codec();
        let mut words = Vec::new();
        for_each_record(pool, table, table.primary(), |off, rec| {
            let lock = codec.header(rec).lock;
            if dtxn_txn::is_read_share_word(lock) && lock != 0 {
                words.push((off + LOCK_OFF, lock));
            }
        });
        pool.with_local(table.primary(), |m| {
            for &(at, w) in &words {
                cleared += u64::from(m.cas(at, w, 0) == w);
            }
        });
    }
    cleared
}

/// Every valid record of `table` on its primary as (key, slot offset): what an address
/// cache that had touched every key would hold (`dtxn bench --warm-caches`).
pub fn record_offsets(pool: &Pool, table: &TableInfo) -> Vec<(u64, u64)> {
    let codec = table.codec();
    let mut out = Vec::new();
    for_each_record(pool, table, table.primary(), |off, rec| {
        out.push((codec.header(rec).key, off))
    });
    out
}

/// Calls `f(slot offset, record bytes)` for every valid slot of `table` on `node`, in slot
/// order.
fn for_each_record(pool: &Pool, table: &TableInfo, node: NodeId, mut f: impl FnMut(u64, &[u8])) {
    let codec = table.codec();
    // Overflow buckets are handed out by the primary's counter; a backup's is not kept.
    let used_overflow = if node == table.primary() {
        pool.with_local(node, |m| m.read_u64(table.overflow_counter()))
    } else {
        table.overflow_buckets
    };
    let buckets = table.bucket_count + used_overflow.min(table.overflow_buckets);
    // Buckets are read in chunks: one with_local call per bucket is slow on big tables.
    let per_chunk = ((1u64 << 20) / table.bucket_bytes).max(1);
    let mut buf = Vec::new();
    let mut first = 0;
    while first < buckets {
        let n = per_chunk.min(buckets - first);
        let start = table.table_off + 64 + first * table.bucket_bytes;
        buf.resize((n * table.bucket_bytes) as usize, 0);
        pool.with_local(node, |m| m.read(start, &mut buf));
        for b in 0..n {
            let bucket = start + b * table.bucket_bytes;
            let bytes = &buf[(b * table.bucket_bytes) as usize..][..table.bucket_bytes as usize];
            for s in 0..table.slots_per_bucket {
                let rec = table.slot_bytes(bytes, s);
                let h = codec.header(rec);
                if h.valid && h.table == table.id {
                    f(table.slot(bucket, s), rec);
                }
            }
        }
        first += n;
    }
}

/// The newest version of the multi-version record `rec` (a CVT read from slot `off`), or
/// `None` if it is a delete. A torn CVT is reported with `version` = `u64::MAX`.
fn newest_version(table: &TableInfo, k: &MvCodec, rec: &[u8]) -> Option<LocalRecord> {
    let h = k.cvt.header(rec);
    let mut value = vec![0u8; table.value_size as usize];
    let Ok(cvt) = k.decode(rec, &mut value) else {
        return Some(LocalRecord {
            key: h.key,
            version: u64::MAX,
            lock: h.lock,
            value,
        });
    };
    let n = cvt.newest()?;
    let cell = cvt.cells[n];
    (!cell.tombstone()).then_some(LocalRecord {
        key: h.key,
        version: cell.version,
        lock: h.lock,
        value,
    })
}
