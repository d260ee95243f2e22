//! Log slices: one per coordinator on every memory node, for undo (FORD) and op (Motor) logs.
//!
//! A coordinator runs one transaction at a time, so its slice holds one entry, rewritten at the
//! slice's start by each transaction that logs. A recovery agent that finds a dead coordinator
//! reads its slice on any surviving replica and acts on the entry alone:
//!
//! ```text
//! 0  txn id u64 | 8 status u64 (0 empty, 1 pending, 2 committed, 3 aborted)
//! 16 coordinator u32 | 20 items u32 | 24 body bytes u32 | 28 body crc32 u32
//! 32 tag u64 (the protocol's: CALVIN's redo log, the epoch it installs in)
//! 40 unwritten u64 (bit i: item i was logged, fetched for update, and its commit does not
//!    write it; set in the commit's first install batch, outside the crc) | 48..64 reserved
//! 64 body: per item
//!      0 table u32 | 4 flags u32 | 8 offset u64 | 16 image bytes u32 | 20 reserved u32
//!      24 image, padded to 8 bytes
//!    flags: bit 0 insert (an undo item without an old image); bits 1-2 what the image is:
//!    0 the record's old image (FORD's undo log), 1 a record to install (Motor's op log),
//!    2 attribute-bar lines to install (Motor's op log)
//! ```
//!
//! The status word sits alone in the entry's first line, so the coordinator flips it with an
//! 8-byte WRITE. The crc covers the body: an entry torn by a crash mid-WRITE is recognised and
//! ignored (its transaction never reached commit, which waits for the log's completion).

use crate::error::StoreError;

pub const STATUS_OFF: u64 = 8;
/// Where the unwritten-items word is in an entry's first line (see [`unwritten_of`]).
pub const UNWRITTEN_OFF: u64 = 40;

/// The unwritten-items word of the entry at the start of `slice` (0 if too short): bit `i`
/// set, item `i` was logged (fetched for update) but its commit does not write it. Not
/// covered by the crc: the commit sets it once it knows, and a new entry's head clears it.
pub fn unwritten_of(slice: &[u8]) -> u64 {
    let at = UNWRITTEN_OFF as usize;
    slice
        .get(at..at + 8)
        .map_or(0, |w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
}
/// Where the tag word is in an entry's first line.
const TAG_OFF: usize = 32;
const HEAD: usize = 64;
const ITEM_HEAD: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum LogStatus {
    Empty = 0,
    Pending = 1,
    Committed = 2,
    Aborted = 3,
    /// Still pending, and its transaction's commit is decided: written in the batch that makes
    /// it irrevocable (the primaries' round of a two-phase install, or the coalescent one),
    /// where a memory node can fail over. Recovery on a promoted backup, which cannot see
    /// whether the failed primary got that batch, rolls forward only a decided entry.
    Decided = 4,
}

impl LogStatus {
    fn from_word(w: u64) -> Option<LogStatus> {
        Some(match w {
            0 => LogStatus::Empty,
            1 => LogStatus::Pending,
            2 => LogStatus::Committed,
            3 => LogStatus::Aborted,
            4 => LogStatus::Decided,
            _ => return None,
        })
    }

    /// Whether the entry's transaction may still be in flight (recovery settles it).
    pub fn open(self) -> bool {
        matches!(self, LogStatus::Pending | LogStatus::Decided)
    }
}

/// What a log item's image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// The record's bytes before the transaction (FORD's undo log; empty for an insert).
    Undo,
    /// A whole record the committing transaction installs at `offset` (Motor's op log).
    RedoRecord,
    /// Attribute-bar lines the committing transaction installs at `offset` (Motor's op log).
    RedoBar,
}

impl ItemKind {
    fn bits(self) -> u32 {
        match self {
            ItemKind::Undo => 0,
            ItemKind::RedoRecord => 1 << 1,
            ItemKind::RedoBar => 2 << 1,
        }
    }

    fn from_flags(f: u32) -> Option<ItemKind> {
        match f >> 1 & 3 {
            0 => Some(ItemKind::Undo),
            1 => Some(ItemKind::RedoRecord),
            2 => Some(ItemKind::RedoBar),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogItem {
    pub table: u32,
    pub offset: u64,
    /// The item was inserted by the transaction: rolling back means freeing the slot.
    pub insert: bool,
    pub kind: ItemKind,
    /// See [`ItemKind`].
    pub image: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub txn: u64,
    pub coordinator: u32,
    pub status: LogStatus,
    /// A word of the protocol's, in the entry's first line with its id and checksum (so
    /// written with them in one line, atomically): CALVIN's redo log keeps there the epoch
    /// its transaction installs in; 0 for the others.
    pub tag: u64,
    pub items: Vec<LogItem>,
}

/// Bytes an entry with these items takes.
pub fn entry_bytes<'a>(images: impl IntoIterator<Item = &'a [u8]>) -> usize {
    HEAD + images
        .into_iter()
        .map(|i| ITEM_HEAD + i.len().div_ceil(8) * 8)
        .sum::<usize>()
}

/// Appends one item's bytes (descriptor and image) to an entry body: what a coordinator that
/// logs incrementally writes after the body it already wrote.
pub fn encode_item(table: u32, offset: u64, insert: bool, image: &[u8], out: &mut Vec<u8>) {
    encode_item_as(ItemKind::Undo, table, offset, insert, image, out)
}

/// [`encode_item`] for an item of any kind.
pub fn encode_item_as(
    kind: ItemKind,
    table: u32,
    offset: u64,
    insert: bool,
    image: &[u8],
    out: &mut Vec<u8>,
) {
    // Appended piece by piece: zeroing the whole item first and then overwriting it was a
    // memset of every logged image.
    let flags = u32::from(insert) | kind.bits();
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(image.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; ITEM_HEAD - 20]);
    out.extend_from_slice(image);
    out.extend_from_slice(&[0; 8][..image.len().next_multiple_of(8) - image.len()]);
}

/// The entry's first line, for a body of `items` items, `body_bytes` long, with crc32 `crc`.
/// Written after the body (on the same QP: in order, G4), so that a torn append leaves the
/// previous, still valid, entry.
pub fn encode_head(
    txn: u64,
    coordinator: u32,
    status: LogStatus,
    items: u32,
    body_bytes: u32,
    crc: u32,
) -> [u8; HEAD] {
    let mut out = [0u8; HEAD];
    out[0..8].copy_from_slice(&txn.to_le_bytes());
    out[8..16].copy_from_slice(&(status as u64).to_le_bytes());
    out[16..20].copy_from_slice(&coordinator.to_le_bytes());
    out[20..24].copy_from_slice(&items.to_le_bytes());
    out[24..28].copy_from_slice(&body_bytes.to_le_bytes());
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Sets the tag word of an entry's first line (see [`LogEntry::tag`]).
pub fn set_tag(head: &mut [u8; HEAD], tag: u64) {
    head[TAG_OFF..TAG_OFF + 8].copy_from_slice(&tag.to_le_bytes());
}

/// Bytes of an entry's first line; the body starts after it.
pub const HEAD_BYTES: usize = HEAD;

impl LogEntry {
    /// Encodes into `out` (cleared first), checking it fits a slice of `slice_bytes`.
    pub fn encode(&self, slice_bytes: u64, out: &mut Vec<u8>) -> Result<(), StoreError> {
        let need = entry_bytes(self.items.iter().map(|i| i.image.as_slice()));
        if need as u64 > slice_bytes {
            return Err(StoreError::LogFull {
                need,
                have: slice_bytes,
            });
        }
        out.clear();
        out.resize(HEAD, 0);
        for it in &self.items {
            encode_item_as(it.kind, it.table, it.offset, it.insert, &it.image, out);
        }
        let body = (need - HEAD) as u32;
        let crc = crc32fast::hash(&out[HEAD..]);
        let mut head = encode_head(
            self.txn,
            self.coordinator,
            self.status,
            self.items.len() as u32,
            body,
            crc,
        );
        set_tag(&mut head, self.tag);
        out[..HEAD].copy_from_slice(&head);
        Ok(())
    }

    /// Decodes a slice's contents: `Ok(None)` for an empty slice, `Err` for a torn or corrupt
    /// entry (whose transaction cannot have committed).
    pub fn decode(slice: &[u8]) -> Result<Option<LogEntry>, String> {
        let w = |o: usize| u64::from_le_bytes(slice[o..o + 8].try_into().expect("8"));
        let d = |o: usize| u32::from_le_bytes(slice[o..o + 4].try_into().expect("4"));
        if slice.len() < HEAD {
            return Err("slice shorter than an entry header".into());
        }
        let status = LogStatus::from_word(w(8)).ok_or_else(|| format!("status word {}", w(8)))?;
        if status == LogStatus::Empty {
            return Ok(None);
        }
        let body = d(24) as usize;
        if HEAD + body > slice.len() {
            return Err(format!("body of {body} bytes overruns the slice"));
        }
        if crc32fast::hash(&slice[HEAD..HEAD + body]) != d(28) {
            return Err("body checksum mismatch (torn entry)".into());
        }
        let mut items = Vec::new();
        let mut at = HEAD;
        for _ in 0..d(20) {
            if at + ITEM_HEAD > HEAD + body {
                return Err("item header overruns the body".into());
            }
            let len = d(at + 16) as usize;
            if at + ITEM_HEAD + len > HEAD + body {
                return Err("item image overruns the body".into());
            }
            let flags = d(at + 4);
            items.push(LogItem {
                table: d(at),
                insert: flags & 1 == 1,
                kind: ItemKind::from_flags(flags)
                    .ok_or_else(|| format!("item flags {flags:#x}"))?,
                offset: w(at + 8),
                image: slice[at + ITEM_HEAD..at + ITEM_HEAD + len].to_vec(),
            });
            at += ITEM_HEAD + len.div_ceil(8) * 8;
        }
        Ok(Some(LogEntry {
            txn: w(0),
            coordinator: d(16),
            status,
            tag: w(TAG_OFF),
            items,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item() -> impl Strategy<Value = LogItem> {
        (
            any::<u32>(),
            any::<u64>(),
            any::<bool>(),
            0..3u8,
            prop::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(table, offset, insert, kind, image)| LogItem {
                table,
                offset,
                insert,
                kind: [ItemKind::Undo, ItemKind::RedoRecord, ItemKind::RedoBar][kind as usize],
                image: if insert { Vec::new() } else { image },
            })
    }

    proptest! {
        #[test]
        fn entries_round_trip(txn in 1u64.., coord in any::<u32>(), tag in any::<u64>(),
                              items in prop::collection::vec(item(), 0..8), flip in any::<u16>()) {
            let e = LogEntry { txn, coordinator: coord, status: LogStatus::Pending, tag, items };
            let mut b = Vec::new();
            e.encode(1 << 16, &mut b).unwrap();
            b.resize(1 << 16, 0xee);
            prop_assert_eq!(LogEntry::decode(&b), Ok(Some(e.clone())));
            // A flipped body byte is caught by the checksum.
            let body = b[24] as usize | (b[25] as usize) << 8;
            if body > 0 {
                let at = 64 + flip as usize % body;
                b[at] ^= 0x10;
                prop_assert!(LogEntry::decode(&b).is_err());
            }
        }
    }

    #[test]
    fn empty_slices_and_oversized_entries() {
        assert_eq!(LogEntry::decode(&[0u8; 128]), Ok(None));
        let e = LogEntry {
            txn: 1,
            coordinator: 0,
            status: LogStatus::Pending,
            tag: 0,
            items: vec![LogItem {
                table: 1,
                offset: 0,
                insert: false,
                kind: ItemKind::Undo,
                image: vec![0; 100],
            }],
        };
        let err = e.encode(128, &mut Vec::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "log entry of 192 bytes does not fit a 128-byte log slice"
        );
    }
}
