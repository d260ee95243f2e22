//! Protocol choice and switches, all at run time.

pub use crate::registry::Protocol;
use crate::stage::{Stage, Stages};
use serde::{Deserialize, Serialize};

/// Isolation of a multi-version protocol (`--isolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Serializable: read-only items are validated at the commit timestamp.
    Serializable,
    /// Snapshot isolation: no validation; write-write conflicts still abort
    /// (first-committer-wins). Admits write skew.
    Snapshot,
}

impl Isolation {
    pub const NAMES: [&'static str; 2] = ["serializable", "snapshot"];

    pub fn from_name(name: &str) -> Option<Isolation> {
        match name {
            "serializable" => Some(Isolation::Serializable),
            "snapshot" => Some(Isolation::Snapshot),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isolation::Serializable => "serializable",
            Isolation::Snapshot => "snapshot",
        }
    }
}

/// Motor's switches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MotorOptions {
    pub isolation: Isolation,
    /// Start timestamps from the compute node's [`crate::StartClock`] while its newest
    /// timestamp is at most this old (ns), without a round trip; 0: an oracle FAA per
    /// transaction. Serializable either way; strict (real-time) order only with 0.
    pub start_clock_ns: u64,
    /// `"pool"`: timestamps from the pool's oracle word (one FAA each); `"local"`: from the
    /// compute process's own counter ([`crate::LocalOracle`]), for a process that holds the
    /// pool alone.
    pub oracle: String,
    /// How a record's versions are found: `"cvt"`, Motor's consecutive version tuple (one
    /// READ returns every version's metadata); `"n2o"` or `"o2n"`, the version chains Motor's
    /// ablation measures CVTs against (its Fig. 10), new-to-old or old-to-new. A chain is a
    /// cost model over the same CVT (see [`VersionLayout`]): correctness is the CVT's.
    pub versions: VersionLayout,
    /// Lock the records a transaction writes in a round trip of their own before its commit
    /// timestamp (CAS + READ: the version read must still be the newest), where Motor locks
    /// read-write items with their first READ; read-for-update items it does not write are
    /// validated like reads. FaRMv2's "dedicated lock round trip" (FaRMv2-DM, Motor's
    /// baseline; see `versions` and `coalescent_commit`).
    pub lock_at_commit: bool,
    /// Write every replica's new records in one round trip; off: the backups', then the
    /// primaries' (one more round trip, as FaRMv2-DM commits).
    pub coalescent_commit: bool,
}

impl Default for MotorOptions {
    fn default() -> MotorOptions {
        MotorOptions {
            isolation: Isolation::Serializable,
            start_clock_ns: 0,
            oracle: "pool".into(),
            versions: VersionLayout::Cvt,
            lock_at_commit: false,
            coalescent_commit: true,
        }
    }
}

/// Where a multi-version record's versions are, as a reader finds them (`motor.versions`).
///
/// A chain keeps one version per node, allocated apart from the record (the paper's Fig. 1):
/// the record holds its lock word and the link to the first node, the newest version (`N2o`,
/// FaRMv2's order) or the oldest (`O2n`), and each node links to the next. dtxn runs a chain
/// as a **cost model**: the data stay in the CVT, which the record's READ returns whole, and
/// each node a walk would read is one more READ, in a round trip of its own, of a node's bytes
/// (a version's full value, its version word and link), whose content is not used. Only the
/// walk changes: its round trips, verbs and bytes, and the time it holds a transaction's
/// locks. The version chosen, the commit (one batch either way: a new node and a link) and
/// recovery are Motor's over its CVT, so the history checker proves the same protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VersionLayout {
    /// Consecutive version tuples: every version's metadata in the head READ.
    Cvt,
    /// A chain from the newest version to the oldest.
    N2o,
    /// A chain from the oldest version to the newest.
    O2n,
}

/// FORD's mechanisms, each switchable so that its effect can be measured (the paper's
/// ablations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FordOptions {
    /// Lock read-write items with CAS + READ in one doorbell batch during execution (items
    /// whose address is cached); off: lock every read-write item at validation.
    pub hitchhiked_locking: bool,
    /// Read read-only items from a backup (validated at the primary, whose lock word is the
    /// only one writers take).
    pub backup_reads: bool,
    /// With `backup_reads`: the tables whose read-only items are read from a backup,
    /// comma-separated names (as `dtxn layout` prints them); empty: every table. FORD's
    /// SmallBank case study (its Table 4) moves CHECKING's reads off CHECKING's primary, the
    /// busier memory node, and leaves SAVINGS' on theirs: `checking`.
    pub backup_read_tables: String,
    /// Commit every replica in one round trip; off: the backups, then the primaries (one more
    /// round trip, as FaRM and DrTM+H do).
    pub coalescent_commit: bool,
    /// With `flush` (persistent memory): a FLUSH after every WRITE of the undo log and of the
    /// install to every replica, primaries included: the *full flush* FORD's selective flush
    /// is measured against (FORD, ACM TOS 2023, section 4.5 and Figs. 19-20). The release and
    /// a roll-back flush as without it. Persists nothing more that recovery needs; an
    /// ablation, not a safety switch.
    pub full_flush: bool,
    /// The stages that run as RPCs served by the memory nodes' CPUs instead of one-sided
    /// verbs, e.g. `"lock,validate,commit"` (RCC's hybrid code; "" for all one-sided). FORD,
    /// FaRM and DrTM+H have RPC forms of `fetch`, `lock`, `validate` and `commit`.
    pub rpc: Stages,
    /// NEGATIVE CONTROL, never for real use: the published FORD's read path. Trust a record
    /// READ whose lock word shows no invisible bit, without checking its per-line version
    /// stamps (the one-sided-sync paper's broken scheme S5), and skip validation of read-only
    /// transactions of one item (as FORD's code does). Tests turn it on to prove that the
    /// adversarial simulator and the checks catch the torn reads it accepts.
    #[serde(skip)]
    #[doc(hidden)]
    pub trust_invisible_bit: bool,
    /// NEGATIVE CONTROL, never for real use: DrTM+H (and RCC's OCC) without its re-validation
    /// of the read-only items in the commit-backups round, which admits write skew. Tests turn
    /// it on to prove that the skew workload and the checker catch it.
    #[serde(skip)]
    #[doc(hidden)]
    pub skip_revalidation: bool,
}

impl FordOptions {
    /// Whether a read-only item of `table` is read from a backup.
    pub fn reads_backup(&self, table: &str) -> bool {
        self.backup_reads
            && (self.backup_read_tables.is_empty()
                || self
                    .backup_read_tables
                    .split(',')
                    .any(|t| t.trim() == table))
    }
}

impl Default for FordOptions {
    fn default() -> FordOptions {
        FordOptions {
            hitchhiked_locking: true,
            backup_reads: false,
            backup_read_tables: String::new(),
            coalescent_commit: true,
            full_flush: false,
            rpc: Stages::NONE,
            trust_invisible_bit: false,
            skip_revalidation: false,
        }
    }
}

/// RCC's hybrid code (`--set rcc.hybrid=CODE`): one bit per stage, set when the stage runs
/// one-sided, clear when it runs as RPCs to the memory nodes (RCC's `src/tx_config.h.in`):
/// LOCK 1, READ (fetch) 2, LOG 4, RELEASE 8, COMMIT 16, VALIDATE 32, RENEW 64, CALVIN's
/// dispatch 128 and forwarding 256. The default, 511, is every stage one-sided; 0 every stage
/// as RPCs. A protocol ignores the bits of stages it does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct HybridCode(u16);

impl HybridCode {
    /// Every stage one-sided.
    pub const ONE_SIDED: HybridCode = HybridCode(511);
    /// The stages by their bit, in RCC's order.
    const BITS: [(u16, Stage); 7] = [
        (1, Stage::Lock),
        (2, Stage::Fetch),
        (4, Stage::Log),
        (8, Stage::Release),
        (16, Stage::Commit),
        (32, Stage::Validate),
        (64, Stage::Renew),
    ];

    pub fn new(code: u64) -> Result<HybridCode, String> {
        u16::try_from(code)
            .ok()
            .filter(|&c| c <= 511)
            .map(HybridCode)
            .ok_or_else(|| format!("hybrid code {code}: expected 0 to 511 (RCC's stage bits)"))
    }

    /// The stages the code runs as RPCs.
    pub fn rpc_stages(self) -> Stages {
        let mut out = Stages::NONE;
        for (bit, s) in Self::BITS {
            if self.0 & bit == 0 {
                out = out.with(s);
            }
        }
        out
    }
}

impl Default for HybridCode {
    fn default() -> HybridCode {
        HybridCode::ONE_SIDED
    }
}

impl TryFrom<u64> for HybridCode {
    type Error = String;
    fn try_from(code: u64) -> Result<HybridCode, String> {
        HybridCode::new(code)
    }
}

impl From<HybridCode> for u64 {
    fn from(c: HybridCode) -> u64 {
        u64::from(c.0)
    }
}

/// The switches of RCC's protocols (`nowait`, `waitdie`, `occ`, `sundial`, `mvcc`, `calvin`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RccOptions {
    /// Which stages run one-sided and which as RPCs ([`HybridCode`]).
    pub hybrid: HybridCode,
}

/// RCC's MVCC's switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MvccOptions {
    /// Version slots per record (RCC's static slots: the record and `slots - 1` older
    /// versions beside it), 1 to [`dtxn_store::record::MAX_COPIES`]. A layout switch: the
    /// pool's tables are laid out with it ([`TxnConfig::copies`]).
    pub slots: u8,
    /// A read-only item's READ takes the record's newest version alone, and the older slots
    /// in a second READ only when the newest is too new (RCC's READ takes every slot at once:
    /// K times the bytes of every read, for the few that need an older version).
    pub lazy_slots: bool,
}

impl Default for MvccOptions {
    fn default() -> MvccOptions {
        MvccOptions {
            slots: 4,
            lazy_slots: false,
        }
    }
}

/// Which mode Scythe's attempts run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScytheMode {
    /// The paper's: OCC, and TOCC for the retries of an attempt that met a hot record.
    HotAware,
    /// Always OCC (DrTM+H's protocol with the heat signal ignored).
    Occ,
    /// Always TOCC (read-write transactions; read-only ones run OCC).
    Tocc,
}

/// Scythe's switches (its ablations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScytheOptions {
    /// TOCC waits in the takeout lock's FIFO queues; off: it takes only the header CAS lock
    /// in timestamp order (the paper's CAS-lock ablation).
    pub takeout_lock: bool,
    /// `hot-aware` (the paper's policy), `occ` or `tocc` (one mode always).
    pub mode: ScytheMode,
    /// TOCC's timestamps through a TSO group per compute node (one FAA per batch of
    /// concurrent requests, [`crate::TsoGroup`]); off: one FAA on the pool's oracle word per
    /// timestamp. (Taken by `dtxn bench`, which makes the groups.)
    pub batched_tso: bool,
    /// OCC's commit locks queue in the takeout lock too, as in the paper: a `TICKET(ts, 3)`
    /// per written record before its CAS, refused above the cold watermark (and the retries
    /// run TOCC), so that OCC transactions build the queues the heat signal reads. Off (the
    /// default): OCC takes DrTM+H's CAS locks alone, and losing a commit conflict is the
    /// signal instead.
    pub occ_tickets: bool,
}

impl Default for ScytheOptions {
    fn default() -> ScytheOptions {
        ScytheOptions {
            takeout_lock: true,
            mode: ScytheMode::HotAware,
            batched_tso: true,
            occ_tickets: false,
        }
    }
}

/// Everything a coordinator needs to know about how to run transactions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TxnConfig {
    pub protocol: Protocol,
    pub ford: FordOptions,
    pub motor: MotorOptions,
    pub rcc: RccOptions,
    pub scythe: ScytheOptions,
    /// Persistent memory (`--set flush=true`; `ford.flush` is the same switch): every
    /// protocol FLUSHes what must survive a memory node's loss of power before it relies on
    /// it: its log before any in-place write, and each backup after its last commit WRITE
    /// (FORD's selective remote flush; a lost primary is rebuilt from its backups).
    pub flush: bool,
    pub mvcc: MvccOptions,
    /// Entries of each coordinator's address cache.
    pub addr_cache_entries: usize,
    /// How often a torn or invisible record is re-read before the transaction aborts.
    pub reread_limit: u32,
    /// Journal every lock word taken (`mechanisms::journal`), so that recovery releases a
    /// dead coordinator's locks without scanning the tables: a verb per lock. Not a `--set`
    /// switch: the bench turns it on where coordinators can be recovered (`--faults`,
    /// `--leases`), since recovery trusts an active journal.
    #[serde(skip)]
    pub lock_journal: bool,
}

impl Default for TxnConfig {
    fn default() -> TxnConfig {
        TxnConfig {
            protocol: Protocol::Ford,
            ford: FordOptions::default(),
            motor: MotorOptions::default(),
            rcc: RccOptions::default(),
            scythe: ScytheOptions::default(),
            flush: false,
            mvcc: MvccOptions::default(),
            addr_cache_entries: 1 << 16,
            reread_limit: 16,
            lock_journal: false,
        }
    }
}

impl TxnConfig {
    /// Checks the switches against the protocol: a stage asked to run as RPCs must have an
    /// RPC form in it.
    pub fn validate(&self) -> Result<(), String> {
        let p = self.protocol;
        if !self.ford.rpc.is_empty() && p.options_key() != Some("ford") {
            let instead = if p.options_key() == Some("rcc") {
                "takes its stages from --set rcc.hybrid=CODE"
            } else {
                "has no RPC forms"
            };
            return Err(format!(
                "--set ford.rpc={}: a switch of ford, farm and drtmh; {} {instead}",
                self.ford.rpc.names(),
                p.name()
            ));
        }
        if self.rcc != RccOptions::default() && p.options_key() != Some("rcc") {
            return Err(format!(
                "--set rcc.hybrid={}: a switch of RCC's protocols (nowait, waitdie, occ, sundial, mvcc, calvin); {} \
                 takes its stages from {}",
                u64::from(self.rcc.hybrid),
                p.name(),
                match p.options_key() {
                    Some("ford") => "--set ford.rpc=STAGES",
                    _ => "nowhere (it has no RPC forms)",
                }
            ));
        }
        if self.ford.backup_reads && !matches!(p, Protocol::Ford | Protocol::Farm) {
            // DrTM+H (and RCC's OCC) validate again after writing the backups and roll them
            // back if that fails: a backup read could return the rolled-back bytes, under a
            // version number the next commit reuses, and pass validation at the primary.
            // The others read their own metadata from the primary, or never look at the
            // switch.
            return Err(format!(
                "--set ford.backup_reads=true: a switch of ford and farm; {} reads the primary \
                 (a backup may hold a version its commit rolls back)",
                p.name()
            ));
        }
        if self.ford.full_flush && p.options_key() != Some("ford") {
            return Err(format!(
                "--set ford.full_flush=true: a switch of ford, farm and drtmh; {} flushes \
                 selectively",
                p.name()
            ));
        }
        if self.ford.full_flush && !self.flush {
            return Err(
                "--set ford.full_flush=true: flushes in persistent-memory mode, so only \
                 with --set flush=true"
                    .into(),
            );
        }
        if !self.ford.backup_read_tables.is_empty() && !self.ford.backup_reads {
            return Err(format!(
                "--set ford.backup_read_tables={}: the tables backup reads apply to, so only \
                 with --set ford.backup_reads=true",
                self.ford.backup_read_tables
            ));
        }
        if self.scythe != ScytheOptions::default() && p != Protocol::Scythe {
            return Err(format!(
                "--set scythe.*: the switches of scythe, not of {}",
                p.name()
            ));
        }
        if self.mvcc != MvccOptions::default() && p != Protocol::Mvcc {
            return Err(format!(
                "--set mvcc.*: the switches of mvcc, not of {}",
                p.name()
            ));
        }
        let max = dtxn_store::record::MAX_COPIES;
        if !(1..=max).contains(&usize::from(self.mvcc.slots)) {
            return Err(format!(
                "--set mvcc.slots={}: version slots per record must be 1 to {max}",
                self.mvcc.slots
            ));
        }
        let asked = p.rpc_stages(self);
        let missing = asked.minus(p.rpc_forms());
        if !missing.is_empty() {
            let key = p.options_key().unwrap_or(p.name());
            return Err(format!(
                "--set {key}.rpc={}: {} has no RPC form of {} (its stages with one: {})",
                asked.names(),
                p.name(),
                missing.names(),
                if p.rpc_forms().is_empty() {
                    "none".to_string()
                } else {
                    p.rpc_forms().names()
                }
            ));
        }
        Ok(())
    }
}

impl TxnConfig {
    /// FORD's full flush in effect: `ford.full_flush` in persistent-memory mode (`flush`),
    /// where alone a FLUSH persists anything.
    pub fn full_flush(&self) -> bool {
        self.flush && self.ford.full_flush
    }

    /// Copies of each record the protocol's tables are laid out with: MVCC's version slots
    /// (`mvcc.slots`), 1 for every other protocol.
    pub fn copies(&self) -> u8 {
        if self.protocol.copies() > 1 {
            self.mvcc.slots
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_reads_are_fords_and_farms_alone() {
        let with = |protocol| TxnConfig {
            protocol,
            ford: FordOptions {
                backup_reads: true,
                ..FordOptions::default()
            },
            ..TxnConfig::default()
        };
        assert_eq!(with(Protocol::Ford).validate(), Ok(()));
        assert_eq!(with(Protocol::Farm).validate(), Ok(()));
        for p in [
            Protocol::Drtmh,
            Protocol::Occ,
            Protocol::Sundial,
            Protocol::Motor,
        ] {
            let e = with(p).validate().unwrap_err();
            assert!(
                e.starts_with("--set ford.backup_reads=true: a switch of ford and farm"),
                "{e}"
            );
        }
    }

    #[test]
    fn full_flush_needs_flush_and_a_protocol_of_fords_family() {
        let with = |protocol, flush| TxnConfig {
            protocol,
            flush,
            ford: FordOptions {
                full_flush: true,
                ..FordOptions::default()
            },
            ..TxnConfig::default()
        };
        for p in [Protocol::Ford, Protocol::Farm, Protocol::Drtmh] {
            assert_eq!(with(p, true).validate(), Ok(()));
            let e = with(p, false).validate().unwrap_err();
            assert!(e.ends_with("so only with --set flush=true"), "{e}");
        }
        let e = with(Protocol::Motor, true).validate().unwrap_err();
        assert_eq!(
            e,
            "--set ford.full_flush=true: a switch of ford, farm and drtmh; motor flushes selectively"
        );
    }

    #[test]
    fn backup_read_tables_choose_the_tables_and_need_backup_reads() {
        let mut f = FordOptions {
            backup_reads: true,
            ..FordOptions::default()
        };
        assert!(f.reads_backup("savings") && f.reads_backup("checking"));
        f.backup_read_tables = "checking, stock".into();
        assert!(f.reads_backup("checking") && f.reads_backup("stock"));
        assert!(!f.reads_backup("savings") && !f.reads_backup("check"));
        f.backup_reads = false;
        assert!(!f.reads_backup("checking"));
        let cfg = TxnConfig {
            ford: f,
            ..TxnConfig::default()
        };
        let e = cfg.validate().unwrap_err();
        assert!(
            e.starts_with("--set ford.backup_read_tables=checking, stock: the tables backup reads apply to, so only with --set ford.backup_reads=true"),
            "{e}"
        );
    }
}
