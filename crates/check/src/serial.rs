//! A serial model store: it runs transactions one after another and records the history they
//! make, which is therefore serializable, and strictly so. For tests and benchmarks of the
//! checker, and of anything that writes histories.

use crate::history::{value_hash, Read, Status, Txn, Write, ABSENT};
use std::collections::HashMap;

/// One operation of a transaction, applied in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerialOp {
    Read { table: u32, key: u64 },
    Write { table: u32, key: u64 },
    Delete { table: u32, key: u64 },
}

/// The store: the last installed version of every item and the hash of its value (absent:
/// version 0, [`ABSENT`]), and a clock. A write's value is made of its transaction, item and
/// version, so that no two writes install the same bytes.
#[derive(Debug, Default)]
pub struct SerialStore {
    versions: HashMap<(u32, u64), (u64, u64)>,
    next_txn: u64,
    clock_ns: u64,
}

impl SerialStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs one transaction to its end. A read sees the transaction's own latest write of the
    /// item, or else the installed version; each write makes the item's next version. An
    /// aborted transaction installs nothing.
    pub fn run(&mut self, session: u64, ops: &[SerialOp], commit: bool) -> Txn {
        let txn = self.next_txn;
        self.next_txn += 1;
        let start = self.clock_ns;
        let mut own: HashMap<(u32, u64), (u64, u64)> = HashMap::new();
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        for op in ops {
            self.clock_ns += 1;
            let current = |table, key| {
                own.get(&(table, key))
                    .or_else(|| self.versions.get(&(table, key)))
                    .copied()
                    .unwrap_or((0, ABSENT))
            };
            match *op {
                SerialOp::Read { table, key } => {
                    let (version, hash) = current(table, key);
                    reads.push(Read {
                        table,
                        key,
                        version,
                        hash: Some(hash),
                    });
                }
                SerialOp::Write { table, key } | SerialOp::Delete { table, key } => {
                    let version = current(table, key).0 + 1;
                    let deleted = matches!(op, SerialOp::Delete { .. });
                    let hash = if deleted {
                        ABSENT
                    } else {
                        let mut value = [0u8; 28];
                        value[..8].copy_from_slice(&txn.to_le_bytes());
                        value[8..12].copy_from_slice(&table.to_le_bytes());
                        value[12..20].copy_from_slice(&key.to_le_bytes());
                        value[20..].copy_from_slice(&version.to_le_bytes());
                        value_hash(&value)
                    };
                    own.insert((table, key), (version, hash));
                    writes.push(Write {
                        table,
                        key,
                        version,
                        deleted,
                        hash: Some(hash),
                    });
                }
            }
        }
        if commit {
            self.versions.extend(own);
        }
        self.clock_ns += 1;
        let end = self.clock_ns;
        self.clock_ns += 1;
        Txn {
            txn,
            session,
            status: if commit {
                Status::Committed
            } else {
                Status::Aborted
            },
            start,
            end,
            reads,
            writes,
        }
    }
}
