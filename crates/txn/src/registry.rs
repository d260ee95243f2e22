//! The registry: every protocol, named once. A line gives the protocol's `--protocol` name,
//! its module's type (the [`crate::protocol::Protocol`] implementation, which declares its
//! record format, its state and its phases) and its one-line description. From this list the
//! macro makes the public [`Protocol`] enum, the coordinator's per-protocol state and the
//! dispatch of [`crate::Txn`]'s calls to the chosen protocol, without boxing a future.

use crate::config::TxnConfig;
use crate::coord::{CoordStats, Core};
use crate::protocol::{Protocol as _, Slot};
use crate::protocols::{calvin::Calvin, drtmh::Drtmh, farm::Farm, ford::Ford, motor::Motor};
use crate::protocols::{mvcc::Mvcc, scythe::Scythe, sundial::Sundial, two_pl::TwoPl};
use crate::recovery::Recovered;
use crate::stage::Stages;
use crate::tx::Tx;
use crate::txn::{TxKind, Txn};
use dtxn_fabric::{Endpoint, FabricError};
use dtxn_store::log::LogEntry;
use dtxn_store::PoolMap;
use dtxn_store::RecordFormat;
use serde::{Deserialize, Serialize};

macro_rules! registry {
    ($d:tt $( $variant:ident : $name:literal => $ty:ty, $doc:literal; )*) => {
        /// The concurrency-control protocols, chosen by name (`--protocol`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Protocol {
            $( #[doc = $doc] #[serde(rename = $name)] $variant, )*
        }

        impl Protocol {
            pub const NAMES: &'static [&'static str] = &[$( $name ),*];

            pub fn from_name(name: &str) -> Option<Protocol> {
                match name {
                    $( $name => Some(Protocol::$variant), )*
                    _ => None,
                }
            }

            pub fn name(self) -> &'static str {
                match self {
                    $( Protocol::$variant => $name, )*
                }
            }

            /// How the protocol's tables lay out their records.
            pub fn records(self) -> RecordFormat {
                match self {
                    $( Protocol::$variant => <$ty>::RECORDS, )*
                }
            }

            /// Whether its writers freeze a word beside their locks (see `Protocol::FREEZES`).
            pub(crate) fn freezes(self) -> bool {
                match self {
                    $( Protocol::$variant => <$ty>::FREEZES, )*
                }
            }

            /// Whether its locks are journaled when `TxnConfig::lock_journal` is on.
            pub(crate) fn journaled(self) -> bool {
                match self {
                    $( Protocol::$variant => <$ty>::JOURNALED, )*
                }
            }

            /// Recovery's protocol step: settles a dead coordinator's pending log entry.
            pub(crate) async fn settle(
                self,
                ep: &mut Endpoint,
                map: &PoolMap,
                owner: u64,
                e: &LogEntry,
            ) -> Result<Recovered, FabricError> {
                match self {
                    $( Protocol::$variant => <$ty>::settle(ep, map, owner, e).await, )*
                }
            }

            /// Whether recovery settles the newest log entry `e` though it is not pending.
            pub(crate) fn judges_closed(self, e: &LogEntry) -> bool {
                match self {
                    $( Protocol::$variant => <$ty>::judges_closed(e), )*
                }
            }

            /// Recovery's last protocol step: gives back what dead coordinators hold beside
            /// lock words; per dead coordinator, whether it holds nothing more, and how many
            /// it gave back.
            pub(crate) async fn release_held(
                self,
                ep: &mut Endpoint,
                map: &PoolMap,
                dead: &[u32],
                deadline_ns: u64,
            ) -> Result<Vec<(bool, u32)>, FabricError> {
                match self {
                    $( Protocol::$variant => <$ty>::release_held(ep, map, dead, deadline_ns).await, )*
                }
            }

            /// Memory-node failover: what live coordinator `me` owes others, given back while
            /// it waits for a view to be active.
            pub(crate) async fn release_owed(
                self,
                ep: &mut Endpoint,
                map: &PoolMap,
                me: u32,
                deadline_ns: u64,
            ) -> Result<bool, FabricError> {
                match self {
                    $( Protocol::$variant => <$ty>::release_owed(ep, map, me, deadline_ns).await, )*
                }
            }

            /// Re-replication: whether no install can be in flight or start while live
            /// coordinator `me`, between its transactions, copies records without their locks.
            pub(crate) async fn installs_held(
                self,
                ep: &mut Endpoint,
                map: &PoolMap,
                me: u32,
                members: u32,
                others_settled: bool,
            ) -> Result<bool, FabricError> {
                match self {
                    $( Protocol::$variant => <$ty>::installs_held(ep, map, me, members, others_settled).await, )*
                }
            }

            /// Memory-node failover: the protocol's part of a promoted primary's repair.
            pub(crate) async fn repair_promoted(
                self,
                ep: &mut Endpoint,
                map: &PoolMap,
                tables: &[u32],
            ) -> Result<(), FabricError> {
                match self {
                    $( Protocol::$variant => <$ty>::repair_promoted(ep, map, tables).await, )*
                }
            }

            /// Keeps state of its own on memory node 0 alone, which may then not fail.
            pub fn on_node0(self) -> bool {
                match self {
                    $( Protocol::$variant => <$ty>::ON_NODE0, )*
                }
            }

            /// Re-replication copies in slices while the schedule holds every install.
            pub(crate) fn copies_in_slices(self) -> bool {
                match self {
                    $( Protocol::$variant => <$ty>::COPY_IN_SLICES, )*
                }
            }

            /// Extra 8-byte words per record the protocol keeps its own metadata in.
            pub fn meta_words(self) -> u8 {
                match self {
                    $( Protocol::$variant => <$ty>::META_WORDS, )*
                }
            }

            /// Copies of each record the protocol's tables keep by default (RCC's MVCC
            /// version slots; `--set mvcc.slots=K` lays them out with K, see
            /// [`TxnConfig::copies`]).
            pub fn copies(self) -> u8 {
                match self {
                    $( Protocol::$variant => <$ty>::COPIES, )*
                }
            }

            /// The section of the configuration holding the protocol's switches.
            pub fn options_key(self) -> Option<&'static str> {
                match self {
                    $( Protocol::$variant => <$ty>::OPTIONS, )*
                }
            }

            /// The stages that have an RPC form in this protocol.
            pub fn rpc_forms(self) -> Stages {
                match self {
                    $( Protocol::$variant => <$ty>::RPC_FORMS, )*
                }
            }

            /// Whether a run with `cfg` needs the memory nodes to serve RPCs
            /// ([`crate::MemoryNodeHandlers`]): some stage runs as RPCs, or the protocol
            /// always sends some (Scythe's tickets).
            pub fn needs_handlers(self, cfg: &TxnConfig) -> bool {
                let always = match self {
                    $( Protocol::$variant => <$ty>::NEEDS_HANDLERS, )*
                };
                always || !self.rpc_stages(cfg).is_empty()
            }

            /// The stages `cfg` asks this protocol to run as RPCs.
            pub fn rpc_stages(self, cfg: &TxnConfig) -> Stages {
                match self {
                    $( Protocol::$variant => <$ty>::rpc(cfg), )*
                }
            }
        }

        /// A coordinator's state for the protocol it runs.
        pub(crate) enum Slots {
            $( $variant(Box<Slot<$ty>>), )*
        }

        impl Slots {
            pub(crate) fn new(p: Protocol) -> Slots {
                match p {
                    $( Protocol::$variant => Slots::$variant(Box::default()), )*
                }
            }

            pub(crate) async fn retire(&mut self, core: &mut Core) {
                match self {
                    $( Slots::$variant(s) => <$ty>::retire(core, &mut s.scratch).await, )*
                }
            }

            pub(crate) fn begin<'c>(
                &'c mut self,
                core: &'c mut Core,
                stats: &'c mut CoordStats,
                id: u64,
                kind: TxKind,
            ) -> Txn<'c> {
                match self {
                    $( Slots::$variant(s) => Txn(AnyTxn::$variant(Tx::new(core, stats, s, id, kind))), )*
                }
            }
        }

        /// A transaction of the protocol its coordinator runs.
        pub(crate) enum AnyTxn<'c> {
            $( $variant(Tx<'c, $ty>), )*
        }

        /// Runs `$body` with `$t` bound to the transaction's core, whatever its protocol.
        macro_rules! dispatch {
            ($d x:expr, $d t:ident => $d body:expr) => {
                match $d x {
                    $( $crate::registry::AnyTxn::$variant($d t) => $d body, )*
                }
            };
        }
        pub(crate) use dispatch;
    };
}

registry! { $
    Ford: "ford" => Ford,
        "FORD (FAST'22, TOS'23): OCC with hitchhiked locking and coalescent commit.";
    Farm: "farm" => Farm,
        "FaRM (SOSP'15), as FORD's paper re-implemented it on disaggregated memory.";
    Drtmh: "drtmh" => Drtmh<false>,
        "DrTM+H (OSDI'18), as FORD's paper re-implemented it on disaggregated memory.";
    Motor: "motor" => Motor,
        "Motor (OSDI'24): multi-versioning with consecutive version tuples. Needs the pool laid out with multi-version tables.";
    NoWait: "nowait" => TwoPl<false>,
        "RCC's NO_WAIT: two-phase locking (shared read locks) that aborts on any conflict.";
    WaitDie: "waitdie" => TwoPl<true>,
        "RCC's WAIT_DIE: two-phase locking where an older transaction waits for a younger holder and a younger one dies.";
    Occ: "occ" => Drtmh<true>,
        "RCC's OCC: DrTM+H's protocol (the same code), its stages chosen by RCC's hybrid code.";
    Sundial: "sundial" => Sundial,
        "RCC's SUNDIAL: OCC with logical leases (a record's [wts, rts] renewed by CAS on one word with a freeze bit); serializable, not strictly.";
    Mvcc: "mvcc" => Mvcc,
        "RCC's MVCC: timestamp ordering with read timestamps raised by CAS and a freeze bit (one version slot); serializable, not strictly.";
    Calvin: "calvin" => Calvin,
        "RCC's CALVIN: epochs of dispatched key sets, scheduled deterministically (no locks, no aborts from concurrency control).";
    Scythe: "scythe" => Scythe,
        "Scythe (TACO'24): OCC, whose retries after meeting a hot record run timestamp-ordered (TOCC) in FIFO takeout-lock queues.";
}

impl Protocol {
    /// Whether the protocol keeps several versions per record (the pool's tables must be laid
    /// out as multi-version CVTs).
    pub fn multi_version(self) -> bool {
        self.records() == RecordFormat::Cvt
    }

    /// Whether its lock words count read shares (2PL), which under leases are not given back
    /// by recovery but expire, and stay counted until someone takes the word
    /// ([`crate::is_read_share_word`]).
    pub fn read_shares(self) -> bool {
        matches!(self, Protocol::NoWait | Protocol::WaitDie)
    }
}
