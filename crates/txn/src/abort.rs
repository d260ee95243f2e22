//! Aborts: expected outcomes of a transaction, with the reason the statistics break down by.

use serde::Serialize;

/// Why a transaction did not commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AbortReason {
    /// A lock was held by another transaction (no-wait: never waits, so never deadlocks).
    LockConflict,
    /// A read-only item changed between its read and validation.
    Validation,
    /// A record stayed invisible (another transaction committing it) or kept coming back torn.
    Invisible,
    /// A memory node failed during the transaction; its writes were rolled back.
    ReplicaFailure,
    /// `insert` of a key that exists.
    Exists,
    /// `update` or `delete` of a key that does not exist.
    Missing,
    /// The application rolled back (e.g. TPC-C's 1% NewOrder rollbacks).
    User,
    /// The transaction's undo log does not fit its coordinator's log slice: a sizing problem
    /// (give the pool bigger log slices).
    LogFull,
    /// An insert found its table's overflow area full: a sizing problem (give the table more
    /// rows or more overflow).
    TableFull,
    /// Multi-versioning: the record has a version newer than the transaction's start (a
    /// read-write item under first-committer-wins, or Motor's early abort).
    NewerVersion,
    /// Multi-versioning: the version the snapshot needs was garbage-collected (the CVT has
    /// no version old enough: more versions per record, `vnum`, help).
    VersionGone,
    /// Multi-versioning with static version slots (RCC's MVCC): no slot of the record holds
    /// the version the transaction must read (every one kept is newer than it, or the chain
    /// down to one older is gone): more slots, `mvcc.slots`, help.
    NoSlot,
    /// The request itself was wrong (no such table, a value of the wrong size, an update of
    /// an item never read for update). A bug in the caller, reported as an abort so that a
    /// workload never panics on it.
    BadRequest,
    /// A hash chain in memory is corrupt (a cycle, or a link out of the table's overflow
    /// area): the walk stops rather than loop or stray. Not expected of a correct run.
    CorruptChain,
    /// The coordinator's lease may have expired mid-transaction: it is fenced (it posts
    /// nothing more), and the recovery service decides the transaction's outcome, as for a
    /// crashed coordinator (`membership`).
    LeaseExpired,
}

impl AbortReason {
    pub const ALL: [AbortReason; 15] = [
        AbortReason::LockConflict,
        AbortReason::Validation,
        AbortReason::Invisible,
        AbortReason::ReplicaFailure,
        AbortReason::Exists,
        AbortReason::Missing,
        AbortReason::User,
        AbortReason::LogFull,
        AbortReason::TableFull,
        AbortReason::NewerVersion,
        AbortReason::VersionGone,
        AbortReason::NoSlot,
        AbortReason::BadRequest,
        AbortReason::CorruptChain,
        AbortReason::LeaseExpired,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AbortReason::LockConflict => "lock-conflict",
            AbortReason::Validation => "validation",
            AbortReason::Invisible => "invisible",
            AbortReason::ReplicaFailure => "replica-failure",
            AbortReason::Exists => "exists",
            AbortReason::Missing => "missing",
            AbortReason::User => "user",
            AbortReason::LogFull => "log-full",
            AbortReason::TableFull => "table-full",
            AbortReason::NewerVersion => "newer-version",
            AbortReason::VersionGone => "version-gone",
            AbortReason::NoSlot => "no-slot",
            AbortReason::BadRequest => "bad-request",
            AbortReason::CorruptChain => "corrupt-chain",
            AbortReason::LeaseExpired => "lease-expired",
        }
    }
}

/// An aborted transaction: why, and on which record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Abort {
    pub reason: AbortReason,
    pub table: u32,
    pub key: u64,
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "aborted ({}) on table {} key {}",
            self.reason.name(),
            self.table,
            self.key
        )
    }
}

impl std::error::Error for Abort {}
