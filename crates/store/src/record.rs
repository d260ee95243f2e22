//! Record formats. A record lives in a 64-byte-aligned slot of a hash bucket.
//!
//! # Single-version record ([`RecordFormat::Single`])
//!
//! ```text
//! line 0   0       8         16    24        28     29        30   32              64
//!          | lock  | version | key | table   | valid| restores | -- | value[0..32]  |
//! line k   0       8                                                             64
//!          | stamp (version, restores) | value[32 + 56(k-1) .. 32 + 56k]         |
//! ```
//!
//! - `lock` is CAS-only (so a holder may release it with a WRITE, G8); 0 means free.
//! - Every further line starts with a copy of the version: the one-sided-sync paper's per-line
//!   scheme (FaRM). A READ whose lines come from two versions is reported [`Torn`] by
//!   [`SingleVersion::decode`]; callers never see stamps.
//! - `valid` is 1 for a live record, 0 for a free or deleted slot.
//! - `restores` counts the roll-backs the record has had (mod 256). A roll-back puts the old
//!   image back *at its old version* (the history knows no other), so the record's next
//!   commit installs the version number of the install it undid, with other bytes: were the
//!   stamps the version alone, a READ taking lines of the undone install and lines of that
//!   next commit would decode as whole. A roll-back therefore writes the image with one more
//!   restore ([`SingleVersion::restored`]), and every later install carries the count on, so
//!   the stamps of the two installs differ. The stamp is `version ^ restores << 56`
//!   ([`stamp`]): the version itself until the first roll-back. (Two stamps of one slot
//!   collide only if their versions differ in the top byte alone: never for counters, and
//!   for nanosecond timestamps only 2^56 ns, two years, apart with every lower bit equal;
//!   and only a READ spanning 256 roll-backs of one record could see a count come round.)
//!
//! # Metadata words
//!
//! A protocol may declare up to [`MAX_META_WORDS`] extra 8-byte words per record (SUNDIAL's
//! wts/rts lease, Scythe's three-word queue lock, WAIT_DIE's timestamp). With `m` words:
//!
//! ```text
//! line 0   0        32            32 + 8m                   64
//!          | header | meta[0..m]  | value[0..32 - 8m]       |
//! line k   | stamp  | value[32 - 8m + 56(k-1) .. 32 - 8m + 56k]     |
//! ```
//!
//! They live in line 0, right after the header, taking 8 bytes each from its value bytes:
//!
//! - A READ of line 0 is atomic (G3), so one READ of [`SingleVersion::head_bytes`] returns the
//!   header and the words as one snapshot: a protocol reads its lease together with the version
//!   it guards, in the same round trip as its validation READ.
//! - Each word is 8-byte aligned (the record is 64-aligned), so a CAS or FAA can target it;
//!   giving each word a whole 8 bytes keeps a memory node's CPU and a NIC from ever updating
//!   the same word (Scythe's lock).
//! - The header keeps its fixed offsets ([`LOCK_OFF`] .. [`VALID_OFF`]): the index scan, the
//!   validation READ and the lock CAS stay the same for every protocol.
//! - The words are not stamped: line 0 carries no stamp (it is read atomically). They are
//!   not part of the value either: [`SingleVersion::encode`] and [`SingleVersion::decode`]
//!   leave them as they are, and only [`SingleVersion::set_meta_word`] (or an atomic verb)
//!   changes them. A WRITE of a whole encoded record carries the writer's copy of the words,
//!   so a protocol whose words change by CAS/FAA under writers WRITEs `0..`[`HEADER_BYTES`]
//!   and [`SingleVersion::value_off`]`..` instead.
//! - The value moves right by `8m` bytes, so a record may take one more line.
//!
//! With no words (every protocol before them) the layout and the codec's code are the ones
//! above.
//!
//! # Copies (RCC's MVCC version slots)
//!
//! A table may keep `copies` (1 to [`MAX_COPIES`]) copies of each record back to back in its
//! slot: copy 0 is the record above, which every mechanism reads, locks and writes as if it
//! were alone; copies 1.. are older versions, each a whole encoded record (its own header,
//! its lines stamped with its own version), written only by a commit that displaces copy 0.
//! The codec sees one copy: [`SingleVersion::bytes`] is a copy's size, and its functions
//! take a longer buffer (a whole slot) by its first copy; an older copy is checked by
//! [`SingleVersion::check`] on its own bytes. What the copies mean is the protocol's
//! (`mvcc.rs`).
//!
//! Motor's multi-version CVTs ([`RecordFormat::Cvt`], [`crate::cvt`]) reuse this encoding: a
//! CVT is a record whose value is its array of version cells.

use serde::{Deserialize, Serialize};

pub const LINE: usize = 64;
/// Value bytes carried by line 0 and by each further line.
pub const HEAD_VALUE_BYTES: usize = 32;
pub const LINE_VALUE_BYTES: usize = 56;
/// Where the value bytes start in line 0 (after the header) and in a further line (after
/// its stamp).
const HEAD_VALUE_OFF: usize = LINE - HEAD_VALUE_BYTES;
const LINE_VALUE_OFF: usize = LINE - LINE_VALUE_BYTES;

/// The bytes of line 0 that hold a record's header (lock to valid): all that a validation
/// READ fetches.
pub const HEADER_BYTES: usize = 32;
const _: () = assert!((RESTORES_OFF as usize) < HEADER_BYTES && HEADER_BYTES <= LINE);

pub const LOCK_OFF: u64 = 0;
pub const VERSION_OFF: u64 = 8;
pub const KEY_OFF: u64 = 16;
pub const TABLE_OFF: u64 = 24;
pub const VALID_OFF: u64 = 28;
pub const RESTORES_OFF: u64 = 29;

/// The most copies of a record a slot may hold.
pub const MAX_COPIES: usize = 8;

/// The most metadata words a record may have: all of line 0 after the header.
pub const MAX_META_WORDS: usize = (LINE - HEADER_BYTES) / 8;
/// Where metadata word 0 starts in a record (the words follow the header in line 0).
pub const META_OFF: usize = HEADER_BYTES;
const _: () = assert!(META_OFF == HEAD_VALUE_OFF && META_OFF.is_multiple_of(8));

/// A multi-line READ mixed lines of two versions of a record (or caught it mid-write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("torn read: line {line} carries stamp {stamp}, line 0 version {version}")]
pub struct Torn {
    pub line: usize,
    pub version: u64,
    /// The line's stamp (the version it was written at, until the record's first roll-back:
    /// see [`stamp`]).
    pub stamp: u64,
}

/// How a table's records are laid out. Stored in the catalog as a one-byte code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordFormat {
    /// One version in place, a version stamp per cache line.
    Single,
    /// Motor's consecutive version tuples (see [`crate::cvt`]).
    Cvt,
}

impl RecordFormat {
    pub fn code(self) -> u8 {
        match self {
            RecordFormat::Single => 1,
            RecordFormat::Cvt => 2,
        }
    }

    pub fn from_code(c: u8) -> Option<RecordFormat> {
        match c {
            1 => Some(RecordFormat::Single),
            2 => Some(RecordFormat::Cvt),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RecordFormat::Single => "single-version",
            RecordFormat::Cvt => "multi-version (CVT)",
        }
    }

    /// Bytes a single-version record with `value_size` value bytes and no metadata words
    /// occupies (a multiple of 64; with words see [`SingleVersion::with_meta`]); for CVTs see
    /// [`crate::cvt::cvt_bytes`].
    pub fn record_bytes(self, value_size: usize) -> usize {
        SingleVersion::new(value_size).bytes()
    }
}

/// The header fields of a decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHeader {
    pub lock: u64,
    pub version: u64,
    pub key: u64,
    pub table: u32,
    pub valid: bool,
    /// Roll-backs the record has had, mod 256 (see the module's doc): part of its stamps.
    pub restores: u8,
}

/// The stamp of every line after line 0 of a record at `version` with `restores`.
#[inline]
pub fn stamp(version: u64, restores: u8) -> u64 {
    version ^ u64::from(restores) << 56
}

/// Encoder and decoder of single-version records of one value size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SingleVersion {
    value_size: usize,
    lines: usize,
    /// Metadata words after the header, 0 to [`MAX_META_WORDS`].
    meta: usize,
}

fn word(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn put(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Copies a record's value out of its lines (`rec`, whole lines, holds all of `value`):
/// line 0's bytes after the header and `meta` words, then 56 after each further line's stamp.
/// Whole lines are copied as fixed-size pieces, which the compiler inlines (a memcpy call per
/// line, as before, cost 2.7% of a TPC-C transaction's instructions). Always inlined, so that
/// the callers' `meta` = 0 path is today's constant-offset code.
#[inline(always)]
fn gather(rec: &[u8], value: &mut [u8], meta: usize) {
    let (head_off, head_bytes) = (HEAD_VALUE_OFF + 8 * meta, HEAD_VALUE_BYTES - 8 * meta);
    let head = value.len().min(head_bytes);
    let (first, rest) = value.split_at_mut(head);
    first.copy_from_slice(&rec[head_off..head_off + head]);
    let mut lines = rec[LINE..].chunks_exact(LINE);
    let mut outs = rest.chunks_exact_mut(LINE_VALUE_BYTES);
    // `outs` first: a zip stops without taking a line once the whole pieces are done.
    for (out, line) in (&mut outs).zip(&mut lines) {
        out.copy_from_slice(&line[LINE_VALUE_OFF..]);
    }
    let tail = outs.into_remainder();
    if let Some(line) = lines.next().filter(|_| !tail.is_empty()) {
        tail.copy_from_slice(&line[LINE_VALUE_OFF..LINE_VALUE_OFF + tail.len()]);
    }
}

/// [`gather`] for records with metadata words, out of line so that it adds no code to the
/// hot path of records without.
#[inline(never)]
fn gather_meta(rec: &[u8], value: &mut [u8], meta: usize) {
    gather(rec, value, meta)
}

/// [`gather`]'s inverse: `value` into the value bytes of the lines `rec`.
#[inline(always)]
fn scatter(value: &[u8], rec: &mut [u8], meta: usize) {
    let (head_off, head_bytes) = (HEAD_VALUE_OFF + 8 * meta, HEAD_VALUE_BYTES - 8 * meta);
    let head = value.len().min(head_bytes);
    let (first, rest) = value.split_at(head);
    rec[head_off..head_off + head].copy_from_slice(first);
    let mut lines = rec[LINE..].chunks_exact_mut(LINE);
    let mut ins = rest.chunks_exact(LINE_VALUE_BYTES);
    for (piece, line) in (&mut ins).zip(&mut lines) {
        line[LINE_VALUE_OFF..].copy_from_slice(piece);
    }
    let tail = ins.remainder();
    if let Some(line) = lines.next().filter(|_| !tail.is_empty()) {
        line[LINE_VALUE_OFF..LINE_VALUE_OFF + tail.len()].copy_from_slice(tail);
    }
}

/// [`scatter`] for records with metadata words (see [`gather_meta`]).
#[inline(never)]
fn scatter_meta(value: &[u8], rec: &mut [u8], meta: usize) {
    scatter(value, rec, meta)
}

impl SingleVersion {
    /// The codec of records without metadata words.
    #[inline]
    pub fn new(value_size: usize) -> SingleVersion {
        let rest = value_size.saturating_sub(HEAD_VALUE_BYTES);
        SingleVersion {
            value_size,
            lines: 1 + rest.div_ceil(LINE_VALUE_BYTES),
            meta: 0,
        }
    }

    /// The codec of records with `meta_words` metadata words (at most [`MAX_META_WORDS`]).
    #[inline]
    pub fn with_meta(value_size: usize, meta_words: u8) -> SingleVersion {
        let meta = usize::from(meta_words);
        assert!(
            meta <= MAX_META_WORDS,
            "{meta} metadata words, at most {MAX_META_WORDS}"
        );
        if meta == 0 {
            return SingleVersion::new(value_size);
        }
        let rest = value_size.saturating_sub(HEAD_VALUE_BYTES - 8 * meta);
        SingleVersion {
            value_size,
            lines: 1 + rest.div_ceil(LINE_VALUE_BYTES),
            meta,
        }
    }

    /// Metadata words per record.
    pub fn meta_words(&self) -> usize {
        self.meta
    }

    /// The byte offset of metadata word `i` within a record (8-aligned, in line 0).
    pub fn meta_word_off(&self, i: usize) -> usize {
        assert!(i < self.meta, "metadata word {i} of {}", self.meta);
        META_OFF + 8 * i
    }

    /// Metadata word `i` of the record `rec` (line 0 suffices).
    pub fn meta_word(&self, rec: &[u8], i: usize) -> u64 {
        word(rec, self.meta_word_off(i))
    }

    /// Sets metadata word `i` of the encoded record `rec`.
    pub fn set_meta_word(&self, rec: &mut [u8], i: usize, v: u64) {
        put(rec, self.meta_word_off(i), v);
    }

    /// The bytes of line 0 holding the header and the metadata words: what a READ needs to see
    /// both at once.
    pub fn head_bytes(&self) -> usize {
        HEADER_BYTES + 8 * self.meta
    }

    /// Where the value starts in a record (line 0, after the header and the metadata words).
    pub fn value_off(&self) -> usize {
        HEAD_VALUE_OFF + 8 * self.meta
    }

    /// Value bytes that line 0 carries.
    fn head_value_bytes(&self) -> usize {
        HEAD_VALUE_BYTES - 8 * self.meta
    }

    pub fn value_size(&self) -> usize {
        self.value_size
    }

    /// Record size in bytes: whole cache lines.
    pub fn bytes(&self) -> usize {
        self.lines * LINE
    }

    /// The line that holds value byte `v`.
    fn line_of(&self, v: usize) -> usize {
        match v.checked_sub(self.head_value_bytes()) {
            None => 0,
            Some(rest) => 1 + rest / LINE_VALUE_BYTES,
        }
    }

    /// The pieces of value bytes `from..from + len`: (offset in the record, offset from
    /// `from`, length).
    fn pieces_of(&self, from: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize)> {
        let to = from + len;
        assert!(
            to <= self.value_size,
            "value bytes {from}..{to} of {}",
            self.value_size
        );
        // Only the lines that hold the range: a CVT's cells take a line or two of many.
        let lines = match len {
            0 => 0..0,
            _ => self.line_of(from)..self.line_of(to - 1) + 1,
        };
        let (head_off, head_bytes) = (self.value_off(), self.head_value_bytes());
        lines.map(move |l| {
            let (rec, val, n) = match l {
                0 => (head_off, 0, head_bytes),
                _ => (
                    l * LINE + LINE_VALUE_OFF,
                    head_bytes + (l - 1) * LINE_VALUE_BYTES,
                    LINE_VALUE_BYTES,
                ),
            };
            let (s, e) = (val.max(from), (val + n).min(to));
            (rec + s - val, s - from, e - s)
        })
    }

    /// Writes the whole record (`lock` included) into `out` (exactly [`Self::bytes`] long),
    /// except its metadata words: they keep what `out` held (a record READ, changed and
    /// encoded again keeps its words; a caller reusing a buffer across records sets them).
    pub fn encode(&self, h: &RecordHeader, value: &[u8], out: &mut [u8]) {
        assert_eq!(value.len(), self.value_size, "value size of the table");
        self.encode_header(h, out);
        if self.meta == 0 {
            scatter(value, out, 0);
        } else {
            scatter_meta(value, out, self.meta);
        }
    }

    /// [`Self::encode`] with a zero value: the header and the stamps, for a caller that writes
    /// the value in parts with [`Self::write_value`] (without assembling it first). The
    /// metadata words keep what `out` held, as with [`Self::encode`].
    /// A longer `out` (a slot of several copies) gets the record as its first copy and zeros
    /// after it: older copies of nothing.
    pub fn encode_header(&self, h: &RecordHeader, out: &mut [u8]) {
        assert!(out.len() >= self.bytes(), "a record's bytes");
        let (out, rest) = out.split_at_mut(self.bytes());
        rest.fill(0);
        if self.meta == 0 {
            out.fill(0);
        } else {
            out[..META_OFF].fill(0);
            out[self.value_off()..].fill(0);
        }
        put(out, LOCK_OFF as usize, h.lock);
        put(out, VERSION_OFF as usize, h.version);
        put(out, KEY_OFF as usize, h.key);
        out[TABLE_OFF as usize..TABLE_OFF as usize + 4].copy_from_slice(&h.table.to_le_bytes());
        out[VALID_OFF as usize] = u8::from(h.valid);
        out[RESTORES_OFF as usize] = h.restores;
        for l in 1..self.lines {
            put(out, l * LINE, stamp(h.version, h.restores));
        }
        debug_assert_eq!(self.header(out), *h);
    }

    /// Writes `bytes` as value bytes `from..from + bytes.len()` of the encoded record `out`.
    pub fn write_value(&self, out: &mut [u8], from: usize, bytes: &[u8]) {
        for (rec, at, len) in self.pieces_of(from, bytes.len()) {
            out[rec..rec + len].copy_from_slice(&bytes[at..at + len]);
        }
    }

    /// Sets the lock word of an encoded record (`encode` with another `h.lock`, minus the rest).
    pub fn set_lock(rec: &mut [u8], lock: u64) {
        put(rec, LOCK_OFF as usize, lock);
    }

    /// The header of line 0 alone (a READ of the first line is never torn).
    pub fn header(&self, rec: &[u8]) -> RecordHeader {
        RecordHeader {
            lock: word(rec, LOCK_OFF as usize),
            version: word(rec, VERSION_OFF as usize),
            key: word(rec, KEY_OFF as usize),
            table: u32::from_le_bytes(
                rec[TABLE_OFF as usize..TABLE_OFF as usize + 4]
                    .try_into()
                    .expect("4 bytes"),
            ),
            valid: rec[VALID_OFF as usize] != 0,
            restores: rec[RESTORES_OFF as usize],
        }
    }

    /// A roll-back's record, from the undo image `rec` (a whole record, or a slot whose copy
    /// 0 it is): the same header and value with one more restore, its stamps to match, so
    /// that the record's next install is never stamped like the install the roll-back undid.
    pub fn restored(&self, rec: &mut [u8]) {
        assert!(rec.len() >= self.bytes(), "a record's bytes");
        let mut h = self.header(rec);
        h.restores = h.restores.wrapping_add(1);
        rec[RESTORES_OFF as usize] = h.restores;
        for l in 1..self.lines {
            put(rec, l * LINE, stamp(h.version, h.restores));
        }
    }

    /// Decodes without checking the per-line stamps: what a protocol that trusts one READ (the
    /// published FORD's invisible bit) does. Only for negative controls in tests, which must
    /// show that such a reader accepts torn records.
    #[doc(hidden)]
    pub fn decode_unchecked(&self, rec: &[u8], value: &mut [u8]) -> RecordHeader {
        self.gather(rec, value);
        self.header(rec)
    }

    /// Decodes a whole record read with one READ: its header, and its value into `value`
    /// (exactly the table's value size), or [`Torn`] if its lines disagree on the version.
    pub fn decode(&self, rec: &[u8], value: &mut [u8]) -> Result<RecordHeader, Torn> {
        assert_eq!(value.len(), self.value_size);
        let h = self.check(rec)?;
        self.gather(rec, value);
        Ok(h)
    }

    fn gather(&self, rec: &[u8], value: &mut [u8]) {
        if self.meta == 0 {
            gather(rec, value, 0);
        } else {
            gather_meta(rec, value, self.meta);
        }
    }

    /// [`Self::decode`] without the value: the header, or [`Torn`] if the record's lines
    /// disagree on the version. The value is then read in parts with [`Self::read_value`].
    /// (A longer `rec`, a slot of several copies: its first copy.)
    pub fn check(&self, rec: &[u8]) -> Result<RecordHeader, Torn> {
        assert!(rec.len() >= self.bytes(), "a record's bytes");
        let h = self.header(rec);
        let want = stamp(h.version, h.restores);
        for line in 1..self.lines {
            let stamp = word(rec, line * LINE);
            if stamp != want {
                return Err(Torn {
                    line,
                    version: h.version,
                    stamp,
                });
            }
        }
        Ok(h)
    }

    /// Copies value bytes `from..from + out.len()` of the record `rec` into `out` (the stamps
    /// are [`Self::check`]'s business).
    pub fn read_value(&self, rec: &[u8], from: usize, out: &mut [u8]) {
        for (r, at, len) in self.pieces_of(from, out.len()) {
            out[at..at + len].copy_from_slice(&rec[r..r + len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hdr(version: u64) -> RecordHeader {
        RecordHeader {
            lock: 0,
            version,
            key: 42,
            table: 3,
            valid: true,
            restores: 0,
        }
    }

    #[test]
    fn sizes_are_whole_lines() {
        assert_eq!(SingleVersion::new(0).bytes(), 64);
        assert_eq!(SingleVersion::new(8).bytes(), 64);
        assert_eq!(SingleVersion::new(32).bytes(), 64);
        assert_eq!(SingleVersion::new(33).bytes(), 128);
        assert_eq!(SingleVersion::new(88).bytes(), 128);
        assert_eq!(SingleVersion::new(89).bytes(), 192);
        // FORD's TPC-C customer (664 B): 32 + 12 x 56 bytes of value, 13 lines.
        assert_eq!(SingleVersion::new(664).bytes(), 832);
    }

    #[test]
    fn meta_words_take_line_0_value_bytes() {
        assert_eq!(SingleVersion::with_meta(100, 0), SingleVersion::new(100));
        assert_eq!(SingleVersion::with_meta(24, 1).bytes(), 64);
        assert_eq!(SingleVersion::with_meta(25, 1).bytes(), 128);
        assert_eq!(SingleVersion::with_meta(0, 4).bytes(), 64);
        assert_eq!(SingleVersion::with_meta(1, 4).bytes(), 128);
        assert_eq!(SingleVersion::with_meta(56, 4).bytes(), 128);
        // SUNDIAL's lease: TPC-C's stock (312 B, 6 full lines) grows a line; its customer
        // (664 B) has room in its last line.
        assert_eq!(SingleVersion::with_meta(312, 0).bytes(), 384);
        assert_eq!(SingleVersion::with_meta(312, 2).bytes(), 448);
        assert_eq!(SingleVersion::with_meta(664, 2).bytes(), 832);
        let f = SingleVersion::with_meta(8, 3);
        assert_eq!(
            (0..3).map(|i| f.meta_word_off(i)).collect::<Vec<_>>(),
            [32, 40, 48]
        );
        assert_eq!((f.head_bytes(), f.value_off()), (56, 56));
        let plain = SingleVersion::new(8);
        assert_eq!((plain.head_bytes(), plain.value_off()), (HEADER_BYTES, 32));
    }

    #[test]
    fn copies_are_each_checked_by_their_own_stamps() {
        let f = SingleVersion::with_meta(100, 1);
        let b = f.bytes();
        let mut slot = vec![0u8; 3 * b];
        f.encode(&hdr(9), &[1; 100], &mut slot);
        // Encoding into a slot zeroes the older copies: empty.
        assert!(slot[b..].iter().all(|&x| x == 0));
        f.encode(&hdr(5), &[2; 100], &mut slot[b..2 * b]);
        let mut out = [0u8; 100];
        assert_eq!(f.decode(&slot[b..2 * b], &mut out), Ok(hdr(5)));
        assert_eq!(out, [2; 100]);
        // Copy 1's second line from another version: torn, though copy 0 (the slot's first
        // copy, what the codec sees of a whole slot) is whole.
        slot[b + LINE..b + LINE + 8].copy_from_slice(&7u64.to_le_bytes());
        let t = f.check(&slot[b..2 * b]).unwrap_err();
        assert_eq!((t.line, t.version, t.stamp), (1, 5, 7));
        assert_eq!(f.check(&slot), Ok(hdr(9)));
        assert_eq!(f.decode(&slot, &mut out), Ok(hdr(9)));
        assert_eq!(out, [1; 100]);
    }

    #[test]
    #[should_panic(expected = "at most 4")]
    fn more_than_four_meta_words_are_refused() {
        SingleVersion::with_meta(8, 5);
    }

    proptest! {
        /// Any value size and 0 to 4 metadata words: the value and the header round-trip, the
        /// words stay where they are documented, untouched by encode and decode, and the
        /// value never overlaps them.
        #[test]
        fn meta_words_survive_encode_and_decode(value in prop::collection::vec(any::<u8>(), 0..700),
                                                meta in 0u8..=4, words in any::<[u64; 4]>(),
                                                version in any::<u64>(), key in any::<u64>(),
                                                lock in any::<u64>(), table in any::<u32>(),
                                                valid in any::<bool>()) {
            let f = SingleVersion::with_meta(value.len(), meta);
            let m = usize::from(meta);
            prop_assert_eq!(f.meta_words(), m);
            prop_assert!(f.bytes() >= 64 && f.bytes().is_multiple_of(64));
            // As few lines as hold the value.
            let fits = |lines: usize| value.len() <= LINE - f.value_off() + (lines - 1) * LINE_VALUE_BYTES;
            let lines = f.bytes() / LINE;
            prop_assert!(fits(lines) && (lines == 1 || !fits(lines - 1)));
            let h = RecordHeader { lock, version, key, table, valid, restores: 0 };
            let mut rec = vec![0u8; f.bytes()];
            for (i, &w) in words.iter().enumerate().take(m) {
                f.set_meta_word(&mut rec, i, w);
            }
            f.encode(&h, &value, &mut rec);
            for (i, &w) in words.iter().enumerate().take(m) {
                prop_assert_eq!(f.meta_word_off(i), META_OFF + 8 * i);
                prop_assert_eq!(f.meta_word(&rec, i), w);
                prop_assert_eq!(word(&rec, META_OFF + 8 * i), w);
            }
            let mut out = vec![0u8; value.len()];
            prop_assert_eq!(f.decode(&rec, &mut out), Ok(h));
            prop_assert_eq!(&out, &value);
            prop_assert_eq!(f.header(&rec), h);
            // Changing a word changes neither the value nor the header.
            for (i, &w) in words.iter().enumerate().take(m) {
                f.set_meta_word(&mut rec, i, !w);
            }
            prop_assert_eq!(f.decode(&rec, &mut out), Ok(h));
            prop_assert_eq!(&out, &value);
            // Encoding over the record again keeps the words.
            f.encode(&RecordHeader { version: version.wrapping_add(1), ..h }, &value, &mut rec);
            for (i, &w) in words.iter().enumerate().take(m) {
                prop_assert_eq!(f.meta_word(&rec, i), !w);
            }
            // A record's words are in line 0, so a READ of head_bytes holds them.
            prop_assert!(f.head_bytes() <= LINE && f.value_off() == f.head_bytes());
        }

        /// Value parts land where the whole value does, with metadata words too.
        #[test]
        fn parts_are_the_whole_with_meta(value in prop::collection::vec(any::<u8>(), 0..400),
                                         meta in 0u8..=4,
                                         cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4)) {
            let f = SingleVersion::with_meta(value.len(), meta);
            let h = hdr(7);
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(value.len() + 1)).collect();
            at.push(0);
            at.push(value.len());
            at.sort_unstable();
            let (mut whole, mut parts) = (vec![0u8; f.bytes()], vec![0u8; f.bytes()]);
            f.encode(&h, &value, &mut whole);
            f.encode_header(&h, &mut parts);
            for w in at.windows(2) {
                f.write_value(&mut parts, w[0], &value[w[0]..w[1]]);
            }
            prop_assert_eq!(&parts, &whole);
            let mut out = vec![0u8; value.len()];
            for w in at.windows(2) {
                f.read_value(&parts, w[0], &mut out[w[0]..w[1]]);
            }
            prop_assert_eq!(out, value);
        }

        /// With metadata words, any mix of lines from two versions is still `Torn`.
        #[test]
        fn torn_records_with_meta_words_are_detected(size in 1usize..700, meta in 1u8..=4,
                                                     v1 in any::<u64>(), delta in 1u64..1000,
                                                     mask in any::<u64>(), a in any::<u8>(),
                                                     b in any::<u8>()) {
            let f = SingleVersion::with_meta(size, meta);
            let lines = f.bytes() / LINE;
            let v2 = v1.wrapping_add(delta);
            let (mut r1, mut r2) = (vec![0u8; f.bytes()], vec![0u8; f.bytes()]);
            f.encode(&hdr(v1), &vec![a; size], &mut r1);
            f.encode(&hdr(v2), &vec![b; size], &mut r2);
            let pick: Vec<bool> = (0..lines).map(|l| mask >> (l % 64) & 1 == 1).collect();
            let mixed: Vec<u8> = (0..lines)
                .flat_map(|l| if pick[l] { &r2[l * 64..l * 64 + 64] } else { &r1[l * 64..l * 64 + 64] })
                .copied()
                .collect();
            let mut out = vec![0u8; size];
            let uniform = pick.iter().all(|&p| p == pick[0]);
            match f.decode(&mixed, &mut out) {
                Ok(h) => {
                    prop_assert!(uniform, "a mix decoded as valid");
                    prop_assert_eq!(h.version, if pick[0] { v2 } else { v1 });
                    prop_assert_eq!(out, vec![if pick[0] { b } else { a }; size]);
                }
                Err(t) => {
                    prop_assert!(!uniform);
                    prop_assert!(t.line > 0 && pick[t.line] != pick[0]);
                }
            }
        }

        #[test]
        fn encode_decode_round_trips(value in prop::collection::vec(any::<u8>(), 0..700),
                                     version in any::<u64>(), key in any::<u64>(),
                                     lock in any::<u64>(), table in any::<u32>(),
                                     valid in any::<bool>(), restores in any::<u8>()) {
            let f = SingleVersion::new(value.len());
            let h = RecordHeader { lock, version, key, table, valid, restores };
            let mut rec = vec![0u8; f.bytes()];
            f.encode(&h, &value, &mut rec);
            let mut out = vec![0u8; value.len()];
            prop_assert_eq!(f.decode(&rec, &mut out), Ok(h));
            prop_assert_eq!(out, value);
        }

        /// Writing and reading a value in parts is encoding and decoding it whole.
        #[test]
        fn parts_are_the_whole(value in prop::collection::vec(any::<u8>(), 0..400),
                               cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4)) {
            let f = SingleVersion::new(value.len());
            let h = hdr(7);
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(value.len() + 1)).collect();
            at.push(0);
            at.push(value.len());
            at.sort_unstable();
            let (mut whole, mut parts) = (vec![0u8; f.bytes()], vec![0u8; f.bytes()]);
            f.encode(&h, &value, &mut whole);
            f.encode_header(&h, &mut parts);
            for w in at.windows(2) {
                f.write_value(&mut parts, w[0], &value[w[0]..w[1]]);
            }
            prop_assert_eq!(&parts, &whole);
            prop_assert_eq!(f.check(&parts), Ok(h));
            let mut out = vec![0u8; value.len()];
            for w in at.windows(2) {
                f.read_value(&parts, w[0], &mut out[w[0]..w[1]]);
            }
            prop_assert_eq!(out, value);
        }

        /// Setting the lock word of an encoded record is encoding it with that lock.
        #[test]
        fn set_lock_is_encode_with_that_lock(value in prop::collection::vec(any::<u8>(), 0..300),
                                             lock in any::<u64>(), other in any::<u64>()) {
            let f = SingleVersion::new(value.len());
            let h = hdr(7);
            let (mut a, mut b) = (vec![0u8; f.bytes()], vec![0u8; f.bytes()]);
            f.encode(&RecordHeader { lock: other, ..h }, &value, &mut a);
            SingleVersion::set_lock(&mut a, lock);
            f.encode(&RecordHeader { lock, ..h }, &value, &mut b);
            prop_assert_eq!(a, b);
        }

        /// A roll-back's record keeps the image's header and value, one restore up; the
        /// record's next install, at the version of the install the roll-back undid (with the
        /// count carried on), never decodes whole from a mix of its lines and the undone
        /// install's. (Stamped by the version alone, every mix decoded as whole.)
        #[test]
        fn a_roll_backs_next_install_is_stamped_apart_from_the_undone_one(
            size in 33usize..700, meta in 0u8..=2, v in 0u64..1 << 40, restores in any::<u8>(),
            mask in any::<u64>(), a in any::<u8>(), b in any::<u8>(), c in any::<u8>()) {
            let f = SingleVersion::with_meta(size, meta);
            let lines = f.bytes() / LINE;
            prop_assume!(lines > 1);
            let at = |version, restores| RecordHeader { version, restores, ..hdr(0) };
            let (mut image, mut undone, mut next) =
                (vec![0u8; f.bytes()], vec![0u8; f.bytes()], vec![0u8; f.bytes()]);
            f.encode(&at(v, restores), &vec![c; size], &mut image);
            f.encode(&at(v + 1, restores), &vec![a; size], &mut undone);
            let mut back = image.clone();
            f.restored(&mut back);
            let mut out = vec![0u8; size];
            let h = f.decode(&back, &mut out).unwrap();
            prop_assert_eq!(h, at(v, restores.wrapping_add(1)));
            prop_assert_eq!(&out, &vec![c; size]);
            f.encode(&at(v + 1, h.restores), &vec![b; size], &mut next);
            let pick: Vec<bool> = (0..lines).map(|l| mask >> (l % 64) & 1 == 1).collect();
            prop_assume!(!pick.iter().all(|&p| p == pick[0]));
            let mixed: Vec<u8> = (0..lines)
                .flat_map(|l| if pick[l] { &next[l * 64..l * 64 + 64] } else { &undone[l * 64..l * 64 + 64] })
                .copied()
                .collect();
            prop_assert!(f.decode(&mixed, &mut out).is_err(), "a mix decoded as whole");
        }

        /// Any mix of lines from two versions is `Torn`, never a valid decode.
        #[test]
        fn any_mix_of_two_versions_is_torn(size in 33usize..700, v1 in any::<u64>(),
                                           delta in 1u64..1000, mask in any::<u64>(),
                                           a in any::<u8>(), b in any::<u8>()) {
            let f = SingleVersion::new(size);
            let lines = f.bytes() / LINE;
            let v2 = v1.wrapping_add(delta);
            let (mut r1, mut r2) = (vec![0u8; f.bytes()], vec![0u8; f.bytes()]);
            f.encode(&hdr(v1), &vec![a; size], &mut r1);
            f.encode(&hdr(v2), &vec![b; size], &mut r2);
            let pick: Vec<bool> = (0..lines).map(|l| mask >> (l % 64) & 1 == 1).collect();
            let mixed: Vec<u8> = (0..lines)
                .flat_map(|l| if pick[l] { &r2[l * 64..l * 64 + 64] } else { &r1[l * 64..l * 64 + 64] })
                .copied()
                .collect();
            let mut out = vec![0u8; size];
            let uniform = pick.iter().all(|&p| p == pick[0]);
            match f.decode(&mixed, &mut out) {
                Ok(h) => {
                    prop_assert!(uniform, "a mix decoded as valid");
                    prop_assert_eq!(h.version, if pick[0] { v2 } else { v1 });
                }
                Err(_) => prop_assert!(!uniform),
            }
        }
    }
}
