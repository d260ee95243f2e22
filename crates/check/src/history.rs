//! The history format: JSON Lines, one transaction per line.
//!
//! ```text
//! {"format": "dtxn-history", "version": 2}
//! {"txn": 17, "session": 3, "status": "committed", "start": 1234, "end": 1250,
//!  "reads": [{"table": 1, "key": 42, "version": 7, "hash": 4890212785466781811}],
//!  "writes": [{"table": 1, "key": 42, "version": 8, "deleted": false, "hash": 77810234}]}
//! ```
//!
//! (each transaction on one line). The header is optional: a file whose first line is a
//! transaction is read as version 1. Version 2 adds `hash` to reads and writes; a version 1
//! file (or a read or write without it) still loads, its values unknown. Blank lines are skipped; unknown fields are errors, so a
//! misspelt field is caught instead of read as absent.
//!
//! Versions are per `(table, key)` and totally ordered by value. Version 0 is the initial load,
//! installed by no transaction; a committed write installs a version greater than every earlier
//! one of its key. Multi-version protocols record the commit timestamp as the version. A
//! transaction that writes a key twice lists both writes; the greater version is the one it
//! installs, the other is intermediate. `start` and `end` are the times the client saw the
//! transaction begin and learn its outcome, in nanoseconds (virtual on sim).
//!
//! A header with `"from_ns": N` says the history is a suffix of the run: the transactions that
//! ended before N (a benchmark's warm-up) are left out, every later one is in
//! ([`crate::Checker::omit_prefix`] says how such a history is checked).
//!
//! `hash` is [`value_hash`] of the value's bytes: for a read, the bytes the transaction saw;
//! for a write, the bytes it installed. An absent key (a read of a never-inserted or deleted
//! key, a delete's write) has the fixed hash [`ABSENT`].

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter};
use std::path::Path;

/// The `format` field of the header line.
pub const FORMAT: &str = "dtxn-history";
/// The format version this crate writes; it reads this one and every earlier one.
pub const VERSION: u32 = 2;

/// The hash of an absent value: a read of a key that does not exist (never inserted, or
/// deleted), or a delete's write. [`value_hash`] never returns it.
pub const ABSENT: u64 = 0;

/// The hash a history records of a value's bytes: XXH3 (64 bits, seed 0), the same on every
/// run, process and platform. Never [`ABSENT`].
#[inline]
pub fn value_hash(bytes: &[u8]) -> u64 {
    match xxhash_rust::xxh3::xxh3_64(bytes) {
        ABSENT => 1,
        h => h,
    }
}

/// One transaction as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Txn {
    /// Unique in the history.
    pub txn: u64,
    /// The client (coordinator) that ran it.
    pub session: u64,
    pub status: Status,
    /// Client-observed begin, ns.
    pub start: u64,
    /// Client-observed commit acknowledgement or abort, ns.
    pub end: u64,
    #[serde(default)]
    pub reads: Vec<Read>,
    #[serde(default)]
    pub writes: Vec<Write>,
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Committed,
    Aborted,
}

/// A read: the version of `(table, key)` the transaction observed (0: the initial load, which
/// is also what a read of a never-inserted key observes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Read {
    pub table: u32,
    pub key: u64,
    pub version: u64,
    /// [`value_hash`] of the bytes read ([`ABSENT`] for an absent key); `None`: not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<u64>,
}

/// A write: the version of `(table, key)` the transaction installed. A delete installs a
/// version too (a tombstone), which later reads of the absent key observe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Write {
    pub table: u32,
    pub key: u64,
    pub version: u64,
    #[serde(default)]
    pub deleted: bool,
    /// [`value_hash`] of the bytes installed ([`ABSENT`] for a delete); `None`: not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    /// The recording began at this time: transactions that ended before it are left out
    /// (a benchmark's warm-up). See [`crate::Checker::omit_prefix`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from_ns: Option<u64>,
}

/// Why a history file could not be read. Displays as `file:line: what is wrong`.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    // The io::Error is in the message and not a `source`, so that printing the error chain
    // does not say it twice.
    #[error("{file}: {error}")]
    Open { file: String, error: io::Error },
    #[error("{file}:{line}: {error}")]
    Io {
        file: String,
        line: u64,
        error: io::Error,
    },
    #[error("{file}:{line}: {what}")]
    Malformed {
        file: String,
        line: u64,
        what: String,
    },
}

/// Writes a history: the header, then one line per transaction, buffered.
///
/// Serializing goes straight into the buffer, so recording a transaction allocates nothing.
pub struct HistoryWriter<W: io::Write> {
    out: BufWriter<W>,
}

impl HistoryWriter<File> {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::new(File::create(path)?)
    }

    /// Creates (or truncates) `path` for a history that leaves out the transactions that
    /// ended before `from_ns`, and says so in its header.
    pub fn create_from(path: impl AsRef<Path>, from_ns: u64) -> io::Result<Self> {
        Self::with_header(File::create(path)?, Some(from_ns))
    }
}

impl<W: io::Write> HistoryWriter<W> {
    /// Writes the header to `out`.
    pub fn new(out: W) -> io::Result<Self> {
        Self::with_header(out, None)
    }

    fn with_header(out: W, from_ns: Option<u64>) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 16, out);
        serde_json::to_writer(
            &mut out,
            &Header {
                format: FORMAT.into(),
                version: VERSION,
                from_ns,
            },
        )?;
        io::Write::write_all(&mut out, b"\n")?;
        Ok(Self { out })
    }

    pub fn write(&mut self, txn: &Txn) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, txn)?;
        io::Write::write_all(&mut self.out, b"\n")
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> io::Result<W> {
        self.out
            .into_inner()
            .map_err(io::IntoInnerError::into_error)
    }
}

/// Reads a history line by line; yields each transaction with its line number.
pub struct HistoryReader<R> {
    input: R,
    file: String,
    line: u64,
    buf: Vec<u8>,
    seen_txn_or_header: bool,
    from_ns: Option<u64>,
}

impl HistoryReader<BufReader<File>> {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, HistoryError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        match File::open(path) {
            Ok(f) => Ok(Self::new(BufReader::with_capacity(1 << 16, f), file)),
            Err(error) => Err(HistoryError::Open { file, error }),
        }
    }
}

impl<R: BufRead> HistoryReader<R> {
    /// `file` names the input in error messages.
    pub fn new(input: R, file: impl Into<String>) -> Self {
        Self {
            input,
            file: file.into(),
            line: 0,
            buf: Vec::new(),
            seen_txn_or_header: false,
            from_ns: None,
        }
    }

    /// Where the header says the recording began, if it leaves out the transactions that
    /// ended before (known once the first line is read).
    pub fn from_ns(&self) -> Option<u64> {
        self.from_ns
    }

    /// The error for the line last read, for callers that find it wrong themselves.
    pub fn error_here(&self, what: impl Into<String>) -> HistoryError {
        HistoryError::Malformed {
            file: self.file.clone(),
            line: self.line,
            what: what.into(),
        }
    }

    fn next_txn(&mut self) -> Result<Option<(u64, Txn)>, HistoryError> {
        loop {
            self.buf.clear();
            self.line += 1;
            let n = self
                .input
                .read_until(b'\n', &mut self.buf)
                .map_err(|error| HistoryError::Io {
                    file: self.file.clone(),
                    line: self.line,
                    error,
                })?;
            if n == 0 {
                return Ok(None);
            }
            let text = self.buf.trim_ascii();
            if text.is_empty() {
                continue;
            }
            let first = !self.seen_txn_or_header;
            self.seen_txn_or_header = true;
            match serde_json::from_slice::<Txn>(text) {
                Ok(t) => return Ok(Some((self.line, t))),
                Err(e) => match serde_json::from_slice::<Header>(text) {
                    Ok(_) if !first => {
                        return Err(self.error_here("a header is allowed only on the first line"));
                    }
                    Ok(h) if h.format != FORMAT => {
                        return Err(
                            self.error_here(format!("format {:?} is not {FORMAT:?}", h.format))
                        );
                    }
                    Ok(h) if h.version == 0 || h.version > VERSION => {
                        return Err(self.error_here(format!(
                            "history format version {} is not supported (this dtxn reads \
                             versions 1 to {VERSION})",
                            h.version
                        )));
                    }
                    Ok(h) => {
                        self.from_ns = h.from_ns;
                        continue;
                    }
                    Err(_) => return Err(self.error_here(describe(&e))),
                },
            }
        }
    }
}

impl<R: BufRead> Iterator for HistoryReader<R> {
    type Item = Result<(u64, Txn), HistoryError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_txn().transpose()
    }
}

/// serde_json's message without its position (always "line 1" here: we parse one line at a
/// time), with the column kept.
fn describe(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let what = match msg.rsplit_once(" at line ") {
        Some((what, _)) => what.to_owned(),
        None => msg,
    };
    format!("{what} (column {})", e.column())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(id: u64) -> Txn {
        Txn {
            txn: id,
            session: 3,
            status: Status::Committed,
            start: 1234,
            end: 1250,
            reads: vec![Read {
                table: 1,
                key: 42,
                version: 7,
                hash: Some(value_hash(b"old")),
            }],
            writes: vec![Write {
                table: 1,
                key: 42,
                version: 8,
                deleted: false,
                hash: Some(value_hash(b"new")),
            }],
        }
    }

    fn read_all(text: &str) -> Result<Vec<(u64, Txn)>, HistoryError> {
        HistoryReader::new(text.as_bytes(), "h.jsonl").collect()
    }

    fn error(text: &str) -> String {
        read_all(text).unwrap_err().to_string()
    }

    #[test]
    fn writer_output_reads_back() {
        let mut w = HistoryWriter::new(Vec::new()).unwrap();
        w.write(&txn(17)).unwrap();
        w.write(&txn(18)).unwrap();
        let bytes = w.finish().unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(r#"{"format":"dtxn-history","version":2}"#)
        );
        let (old, new) = (value_hash(b"old"), value_hash(b"new"));
        assert_eq!(
            lines.next(),
            Some(
                format!(
                    r#"{{"txn":17,"session":3,"status":"committed","start":1234,"end":1250,"reads":[{{"table":1,"key":42,"version":7,"hash":{old}}}],"writes":[{{"table":1,"key":42,"version":8,"deleted":false,"hash":{new}}}]}}"#
                )
                .as_str()
            )
        );
        let got = read_all(&text).unwrap();
        assert_eq!(got, vec![(2, txn(17)), (3, txn(18))]);
    }

    #[test]
    fn a_history_without_its_prefix_says_where_it_begins() {
        let mut w = HistoryWriter::with_header(Vec::new(), Some(5_000)).unwrap();
        w.write(&txn(17)).unwrap();
        let text = String::from_utf8(w.finish().unwrap()).unwrap();
        assert!(text.starts_with(r#"{"format":"dtxn-history","version":2,"from_ns":5000}"#));
        let mut r = HistoryReader::new(text.as_bytes(), "h.jsonl");
        assert_eq!(r.from_ns(), None, "known once the header is read");
        assert_eq!(r.next().unwrap().unwrap().1, txn(17));
        assert_eq!(r.from_ns(), Some(5_000));
        // A whole history says nothing of it.
        let mut whole =
            HistoryReader::new(&b"{\"format\":\"dtxn-history\",\"version\":2}\n"[..], "h");
        assert!(whole.next().is_none());
        assert_eq!(whole.from_ns(), None);
    }

    #[test]
    fn header_is_optional_and_blank_lines_are_skipped() {
        let text = "\n{\"txn\":1,\"session\":0,\"status\":\"aborted\",\"start\":0,\"end\":1}\n\n";
        let got = read_all(text).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 2);
        assert_eq!(got[0].1.status, Status::Aborted);
        assert!(got[0].1.reads.is_empty() && got[0].1.writes.is_empty());
    }

    #[test]
    fn errors_name_file_and_line() {
        let good = r#"{"txn":1,"session":0,"status":"committed","start":0,"end":1}"#;
        let e = error(&format!("{good}\n{{\"txn\":2,\"session\":0}}\n"));
        assert!(e.starts_with("h.jsonl:2: missing field `status`"), "{e}");
        let e = error(&format!("{good}\nnot json\n"));
        assert!(e.starts_with("h.jsonl:2: expected ident"), "{e}");
        let e = error(r#"{"txn":1,"session":0,"status":"done","start":0,"end":1}"#);
        assert!(e.starts_with("h.jsonl:1: unknown variant `done`"), "{e}");
        let e = error(r#"{"txn":1,"session":0,"status":"committed","start":0,"end":1,"x":2}"#);
        assert!(e.starts_with("h.jsonl:1: unknown field `x`"), "{e}");
        let e = error(r#"{"txn":-1,"session":0,"status":"committed","start":0,"end":1}"#);
        assert!(e.starts_with("h.jsonl:1: invalid value"), "{e}");
    }

    #[test]
    fn header_is_checked() {
        let e = error("{\"format\":\"dtxn-history\",\"version\":3}\n");
        assert!(e.starts_with("h.jsonl:1: history format version 3"), "{e}");
        let e = error("{\"format\":\"dtxn-history\",\"version\":0}\n");
        assert!(e.starts_with("h.jsonl:1: history format version 0"), "{e}");
        let e = error("{\"format\":\"elle\",\"version\":1}\n");
        assert!(e.starts_with("h.jsonl:1: format \"elle\""), "{e}");
        let e = error(
            "{\"format\":\"dtxn-history\",\"version\":1}\n{\"format\":\"dtxn-history\",\"version\":1}\n",
        );
        assert_eq!(e, "h.jsonl:2: a header is allowed only on the first line");
    }

    #[test]
    fn version_1_files_load_without_hashes() {
        let text = "{\"format\":\"dtxn-history\",\"version\":1}\n\
            {\"txn\":1,\"session\":0,\"status\":\"committed\",\"start\":0,\"end\":1,\
            \"reads\":[{\"table\":1,\"key\":2,\"version\":0}],\
            \"writes\":[{\"table\":1,\"key\":2,\"version\":1}]}\n";
        let got = read_all(text).unwrap();
        assert_eq!(got[0].1.reads[0].hash, None);
        assert_eq!(got[0].1.writes[0].hash, None);
        assert_eq!(got[0].1.writes[0].version, 1);
    }

    #[test]
    fn value_hashes_are_fixed_and_never_absent() {
        // XXH3-64 with seed 0: the same in every process (a history checked elsewhere).
        assert_eq!(value_hash(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(value_hash(b"abc"), 0x78af_5f94_892f_3950);
        assert_ne!(value_hash(&[0; 8]), value_hash(&[0; 9]));
        assert_ne!(value_hash(&[]), ABSENT);
    }

    #[test]
    fn unreadable_bytes_are_an_error_not_a_panic() {
        let bytes: &[u8] = b"{\"txn\":1,\"session\":0,\"status\":\"comm\xff\"}\n";
        let r: Result<Vec<_>, _> = HistoryReader::new(bytes, "h.jsonl").collect();
        assert!(r.unwrap_err().to_string().starts_with("h.jsonl:1: "));
    }
}
