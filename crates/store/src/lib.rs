//! The memory pool's layout: what lives where on each memory node, and how a compute node
//! finds it with one-sided verbs only.
//!
//! - [`layout`]: the superblock and the catalog at the start of every region.
//! - [`plan`]: sizing and replica placement (same offsets on every replica).
//! - [`index`]: the hash index of buckets and overflow chains.
//! - [`record`]: record formats; a version stamp per cache line detects torn READs.
//! - [`cvt`]: Motor's multi-version records (version cells, newest value, pre-image bars).
//! - [`log`]: per-coordinator log slices for recovery without the coordinator.
//! - [`cache`]: the compute-side address cache.
//! - [`view`]: which memory nodes have failed, and so which replica is each table's primary.
//! - [`pool`]: bootstrap ([`PoolMap::bootstrap`]), formatting and loading.

pub mod cache;
pub mod cvt;
mod error;
pub mod index;
pub mod layout;
pub mod log;
pub mod plan;
pub mod pool;
pub mod record;
pub mod remote;
pub mod view;

pub use cache::{AddrCache, SlotCheck, WarmAddrs};
pub use error::StoreError;
pub use index::TableInfo;
pub use plan::{Plan, PoolShape, TableSpec};
pub use pool::{Loader, PoolMap};
pub use record::{RecordFormat, RecordHeader, SingleVersion, Torn};
pub use view::View;
