//! Transactions on disaggregated memory: the API every workload uses, and the protocols
//! behind it, chosen at run time by name.
//!
//! ```ignore
//! let mut tx = coord.begin(TxKind::ReadWrite);
//! let from = tx.read_for_update(CHECKING, a).await?.map(|v| v.to_vec());
//! tx.update(CHECKING, a, &new_value).await?;
//! tx.commit().await?; // Ok(()) or Err(Abort { reason, .. }): never a silent failure
//! ```

mod abort;
pub mod attach;
mod breakdown;
mod clock;
mod config;
pub mod control;
mod coord;
pub mod failover;
mod item;
mod mechanisms;
pub mod membership;
mod protocol;
mod protocols;
pub mod recovery;
mod registry;
mod stage;
mod tso;
mod tx;
mod txn;
pub mod vcache;

pub use abort::{Abort, AbortReason};
pub use attach::{attach, detach, AttachError, Attachment};
pub use breakdown::{Breakdown, Phase};
pub use clock::{LocalOracle, StartClock, LOCAL_ORACLE_BLOCK};
pub use config::{
    FordOptions, HybridCode, Isolation, MotorOptions, MvccOptions, Protocol, RccOptions,
    ScytheMode, ScytheOptions, TxnConfig, VersionLayout,
};
pub use coord::{CoordStats, Coordinator, Recorder, TxnOutcome};
pub use item::Access;
pub use mechanisms::journal::TAIL as LOCK_JOURNAL_TAIL;
pub use mechanisms::rpc::MemoryNodeHandlers;
pub use mechanisms::share::is_read_share_word;
pub use stage::{Stage, Stages};
pub use tso::TsoGroup;
pub use txn::{TxKind, Txn};
pub use vcache::Vcache;
