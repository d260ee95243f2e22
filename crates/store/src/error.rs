//! Store errors: bad configuration, bad layouts, fabric faults.

use dtxn_fabric::{FabricError, NodeId};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("{replicas} replicas need {replicas} distinct memory nodes; the pool has {nodes}")]
    TooManyReplicas { replicas: usize, nodes: usize },
    #[error("--replicas must be at least 1")]
    NoReplicas,
    #[error("a control chain of {asked} memory nodes: it needs 1 to {max} (the pool has {nodes} memory nodes)")]
    ControlReplicas { asked: u8, nodes: u16, max: u8 },
    #[error("{0} log slices (one per coordinator): at most 65535 (lock words keep a coordinator's id in 16 bits)")]
    TooManyLogSlices(u32),
    #[error("a pool needs at least one memory node")]
    NoNodes,
    #[error("memory node {node} needs {need} bytes for its tables and logs, its region has {have} (table '{table}' does not fit)")]
    DoesNotFit {
        node: NodeId,
        table: String,
        need: u64,
        have: u64,
    },
    #[error("table '{name}': {what}")]
    BadTable { name: String, what: String },
    #[error("two tables have id {0}")]
    DuplicateTable(u32),
    #[error("memory node {node} has no dtxn pool (bad magic {magic:#018x})")]
    BadMagic { node: NodeId, magic: u64 },
    #[error("memory node {node} has layout v{found}, this binary reads v{expected}")]
    LayoutVersion {
        node: NodeId,
        found: u32,
        expected: u32,
    },
    #[error("memory node {node}: {what} checksum mismatch (corrupt or half-written layout)")]
    Checksum { node: NodeId, what: &'static str },
    #[error("memory node {node}: {what}")]
    Corrupt { node: NodeId, what: String },
    #[error("the memory nodes disagree about table {table}: {what}")]
    Inconsistent { table: u32, what: String },
    #[error("table {0} is not in the catalog")]
    NoSuchTable(u32),
    #[error("table {table} is lost: every memory node holding it has failed ({view})")]
    TableLost { table: u32, view: String },
    #[error("table {table}: key {key} is already loaded")]
    DuplicateKey { table: u32, key: u64 },
    #[error("table {table}: the overflow area is full ({buckets} buckets); give the table more rows or more overflow")]
    OverflowFull { table: u32, buckets: u64 },
    #[error("table {table}: value of {got} bytes, the table's records hold {want}")]
    ValueSize { table: u32, got: usize, want: usize },
    #[error("log entry of {need} bytes does not fit a {have}-byte log slice")]
    LogFull { need: usize, have: u64 },
    #[error(transparent)]
    Fabric(#[from] FabricError),
}
