//! A serial model store: it runs transactions one after another and records the history they
//! make, which is therefore serializable, and strictly so. For tests and benchmarks of the
//! checker, and of anything that writes histories.

use crate::history::{Read, Status, Txn, Write};
use std::collections::HashMap;

/// One operation of a transaction, applied in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerialOp {
    Read { table: u32, key: u64 },
    Write { table: u32, key: u64 },
    Delete { table: u32, key: u64 },
}

/// The store: the last installed version of every item (absent: version 0), and a clock.
#[derive(Debug, Default)]
pub struct SerialStore {
    versions: HashMap<(u32, u64), u64>,
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
        let mut own: HashMap<(u32, u64), u64> = HashMap::new();
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        for op in ops {
            self.clock_ns += 1;
            match *op {
                SerialOp::Read { table, key } => {
                    let version = own
                        .get(&(table, key))
                        .or_else(|| self.versions.get(&(table, key)))
                        .copied()
                        .unwrap_or(0);
                    reads.push(Read {
                        table,
                        key,
                        version,
                    });
                }
                SerialOp::Write { table, key } | SerialOp::Delete { table, key } => {
                    let current = own
                        .get(&(table, key))
                        .or_else(|| self.versions.get(&(table, key)))
                        .copied()
                        .unwrap_or(0);
                    own.insert((table, key), current + 1);
                    writes.push(Write {
                        table,
                        key,
                        version: current + 1,
                        deleted: matches!(op, SerialOp::Delete { .. }),
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
