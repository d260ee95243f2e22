//! Motor's multi-version records: the consecutive version tuple (CVT) with the newest value,
//! and the attribute bar of pre-images.
//!
//! # Where things live
//!
//! A multi-version table's hash slot holds a CVT: the version cells *and* the newest value
//! (Motor's Vpkg), as one stamped record, so one READ fetches both consistently and a bucket
//! READ brings the values with the versions. Pre-images of up to 8 bytes live in their Vcell;
//! longer ones in the slot's *attribute bar*, in a region after the table's overflow area, at
//! `values_off + i * value_stride` for slot number `i` (bucket-major over home and overflow
//! buckets). Motor keeps the Vpkg apart, behind a VpkgPtr, and allocates bars from
//! per-coordinator delta spaces at the first update, behind an AttrBarPtr; dtxn computes the
//! bar's address from the slot instead: no pointer to publish, no allocator state for a
//! recovering coordinator to rebuild, and every replica identical by construction. The price
//! is the bars of empty slots and of records never updated (`dtxn layout` shows it; tables
//! declared never updated, or updated by 8 bytes at most, get no bar).
//!
//! ```text
//! CVT        a single-version record (crate::record) whose value is Vcells ++ newest value:
//!            line 0: lock | stamp | key | table | valid(occupied) | Vcells... | value...
//!            the stamp is the commit timestamp of the last write, on every line
//! Vcell      0 version u64 | 8 bitmap u16 | 10 bar start line u8 | 11 flags u8
//!            | 12 inline pre-images [u8; 8]   (20 bytes)
//! value      the value of the newest version that has one (a delete leaves it)
//! bar        bar_lines lines: 0 stamp u64 | 8..64 pre-image bytes
//! ```
//!
//! # Why stamps instead of Motor's one-byte anchors
//!
//! Motor detects a torn or newer Vpkg with a start and an end anchor, and orders its reads
//! (Vcell, then deltas, then Vpkg) so that a seqlock argument holds. Under the fabric contract
//! neither holds: the lines of one READ are fetched in any order (G2/G3, so the middle of a
//! Vpkg can change while both anchors match: the sync paper's broken "bookend" scheme), and
//! two READs are not ordered (G5). dtxn therefore stamps every line of the CVT and of each
//! pre-image chunk with the commit timestamp that wrote it. Timestamps are unique, so a line
//! carrying the expected stamp holds exactly the expected bytes, whatever the order in which
//! lines were fetched.
//!
//! # Versions
//!
//! A version is its writer's commit timestamp. The valid Vcells are always a newest-first
//! suffix of the record's history (a cell is invalidated only with every older one), so a
//! version can be rebuilt from the newest value and the pre-images of every newer version. A
//! delete writes
//! a tombstone version, so older versions never reappear; an insert over a tombstone drops the
//! versions before the tombstone; an insert into a fresh slot is marked `FRESH`: before it, the
//! key never existed.

use crate::index::TableInfo;
use crate::record::{RecordHeader, SingleVersion, Torn, LINE};
use arrayvec::ArrayVec;
use std::sync::Arc;

pub const VCELL_BYTES: usize = 20;
/// Pre-image bytes a Vcell holds itself.
pub const INLINE_BYTES: usize = 8;
/// Vcells per CVT: 1 to this.
pub const MAX_VNUM: usize = 15;
/// Attributes a multi-version table may declare (the bitmap is a u16).
pub const MAX_ATTRS: usize = 16;
/// Lines of an attribute bar (the start line is a u8).
pub const MAX_BAR_LINES: u32 = 255;
/// Pre-image bytes per bar line (after its stamp).
pub const BAR_LINE_DATA: usize = LINE - 8;

pub const VALID: u8 = 1;
/// A delete: the key is absent from this version on.
pub const TOMBSTONE: u8 = 2;
/// The first version of the key in this slot: before it the key was absent.
pub const CREATED: u8 = 4;
/// Created in a slot the key never held: absent before it, at version 0.
pub const FRESH: u8 = 8;
/// Its pre-images are in the bar at `start`.
pub const CHUNK: u8 = 16;
/// Its pre-images are in the Vcell (`inline`). Neither this nor `CHUNK` with a non-empty
/// bitmap: the pre-images did not fit, and no older version is kept.
pub const INLINE: u8 = 32;

/// The multi-version geometry of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MvInfo {
    pub vnum: u8,
    pub bar_lines: u32,
    pub values_off: u64,
    pub value_stride: u64,
    /// End offset (exclusive) of each attribute in the value; the last is the value size.
    /// Shared: every codec made for the table holds it, and Motor makes one per item it
    /// touches.
    pub attr_ends: Arc<[u32]>,
}

/// One version's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vcell {
    pub version: u64,
    pub bitmap: u16,
    pub start: u8,
    pub flags: u8,
    pub inline: [u8; INLINE_BYTES],
}

impl Vcell {
    pub fn valid(&self) -> bool {
        self.flags & VALID != 0
    }

    pub fn tombstone(&self) -> bool {
        self.flags & TOMBSTONE != 0
    }

    fn encode(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..10].copy_from_slice(&self.bitmap.to_le_bytes());
        b[10] = self.start;
        b[11] = self.flags;
        b[12..20].copy_from_slice(&self.inline);
    }

    fn decode(b: &[u8]) -> Vcell {
        Vcell {
            version: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            bitmap: u16::from_le_bytes(b[8..10].try_into().expect("2 bytes")),
            start: b[10],
            flags: b[11],
            inline: b[12..20].try_into().expect("8 bytes"),
        }
    }
}

/// The Vcells of a CVT, held inline rather than on the heap: a coordinator decodes a CVT per
/// record it reads, and a CVT has at most [`MAX_VNUM`] cells.
pub type Cells = ArrayVec<Vcell, MAX_VNUM>;

/// How [`MvCodec::rebuild_plan`] rebuilds a version: (cell, attributes), a step per newer
/// version.
pub type RebuildPlan = ArrayVec<(usize, u16), MAX_VNUM>;

/// A decoded CVT.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cvt {
    pub header: RecordHeader,
    pub cells: Cells,
}

/// What version selection found for a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The Vcell (index) of the version to read.
    Version(usize),
    /// The key is absent in the snapshot; `version` is what a history records as read (the
    /// tombstone's, or 0 if the key never existed).
    Absent { version: u64 },
    /// The version the snapshot needs was garbage-collected.
    Gone,
}

impl Cvt {
    pub fn newest(&self) -> Option<usize> {
        (0..self.cells.len())
            .filter(|&i| self.cells[i].valid())
            .max_by_key(|&i| self.cells[i].version)
    }

    /// The newest version that has a value (the value the CVT holds).
    pub fn newest_value(&self) -> Option<usize> {
        (0..self.cells.len())
            .filter(|&i| self.cells[i].valid() && !self.cells[i].tombstone())
            .max_by_key(|&i| self.cells[i].version)
    }

    /// The version a snapshot at `ts` sees: the largest valid version <= `ts`.
    pub fn select(&self, ts: u64) -> Pick {
        let best = (0..self.cells.len())
            .filter(|&i| self.cells[i].valid() && self.cells[i].version <= ts)
            .max_by_key(|&i| self.cells[i].version);
        match best {
            Some(i) if self.cells[i].tombstone() => Pick::Absent {
                version: self.cells[i].version,
            },
            Some(i) => Pick::Version(i),
            None => {
                let oldest = (0..self.cells.len())
                    .filter(|&i| self.cells[i].valid())
                    .min_by_key(|&i| self.cells[i].version);
                match oldest {
                    Some(i) if self.cells[i].flags & FRESH != 0 => Pick::Absent { version: 0 },
                    _ => Pick::Gone,
                }
            }
        }
    }
}

/// The encoders of one multi-version table.
#[derive(Debug, Clone)]
pub struct MvCodec {
    /// The CVT record: Vcells, then the value.
    pub cvt: SingleVersion,
    /// 1 to [`MAX_VNUM`].
    pub vnum: usize,
    pub value_size: usize,
    pub bar_lines: u32,
    pub attr_ends: Arc<[u32]>,
}

/// The bytes a CVT of `vnum` cells and a `value_size`-byte value occupies.
pub fn cvt_bytes(vnum: usize, value_size: usize) -> usize {
    SingleVersion::new(vnum * VCELL_BYTES + value_size).bytes()
}

impl MvCodec {
    pub fn new(t: &TableInfo) -> Option<MvCodec> {
        let mv = t.mv.as_ref()?;
        Some(MvCodec {
            cvt: SingleVersion::new(usize::from(mv.vnum) * VCELL_BYTES + t.value_size as usize),
            vnum: usize::from(mv.vnum),
            value_size: t.value_size as usize,
            bar_lines: mv.bar_lines,
            attr_ends: mv.attr_ends.clone(),
        })
    }

    pub fn cvt_bytes(&self) -> usize {
        self.cvt.bytes()
    }

    /// Makes `cells` `vnum` free cells: the cells of a key's first CVT, before its first
    /// version is pushed.
    pub fn free_cells(&self, cells: &mut Cells) {
        cells.clear();
        cells.extend(std::iter::repeat_n(Vcell::default(), self.vnum));
    }

    /// Decodes a CVT READ into its cells and, into `value`, the newest value; `Torn` if its
    /// lines come from two writes (`value` is then left as it was).
    pub fn decode(&self, rec: &[u8], value: &mut [u8]) -> Result<Cvt, Torn> {
        let mut cvt = Cvt::default();
        self.decode_into(rec, &mut cvt, value)?;
        Ok(cvt)
    }

    /// [`Self::decode`] into `cvt` (left as it was, as `value` is, if the READ is torn):
    /// a CVT is large enough that building it in place beats moving it.
    pub fn decode_into(&self, rec: &[u8], cvt: &mut Cvt, value: &mut [u8]) -> Result<(), Torn> {
        assert_eq!(value.len(), self.value_size, "value size of the table");
        self.decode_cells(rec, cvt)?;
        self.cvt.read_value(rec, self.vnum * VCELL_BYTES, value);
        Ok(())
    }

    /// Decodes a CVT READ's cells (the value's lines are checked too).
    pub fn decode_cvt(&self, rec: &[u8]) -> Result<Cvt, Torn> {
        let mut cvt = Cvt::default();
        self.decode_cells(rec, &mut cvt)?;
        Ok(cvt)
    }

    /// [`Self::decode_cvt`] into `cvt` (left as it was if the READ is torn).
    fn decode_cells(&self, rec: &[u8], cvt: &mut Cvt) -> Result<(), Torn> {
        cvt.header = self.cvt.check(rec)?;
        // Cells may straddle lines: gathered on the stack, then decoded.
        let mut bytes = [0u8; MAX_VNUM * VCELL_BYTES];
        let bytes = &mut bytes[..self.vnum * VCELL_BYTES];
        self.cvt.read_value(rec, 0, bytes);
        cvt.cells.clear();
        cvt.cells
            .extend(bytes.chunks(VCELL_BYTES).map(Vcell::decode));
        Ok(())
    }

    /// Encodes a CVT with the newest value `value`.
    pub fn encode(&self, cvt: &Cvt, value: &[u8], out: &mut [u8]) {
        assert_eq!(value.len(), self.value_size, "value size of the table");
        // Cells may straddle lines: encoded on the stack (unused cells zero), then spread.
        let mut bytes = [0u8; MAX_VNUM * VCELL_BYTES];
        let cells = &mut bytes[..self.vnum * VCELL_BYTES];
        for (c, b) in cvt.cells.iter().zip(cells.chunks_mut(VCELL_BYTES)) {
            c.encode(b);
        }
        self.cvt.encode_header(&cvt.header, out);
        self.cvt.write_value(out, 0, cells);
        self.cvt.write_value(out, cells.len(), value);
    }

    /// The attribute ranges of the value: (start, end).
    pub fn attrs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut start = 0;
        self.attr_ends.iter().map(move |&e| {
            let r = (start, e as usize);
            start = e as usize;
            r
        })
    }

    /// Bytes of the pre-images of the attributes in `bitmap`.
    pub fn chunk_data_bytes(&self, bitmap: u16) -> usize {
        self.attrs()
            .enumerate()
            .filter(|(a, _)| bitmap >> a & 1 == 1)
            .map(|(_, (s, e))| e - s)
            .sum()
    }

    /// Bar lines of the chunk of `bitmap`.
    pub fn chunk_lines(&self, bitmap: u16) -> u32 {
        self.chunk_data_bytes(bitmap).div_ceil(BAR_LINE_DATA) as u32
    }

    /// The attributes whose bytes differ between `old` and `new`.
    pub fn changed(&self, old: &[u8], new: &[u8]) -> u16 {
        self.attrs()
            .enumerate()
            .filter(|(_, (s, e))| old[*s..*e] != new[*s..*e])
            .fold(0, |m, (a, _)| m | 1 << a)
    }

    /// The pre-images of `old`'s attributes in `bitmap`, in attribute order (packed, they are
    /// the data of the version's inline pre-images or chunk).
    pub fn pre_images<'a>(&'a self, bitmap: u16, old: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
        self.attrs()
            .enumerate()
            .filter(move |(a, _)| bitmap >> a & 1 == 1)
            .map(move |(_, (s, e))| &old[s..e])
    }

    /// A new version's Vcell for an update from `old` to `new`: its pre-images inline when
    /// they fit 8 bytes, else in a bar chunk (appended to `chunk`; its start line returned)
    /// when they fit the bar, else nowhere (the cell then drops every older version when
    /// pushed).
    pub fn update_cell(
        &self,
        cvt: &Cvt,
        old: &[u8],
        new: &[u8],
        version: u64,
        chunk: &mut Vec<u8>,
    ) -> (Vcell, Option<u32>) {
        let bitmap = self.changed(old, new);
        let mut cell = Vcell {
            version,
            bitmap,
            flags: VALID,
            ..Vcell::default()
        };
        if bitmap == 0 {
            return (cell, None);
        }
        if self.chunk_data_bytes(bitmap) <= INLINE_BYTES {
            let mut at = 0;
            for piece in self.pre_images(bitmap, old) {
                cell.inline[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
            cell.flags |= INLINE;
            return (cell, None);
        }
        match self.chunk_start(cvt, self.chunk_lines(bitmap)) {
            Some(s) => {
                cell.start = s as u8;
                cell.flags |= CHUNK;
                self.encode_chunk(bitmap, old, version, chunk);
                (cell, Some(s))
            }
            None => (cell, None),
        }
    }

    /// Overlays the inline pre-images of `cell` on `value`, for the attributes in `take`.
    pub fn apply_inline(&self, cell: &Vcell, take: u16, value: &mut [u8]) {
        let mut at = 0;
        for (a, (s, e)) in self.attrs().enumerate() {
            if cell.bitmap >> a & 1 == 0 {
                continue;
            }
            if take >> a & 1 == 1 {
                value[s..e].copy_from_slice(&cell.inline[at..at + (e - s)]);
            }
            at += e - s;
        }
    }

    /// Appends to `out` the chunk of `old`'s attributes in `bitmap`, as bar lines stamped
    /// `version`.
    pub fn encode_chunk(&self, bitmap: u16, old: &[u8], version: u64, out: &mut Vec<u8>) {
        let lines = self.chunk_lines(bitmap) as usize;
        let start = out.len();
        out.resize(start + lines * LINE, 0);
        let chunk = &mut out[start..];
        for line in chunk.chunks_mut(LINE) {
            line[..8].copy_from_slice(&version.to_le_bytes());
        }
        // The pre-images, packed, run on from line to line past the stamps.
        let mut at = 0;
        for mut piece in self.pre_images(bitmap, old) {
            while !piece.is_empty() {
                let (l, o) = (at / BAR_LINE_DATA, at % BAR_LINE_DATA);
                let n = piece.len().min(BAR_LINE_DATA - o);
                chunk[l * LINE + 8 + o..][..n].copy_from_slice(&piece[..n]);
                piece = &piece[n..];
                at += n;
            }
        }
    }

    /// Overlays the pre-images of a chunk READ (stamped `version`) on `value`, for the
    /// attributes in `take` (a subset of `bitmap`). `Err` if a line carries another stamp (the
    /// bar wrapped over it since the CVT was read).
    pub fn apply_chunk(
        &self,
        chunk: &[u8],
        bitmap: u16,
        version: u64,
        take: u16,
        value: &mut [u8],
    ) -> Result<(), Torn> {
        for (l, line) in chunk.chunks(LINE).enumerate() {
            let stamp = u64::from_le_bytes(line[..8].try_into().expect("8 bytes"));
            if stamp != version {
                return Err(Torn {
                    line: l,
                    version,
                    stamp,
                });
            }
        }
        let mut at = 0;
        for (a, (s, e)) in self.attrs().enumerate() {
            if bitmap >> a & 1 == 0 {
                continue;
            }
            if take >> a & 1 == 1 {
                for (i, byte) in value[s..e].iter_mut().enumerate() {
                    let p = at + i;
                    *byte = chunk[(p / BAR_LINE_DATA) * LINE + 8 + p % BAR_LINE_DATA];
                }
            }
            at += e - s;
        }
        Ok(())
    }

    /// To rebuild version `cells[v0]` from the newest value (version `cells[vpkg]`): for each newer
    /// version with pre-images, the attributes to take from its chunk, as (cell, attributes).
    /// Each attribute comes from the oldest newer version that changed it. `None` if some
    /// newer version's pre-images are missing (they did not fit the bar: older versions were
    /// dropped then, so a caller holding a valid `v0` never sees this unless the CVT is
    /// inconsistent).
    pub fn rebuild_plan(&self, cvt: &Cvt, v0: usize, vpkg: usize) -> Option<RebuildPlan> {
        let (lo, hi) = (cvt.cells[v0].version, cvt.cells[vpkg].version);
        let mut newer: ArrayVec<usize, MAX_VNUM> = (0..cvt.cells.len())
            .filter(|&i| {
                let c = &cvt.cells[i];
                c.valid() && c.version > lo && c.version <= hi && !c.tombstone()
            })
            .collect();
        newer.sort_by_key(|&i| cvt.cells[i].version);
        let mut done = 0u16;
        let mut plan = RebuildPlan::new();
        for i in newer {
            let c = &cvt.cells[i];
            if c.bitmap == 0 {
                continue;
            }
            if c.flags & (CHUNK | INLINE) == 0 {
                return None;
            }
            let take = c.bitmap & !done;
            done |= c.bitmap;
            if take != 0 {
                plan.push((i, take));
            }
        }
        Some(plan)
    }

    /// Where a new version's chunk of `lines` lines goes: after the newest chunk of the bar,
    /// or at line 0 when it does not fit before the end. `None` if it exceeds the bar.
    pub fn chunk_start(&self, cvt: &Cvt, lines: u32) -> Option<u32> {
        if lines > self.bar_lines {
            return None;
        }
        let head = (0..cvt.cells.len())
            .filter(|&i| cvt.cells[i].valid() && cvt.cells[i].flags & CHUNK != 0)
            .max_by_key(|&i| cvt.cells[i].version)
            .map_or(0, |i| {
                u32::from(cvt.cells[i].start) + self.chunk_lines(cvt.cells[i].bitmap)
            });
        Some(if head + lines > self.bar_lines {
            0
        } else {
            head
        })
    }

    /// Invalidates every valid cell older than or as old as `version` (the suffix invariant).
    pub fn drop_through(cvt: &mut Cvt, version: u64) {
        for c in &mut cvt.cells {
            if c.valid() && c.version <= version {
                c.flags &= !VALID;
            }
        }
    }

    /// Adds `cell` (a new version whose chunk, if any, is at `cell.start`): drops the versions
    /// whose chunks it overwrites (and everything older), then takes a free cell or the
    /// oldest one.
    pub fn push(&self, cvt: &mut Cvt, cell: Vcell) {
        if cell.flags & CHUNK != 0 {
            let (s, e) = (
                u32::from(cell.start),
                u32::from(cell.start) + self.chunk_lines(cell.bitmap),
            );
            let overlapped = cvt
                .cells
                .iter()
                .filter(|c| c.valid() && c.flags & CHUNK != 0)
                .filter(|c| {
                    let cs = u32::from(c.start);
                    let ce = cs + self.chunk_lines(c.bitmap);
                    cs < e && s < ce
                })
                .map(|c| c.version)
                .max();
            if let Some(v) = overlapped {
                // Version v's pre-images rebuild the versions before v, which go; v itself is
                // rebuilt from newer versions' pre-images, which stay.
                Self::drop_through(cvt, v - 1);
            }
        } else if cell.bitmap != 0 && cell.flags & INLINE == 0 {
            // Pre-images that did not fit: no older version can be rebuilt any more.
            Self::drop_through(cvt, u64::MAX);
        }
        let slot = match cvt.cells.iter().position(|c| !c.valid()) {
            Some(i) => i,
            None => {
                let oldest = (0..cvt.cells.len())
                    .min_by_key(|&i| cvt.cells[i].version)
                    .expect("vnum >= 1");
                // Overwriting the oldest keeps the valid cells a suffix.
                oldest
            }
        };
        cvt.cells[slot] = cell;
    }
}

impl TableInfo {
    /// The slot number of the record slot at `off` (bucket-major), for the value region.
    pub fn slot_number(&self, off: u64) -> u64 {
        let rel = off - (self.table_off + 64);
        let (b, in_bucket) = (rel / self.bucket_bytes, rel % self.bucket_bytes);
        b * u64::from(self.slots_per_bucket) + (in_bucket - 64) / self.slot_stride
    }

    /// Line `line` of the attribute bar of the record slot at `off`.
    pub fn bar_line_off(&self, off: u64, line: u32) -> u64 {
        let mv = self.mv.as_ref().expect("a multi-version table");
        mv.values_off + self.slot_number(off) * mv.value_stride + u64::from(line) * LINE as u64
    }
}

/// What [`local_lookup`] finds: the slot, the CVT, and the newest value (`None`: deleted).
pub type LocalRecord = (u64, Cvt, Option<Vec<u8>>);

/// The committed state of `key` in a multi-version table, read with a memory node's own CPU
/// when no transaction runs (checks after a run): its slot, CVT and newest value (`None`:
/// deleted). `Ok(None)`: the key has no CVT. `Err`: a torn CVT (an install that never
/// finished).
pub fn local_lookup(
    t: &TableInfo,
    mem: &mut dyn dtxn_fabric::LocalMem,
    key: u64,
) -> Result<Option<LocalRecord>, Torn> {
    let k = MvCodec::new(t).expect("a multi-version table");
    let mut bucket = t.home_bucket(key);
    let mut bytes = vec![0u8; t.bucket_bytes as usize];
    for _ in 0..=t.overflow_buckets {
        mem.read(bucket, &mut bytes);
        let scan = t.scan(bucket, &bytes, key);
        if let Some((s, off)) = scan.found {
            let mut v = vec![0u8; t.value_size as usize];
            let cvt = k.decode(t.slot_bytes(&bytes, s), &mut v)?;
            let value = match cvt.newest() {
                Some(n) if !cvt.cells[n].tombstone() => Some(v),
                _ => None,
            };
            return Ok(Some((off, cvt, value)));
        }
        match scan.next {
            Some(n) => bucket = n,
            None => return Ok(None),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn codec(vnum: usize, bar_lines: u32, attr_ends: Vec<u32>) -> MvCodec {
        let size = *attr_ends.last().unwrap() as usize;
        MvCodec {
            cvt: SingleVersion::new(vnum * VCELL_BYTES + size),
            vnum,
            value_size: size,
            bar_lines,
            attr_ends: attr_ends.into(),
        }
    }

    fn cvt(cells: Vec<Vcell>) -> Cvt {
        Cvt {
            header: RecordHeader {
                lock: 0,
                version: 9,
                key: 1,
                table: 1,
                valid: true,
                restores: 0,
            },
            cells: cells.into_iter().collect(),
        }
    }

    fn cell(version: u64, flags: u8) -> Vcell {
        Vcell {
            version,
            bitmap: 0,
            start: 0,
            flags: VALID | flags,
            ..Vcell::default()
        }
    }

    #[test]
    fn sizes() {
        // SmallBank (8-byte values, 3 versions): two lines; TPC-C ORDER_LINE (56, 4): three.
        assert_eq!(cvt_bytes(1, 8), 64);
        assert_eq!(cvt_bytes(3, 8), 128);
        assert_eq!(cvt_bytes(4, 56), 192);
        assert_eq!(cvt_bytes(4, 664), 896);
    }

    #[test]
    fn selection_follows_tombstones_creation_and_gc() {
        let c = cvt(vec![
            cell(10, CREATED | FRESH),
            cell(20, 0),
            cell(30, TOMBSTONE),
        ]);
        assert_eq!(c.select(5), Pick::Absent { version: 0 });
        assert_eq!(c.select(10), Pick::Version(0));
        assert_eq!(c.select(29), Pick::Version(1));
        assert_eq!(c.select(31), Pick::Absent { version: 30 });
        assert_eq!(c.newest(), Some(2));
        assert_eq!(c.newest_value(), Some(1));
        // The creation was overwritten: a snapshot before 20 cannot be served.
        let gc = cvt(vec![cell(40, 0), cell(20, 0), cell(30, TOMBSTONE)]);
        assert_eq!(gc.select(15), Pick::Gone);
        // Re-created over a tombstone: before the tombstone, gone; between, absent.
        let re = cvt(vec![
            cell(50, CREATED),
            cell(45, TOMBSTONE),
            Vcell::default(),
        ]);
        assert_eq!(re.select(44), Pick::Gone);
        assert_eq!(re.select(47), Pick::Absent { version: 45 });
        assert_eq!(re.select(50), Pick::Version(0));
    }

    #[test]
    fn cvt_round_trips_and_tears_are_seen() {
        let k = codec(4, 8, vec![8, 16]);
        let c = cvt(vec![
            cell(3, CREATED),
            Vcell {
                version: 7,
                bitmap: 2,
                start: 1,
                flags: VALID | CHUNK,
                ..Vcell::default()
            },
            Vcell::default(),
            cell(9, 0),
        ]);
        let mut b = vec![0u8; k.cvt_bytes()];
        k.encode(&c, &[3; 16], &mut b);
        let mut v = [0u8; 16];
        assert_eq!(k.decode(&b, &mut v), Ok(c.clone()));
        assert_eq!(v, [3; 16]);
        let mut c2 = c.clone();
        c2.header.version = 10;
        let mut b2 = vec![0u8; k.cvt_bytes()];
        k.encode(&c2, &[3; 16], &mut b2);
        let mut mixed = b.clone();
        mixed[64..].copy_from_slice(&b2[64..]);
        assert!(k.decode_cvt(&mixed).is_err());
    }

    /// A model of a record's history: every version's full value, and the CVT, Vpkg and bar a
    /// writer would leave. Any valid version the CVT offers is rebuilt exactly.
    fn history_rebuilds(vnum: usize, bar_lines: u32, updates: &[(u8, u8)]) {
        let attr_ends = vec![8u32, 16, 70, 80, 200];
        let k = codec(vnum, bar_lines, attr_ends.clone());
        let size = 200;
        let mut values: Vec<(u64, Vec<u8>)> = vec![(1, vec![0u8; size])];
        let mut c = cvt(vec![Vcell::default(); vnum]);
        c.cells[0] = cell(1, CREATED);
        let mut bar = vec![0u8; bar_lines as usize * LINE];
        for (n, &(mask, fill)) in updates.iter().enumerate() {
            let version = 2 + n as u64;
            let old = values.last().unwrap().1.clone();
            let mut new = old.clone();
            for (a, (s, e)) in k.attrs().enumerate() {
                if mask >> a & 1 == 1 {
                    new[s..e].fill(fill.wrapping_add(n as u8));
                }
            }
            let mut chunk = Vec::new();
            let (cell, start) = k.update_cell(&c, &old, &new, version, &mut chunk);
            match start {
                Some(s) => bar[s as usize * LINE..][..chunk.len()].copy_from_slice(&chunk),
                None => assert!(chunk.is_empty()),
            }
            k.push(&mut c, cell);
            values.push((version, new.clone()));
            // The valid cells are a suffix of the history.
            let mut valid: Vec<u64> = c
                .cells
                .iter()
                .filter(|c| c.valid())
                .map(|c| c.version)
                .collect();
            valid.sort_unstable();
            assert_eq!(*valid.last().unwrap(), version);
            assert!(valid.windows(2).all(|w| w[1] == w[0] + 1), "{valid:?}");
            let vpkg = c.newest_value().unwrap();
            for (i, cl) in c.cells.iter().enumerate() {
                if !cl.valid() {
                    continue;
                }
                let plan = k.rebuild_plan(&c, i, vpkg).expect("valid versions rebuild");
                let mut v = new.clone();
                for (w, take) in plan {
                    let wc = c.cells[w];
                    if wc.flags & INLINE != 0 {
                        k.apply_inline(&wc, take, &mut v);
                        continue;
                    }
                    let s = wc.start as usize * LINE;
                    let e = s + k.chunk_lines(wc.bitmap) as usize * LINE;
                    k.apply_chunk(&bar[s..e], wc.bitmap, wc.version, take, &mut v)
                        .unwrap();
                }
                let want = &values.iter().find(|(ver, _)| *ver == cl.version).unwrap().1;
                assert_eq!(&v, want, "version {}", cl.version);
            }
        }
    }

    #[test]
    fn a_long_history_rebuilds() {
        let ups: Vec<(u8, u8)> = (0..40).map(|i| ((i * 7 % 31 + 1) as u8, i as u8)).collect();
        history_rebuilds(4, 6, &ups);
        history_rebuilds(2, 3, &ups);
        history_rebuilds(1, 1, &ups);
    }

    proptest! {
        #[test]
        fn every_valid_version_rebuilds(vnum in 1usize..8, bar_lines in 1u32..12,
                                        updates in prop::collection::vec((0u8..32, any::<u8>()), 0..30)) {
            history_rebuilds(vnum, bar_lines, &updates);
        }

        #[test]
        fn a_chunk_over_wrapped_lines_is_refused(v1 in 2u64..1000, d in 1u64..1000) {
            let k = codec(2, 4, vec![8, 100]);
            let old = vec![7u8; 100];
            let (mut chunk, mut other) = (Vec::new(), Vec::new());
            k.encode_chunk(0b11, &old, v1, &mut chunk);
            k.encode_chunk(0b11, &old, v1 + d, &mut other);
            chunk[64..128].copy_from_slice(&other[64..128]);
            let mut v = vec![0u8; 100];
            prop_assert!(k.apply_chunk(&chunk, 0b11, v1, 0b11, &mut v).is_err());
        }
    }
}
