//! What the checker found, for people (`Display`) and for programs (`Serialize`).

use crate::{Isolation, Options};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// The anomalies, named as Adya names them where he does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Write cycle: a cycle of ww edges.
    G0,
    /// Aborted read: a committed transaction read a version that no committed transaction
    /// installed (written by an aborted one, or by nobody).
    G1a,
    /// Intermediate read: a committed transaction read a version that its writer overwrote
    /// itself.
    G1b,
    /// Circular information flow: a cycle of ww and wr edges.
    G1c,
    /// Torn or phantom value: a committed transaction read a version's value with other bytes
    /// than its writer installed (or, for a version no transaction in the history installed,
    /// than its first reader saw). Found from the values' hashes.
    TornValue,
    /// Two committed transactions read the same version of a key and both wrote the key.
    LostUpdate,
    /// A cycle with exactly one anti-dependency (read skew is the two-transaction case).
    GSingle,
    /// A cycle with several anti-dependencies (write skew is the two-transaction case); under
    /// snapshot isolation, one in which no two of them are adjacent. Without predicate reads
    /// this is Adya's G2-item.
    G2,
    /// A cycle that needs a real-time edge: not strictly serializable.
    RealTime,
    /// Two committed transactions installed the same version of a key: a protocol bug (the
    /// version order is no longer total).
    DuplicateVersion,
}

impl Kind {
    pub const fn name(self) -> &'static str {
        match self {
            Kind::G0 => "G0",
            Kind::G1a => "G1a",
            Kind::G1b => "G1b",
            Kind::G1c => "G1c",
            Kind::TornValue => "torn-value",
            Kind::LostUpdate => "lost-update",
            Kind::GSingle => "G-single",
            Kind::G2 => "G2",
            Kind::RealTime => "real-time",
            Kind::DuplicateVersion => "duplicate-version",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A transaction as the report names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TxnRef {
    pub txn: u64,
    pub session: u64,
}

impl fmt::Display for TxnRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn {} (session {})", self.txn, self.session)
    }
}

/// One edge of a cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub from: TxnRef,
    pub to: TxnRef,
    /// `ww`, `wr`, `rw` or `rt`.
    pub dep: &'static str,
    /// The item the dependency is on (absent for `rt`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<Item>,
    /// For `rt`: when `from` ended and `to` started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_end: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_start: Option<u64>,
}

/// The versions of one key a dependency is on: for ww, the one `from` installed and the one
/// `to` installed; for wr, the one both saw; for rw, the one `from` read and the one `to`
/// installed over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Item {
    pub table: u32,
    pub key: u64,
    pub from_version: u64,
    pub to_version: u64,
}

/// One anomaly and the transactions, keys and versions that form it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Anomaly {
    /// G0, G1c, G-single, G2, real-time: a witness cycle, starting at its smallest txn id.
    Cycle { kind: Kind, cycle: Vec<Step> },
    /// G1a, G1b.
    Read {
        kind: Kind,
        reader: TxnRef,
        table: u32,
        key: u64,
        version: u64,
        /// G1a: the aborted transaction that wrote the version, if any did. G1b: the
        /// committed transaction that overwrote it.
        #[serde(skip_serializing_if = "Option::is_none")]
        writer: Option<TxnRef>,
        /// G1b: the version the writer installed in the end.
        #[serde(skip_serializing_if = "Option::is_none")]
        installed: Option<u64>,
    },
    /// Torn value: what the reader saw, and what it should have.
    Value {
        kind: Kind,
        reader: TxnRef,
        table: u32,
        key: u64,
        version: u64,
        /// The hash of the value the reader saw (0: absent).
        hash: u64,
        /// The hash of the version's value: as its writer installed it, or as its first reader
        /// saw it.
        expected: u64,
        /// The transaction that installed the version.
        #[serde(skip_serializing_if = "Option::is_none")]
        writer: Option<TxnRef>,
        /// For a version no transaction in the history installed (the initial load): the
        /// first transaction that read it, whose value it is held to.
        #[serde(skip_serializing_if = "Option::is_none")]
        first_reader: Option<TxnRef>,
    },
    /// Lost update, duplicate version.
    Version {
        kind: Kind,
        table: u32,
        key: u64,
        version: u64,
        txns: Vec<TxnRef>,
    },
}

impl Anomaly {
    pub fn kind(&self) -> Kind {
        match self {
            Anomaly::Cycle { kind, .. }
            | Anomaly::Read { kind, .. }
            | Anomaly::Value { kind, .. }
            | Anomaly::Version { kind, .. } => *kind,
        }
    }

    /// The transactions involved, in the order the anomaly lists them.
    pub fn txns(&self) -> Vec<TxnRef> {
        match self {
            Anomaly::Cycle { cycle, .. } => cycle.iter().map(|s| s.from).collect(),
            Anomaly::Read { reader, writer, .. } => {
                std::iter::once(*reader).chain(*writer).collect()
            }
            Anomaly::Value {
                reader,
                writer,
                first_reader,
                ..
            } => std::iter::once(*reader)
                .chain(*writer)
                .chain(*first_reader)
                .collect(),
            Anomaly::Version { txns, .. } => txns.clone(),
        }
    }
}

/// A value's hash as the report shows it: 16 hex digits, or `absent`.
struct Hash(u64);

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == crate::history::ABSENT {
            f.write_str("absent")
        } else {
            write!(f, "{:016x}", self.0)
        }
    }
}

fn list(f: &mut fmt::Formatter<'_>, txns: &[TxnRef]) -> fmt::Result {
    for (i, t) in txns.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{t}")?;
    }
    Ok(())
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::Cycle { kind, cycle } => {
                write!(f, "{kind}: a cycle of {} transactions", cycle.len())?;
                for s in cycle {
                    write!(f, "\n  {} -{}-> {}", s.from, s.dep, s.to)?;
                    if let Some(i) = s.item {
                        let (t, k, a, b) = (i.table, i.key, i.from_version, i.to_version);
                        match s.dep {
                            "ww" => write!(f, ": ({t}, {k}) v{a} installed, then v{b}")?,
                            "wr" => write!(f, ": ({t}, {k}) v{a} installed, then read")?,
                            _ => write!(f, ": ({t}, {k}) v{a} read, then v{b} installed")?,
                        }
                    }
                    if let (Some(end), Some(start)) = (s.from_end, s.to_start) {
                        write!(f, ": ended at {end}, before the start at {start}")?;
                    }
                }
                Ok(())
            }
            Anomaly::Read {
                kind,
                reader,
                table,
                key,
                version,
                writer,
                installed,
            } => {
                write!(f, "{kind}: {reader} read ({table}, {key}) v{version}")?;
                match (writer, installed) {
                    (Some(w), Some(i)) => write!(
                        f,
                        ", an intermediate version of {w}, which installed v{i} instead"
                    ),
                    (Some(w), None) => write!(f, ", written by {w}, which aborted"),
                    (None, _) => write!(f, ", which no transaction committed"),
                }
            }
            Anomaly::Value { .. } => self.fmt_value(f),
            Anomaly::Version {
                kind,
                table,
                key,
                version,
                txns,
            } => {
                write!(f, "{kind}: ")?;
                list(f, txns)?;
                if *kind == Kind::LostUpdate {
                    write!(f, " each read ({table}, {key}) v{version} and wrote it")
                } else {
                    write!(f, " each installed ({table}, {key}) v{version}")
                }
            }
        }
    }
}

impl Anomaly {
    /// A torn value, for people.
    fn fmt_value(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Anomaly::Value {
            kind,
            reader,
            table,
            key,
            version,
            hash,
            expected,
            writer,
            first_reader,
        } = self
        else {
            unreachable!("only for Anomaly::Value")
        };
        write!(
            f,
            "{kind}: {reader} read ({table}, {key}) v{version} as value {}, ",
            Hash(*hash)
        )?;
        match (writer, first_reader) {
            (Some(w), _) => write!(f, "but {w} installed {}", Hash(*expected)),
            (None, Some(r)) => write!(
                f,
                "but {r} read it as {} (a version no transaction in the history installed)",
                Hash(*expected)
            ),
            (None, None) => write!(f, "not {}", Hash(*expected)),
        }
    }
}

/// The checker's verdict on a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub options: Options,
    pub committed: u64,
    pub aborted: u64,
    /// In the order of [`Kind`], then of the transactions involved.
    pub anomalies: Vec<Anomaly>,
}

impl Report {
    /// No anomaly: the history has the isolation level asked for.
    pub fn ok(&self) -> bool {
        self.anomalies.is_empty()
    }

    /// The isolation level that was checked, e.g. "strict serializable".
    pub fn level(&self) -> &'static str {
        match (self.options.isolation, self.options.real_time) {
            (Isolation::Serializable, false) => "serializable",
            (Isolation::Serializable, true) => "strict serializable",
            (Isolation::Snapshot, false) => "snapshot isolation",
            (Isolation::Snapshot, true) => "strong snapshot isolation",
        }
    }

    /// How many anomalies of each kind, by name.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut c = BTreeMap::new();
        for a in &self.anomalies {
            *c.entry(a.kind().name()).or_default() += 1;
        }
        c
    }

    /// The first line of the text report.
    pub fn verdict(&self) -> String {
        if self.ok() {
            return format!(
                "{}: {} committed, {} aborted, no anomalies",
                self.level(),
                self.committed,
                self.aborted
            );
        }
        let n = self.anomalies.len();
        let kinds: Vec<String> = self
            .counts()
            .into_iter()
            .map(|(k, c)| format!("{k} x{c}"))
            .collect();
        format!(
            "NOT {}: {n} {} ({})",
            self.level(),
            if n == 1 { "anomaly" } else { "anomalies" },
            kinds.join(", ")
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.verdict())?;
        for a in &self.anomalies {
            writeln!(f, "{a}")?;
        }
        Ok(())
    }
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            ok: bool,
            verdict: String,
            level: &'static str,
            isolation: Isolation,
            real_time: bool,
            committed: u64,
            aborted: u64,
            counts: BTreeMap<&'static str, usize>,
            anomalies: &'a [Anomaly],
        }
        Json {
            ok: self.ok(),
            verdict: self.verdict(),
            level: self.level(),
            isolation: self.options.isolation,
            real_time: self.options.real_time,
            committed: self.committed,
            aborted: self.aborted,
            counts: self.counts(),
            anomalies: &self.anomalies,
        }
        .serialize(s)
    }
}
