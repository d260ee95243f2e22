//! The dtxn history format and an offline checker for serializability and snapshot isolation.
//!
//! A history ([`history`]) records, for every transaction, the version of each item it read
//! and the version of each item it wrote. Because versions are explicit and totally ordered per
//! item, Adya's direct serialization graph (DSG) follows without any search (unlike checkers of
//! value-only histories, for which serializability is NP-complete):
//!
//! - **ww**: the writer of a version precedes the writer of the next installed version;
//! - **wr**: the writer of a version precedes each committed transaction that read it;
//! - **rw** (anti-dependency): a reader of a version precedes the writer of the next one;
//! - **rt** (with [`Options::real_time`]): a transaction precedes every one that started after
//!   it ended, encoded through a chain of barrier nodes so the edge count stays linear.
//!
//! Only committed transactions are in the graph. Item by item, the checker reports **G1a**
//! (a read of a version no committed transaction wrote), **G1b** (a read of a version its
//! writer overwrote), **lost updates** and **duplicate versions**. Then it finds the strongly
//! connected components of the whole graph (iterative Tarjan, linear), and only inside those
//! of more than one node searches witness cycles, from the most severe kind to the least:
//! **G0** (ww only), **G1c** (ww and wr), **G-single** (one rw), **G2** (several rw), and
//! **real-time** (a cycle that needs an rt edge). Each component yields at most one anomaly of
//! each kind, with a shortest cycle through the edge that makes it that kind.
//!
//! Under [`Isolation::Snapshot`] a cycle is allowed when two of its anti-dependencies are
//! adjacent (Fekete et al.; Cerone and Gotsman): the search for G-single and G2 runs on the
//! product graph of `((ww | wr | rt) ; rw?)`, whose cycles are exactly the disallowed ones. G0
//! and G1 are anomalies under both levels.

mod checker;
mod graph;
pub mod history;
mod report;
pub mod serial;

pub use checker::{check, check_file, Checker, InvalidTxn, Isolation, Options};
pub use history::{HistoryError, HistoryReader, HistoryWriter, Read, Status, Txn, Write};
pub use report::{Anomaly, Item, Kind, Report, Step, TxnRef};
