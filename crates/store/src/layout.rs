//! The bytes at the start of every memory node: superblock and catalog.
//!
//! ```text
//! region offset
//! 0          superblock (one line)
//! 64         node 0 only: the compute processes' claim word (the rest of the page reserved)
//! 128        node 0 only: the timestamp oracle (FAA only)
//! 192        control-chain members (nodes 0..k): membership: the recovery service's leader
//!            word, the view word, the repaired-view word (chain-replicated CAS words),
//!            then a lease word per coordinator (a copy on each member), then a recovered
//!            word per coordinator (CAS, chain-replicated)
//! 4096       control-chain members: a view-acknowledgement word per coordinator (a copy on each)
//! 8192       catalog: one 256-byte entry per table replica on this node
//! log_off    log region: log_slices x log_slice_bytes, one slice per coordinator
//! ...        tables (hash buckets, then their overflow area), at the same offsets on
//!            every replica
//! ```
//!
//! Superblock (64 bytes):
//! ```text
//! 0 magic "DTXNPOOL" | 8 layout version u32 | 12 node id u16 | 14 node count u16
//! 16 region size u64 | 24 catalog offset u64 | 32 catalog entries u32 | 36 catalog crc32 u32
//! 40 log offset u64 | 48 log slice bytes u64 | 56 log slices u16
//! 58 control replicas u8 (k: memory nodes 0..k hold the control words, the control chain:
//!    docs/src/control-chain.md) | 59 control member u8 (1: this node's control words were
//!    seeded at format; 0: not a member, or a blank replacement not yet seeded)
//! 60 superblock crc32 u32
//! ```
//!
//! Catalog entry (256 bytes):
//! ```text
//! 0 table id u32 | 4 format u8 | 5 rank u8 (0 = primary) | 6 replica count u8
//! 7 metadata words per record u8 (0 in pools from before them: the same layout)
//! 8 replica nodes [u16; 8], by rank | 24 value size u32 | 28 record bytes u32
//! 32 table offset u64 | 40 bucket count u64 | 48 slots per bucket u32 | 52 bucket bytes u32
//! 56 overflow offset u64 | 64 overflow buckets u64 | 72 name, 48 bytes UTF-8, zero-padded
//! 120 copies of each record u8 (0 in pools from before them: 1)
//! 128 multi-version tables only (vnum 0 otherwise): vnum u8 | 129 attributes u8 | 132 bar
//! lines u32 | 136 value region offset u64 | 144 value stride u64 | 152 attribute ends [u32; 24]
//! ```

use crate::error::StoreError;
use crate::record::{RecordFormat, SingleVersion, MAX_COPIES, MAX_META_WORDS};
use dtxn_fabric::NodeId;

pub const MAGIC: u64 = u64::from_le_bytes(*b"DTXNPOOL");
/// Bumped on every incompatible change of any layout in this crate (4: the view word gives
/// each memory node two bits of state, for re-replication; 5: the superblock names the
/// control chain's length and whether the node is a seeded member).
pub const LAYOUT_VERSION: u32 = 5;
pub const SUPERBLOCK_BYTES: usize = 64;
/// Memory node 0: the compute processes' claim word, right after the superblock (CAS and FAA
/// only). Bit 63: one process holds the pool alone (FORD's localized validation needs every
/// writer on its Vcache); bits 0..63: how many processes share it.
pub const CLAIM_OFF: u64 = 64;
pub const CLAIM_EXCLUSIVE: u64 = 1 << 63;
/// Memory node 0: the timestamp oracle of multi-version protocols (Motor), a counter taken
/// with FAA only (never written by a verb: a WRITE may be lost under a concurrent FAA, G8).
pub const ORACLE_OFF: u64 = 128;
/// The recovery service's leader word ([`LeaderWord`], CAS only; a control-chain word, on
/// each member, `dtxn_txn::control`). Alone on its line with the view and repaired words.
pub const LEADER_OFF: u64 = 192;
/// Memory node 0: the pool's view ([`crate::view::View`]: its number and each memory node's
/// state: live, failed, joining, rejoined), CAS only, on the leader word's line.
pub const VIEW_OFF: u64 = 200;
/// Memory node 0: the newest view whose promoted primaries have been repaired (its word,
/// [`crate::view::View::word`]: the next repair needs only what changed since)
/// (`dtxn_txn::membership`), CAS only, on the leader word's line.
pub const REPAIRED_OFF: u64 = 208;
/// Memory node 0: coordinator `i`'s lease word at `LEASE_OFF + 8 i`, WRITten by `i` alone
/// (`dtxn_fabric::Lease::word`: expiry, done bit, incarnation).
pub const LEASE_OFF: u64 = 256;
/// How many coordinators the membership area holds.
pub const MAX_MEMBERS: u32 = 240;
/// Coordinator `i`'s recovered word at `RECOVERED_OFF + 8 i` ([`RecoveredWord`], CAS only; a
/// control-chain word): the last incarnation of `i` that recovery settled. On lines of their
/// own: no WRITE lands there.
pub const RECOVERED_OFF: u64 = LEASE_OFF + 8 * MAX_MEMBERS as u64;
/// Memory node 0: coordinator `i`'s view acknowledgement at `ACK_OFF + 8 i`, WRITten by `i`
/// alone: the number of the newest view it works in (`dtxn_txn::membership`).
pub const ACK_OFF: u64 = 4096;
/// The end of memory node 0's membership area.
pub const MEMBERSHIP_END: u64 = ACK_OFF + 8 * MAX_MEMBERS as u64;
pub const CATALOG_OFF: u64 = 8192;

/// The leader word: `seq:48 | owner:16`. `owner` is 0 while nobody leads, else the leading
/// coordinator's index plus one; `seq` counts the word's writes, its **tag** on the control
/// chain (each write raises it by one, so no word recurs and a member behind another is
/// known by its lower tag). A blank word (0) is free, at tag 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaderWord {
    pub seq: u64,
    pub owner: u16,
}

impl LeaderWord {
    pub fn word(self) -> u64 {
        (self.seq << 16) | u64::from(self.owner)
    }

    pub fn parse(w: u64) -> LeaderWord {
        LeaderWord {
            seq: w >> 16,
            owner: w as u16,
        }
    }

    /// The word's tag on the control chain.
    pub fn tag(w: u64) -> u64 {
        w >> 16
    }

    /// The next write: `owner` takes (or, with 0, gives back) the word.
    pub fn then(self, owner: u16) -> LeaderWord {
        LeaderWord {
            seq: self.seq + 1,
            owner,
        }
    }
}

/// A recovered word: `seq:32 | writer:16 | incarnation:16`. `incarnation` is the last one
/// recovery settled (a blank word: none, 0); `writer` the leader that marked it (index plus
/// one); `seq` its tag on the control chain. The low 16 bits are the incarnation, as in the
/// word before it had a tag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveredWord {
    pub seq: u32,
    pub writer: u16,
    pub incarnation: u16,
}

impl RecoveredWord {
    pub fn word(self) -> u64 {
        (u64::from(self.seq) << 32) | (u64::from(self.writer) << 16) | u64::from(self.incarnation)
    }

    pub fn parse(w: u64) -> RecoveredWord {
        RecoveredWord {
            seq: (w >> 32) as u32,
            writer: (w >> 16) as u16,
            incarnation: w as u16,
        }
    }

    /// The word's tag on the control chain.
    pub fn tag(w: u64) -> u64 {
        w >> 32
    }

    /// The next write: `writer` marks `incarnation` recovered.
    pub fn then(self, writer: u16, incarnation: u16) -> RecoveredWord {
        RecoveredWord {
            seq: self.seq + 1,
            writer,
            incarnation,
        }
    }
}
pub const ENTRY_BYTES: usize = 256;
pub const MAX_REPLICAS: usize = 8;
pub const NAME_BYTES: usize = 48;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub node: NodeId,
    pub nodes: u16,
    pub region_size: u64,
    pub catalog_entries: u32,
    pub catalog_crc: u32,
    pub log_off: u64,
    pub log_slice_bytes: u64,
    pub log_slices: u32,
    /// The control chain's length `k` (at least 1): memory nodes `0..k` hold the control
    /// words.
    pub control_replicas: u8,
    /// This node's control words were seeded (at format): it may be read as a member.
    pub control_member: bool,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        b[12..14].copy_from_slice(&self.node.to_le_bytes());
        b[14..16].copy_from_slice(&self.nodes.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_size.to_le_bytes());
        b[24..32].copy_from_slice(&CATALOG_OFF.to_le_bytes());
        b[32..36].copy_from_slice(&self.catalog_entries.to_le_bytes());
        b[36..40].copy_from_slice(&self.catalog_crc.to_le_bytes());
        b[40..48].copy_from_slice(&self.log_off.to_le_bytes());
        b[48..56].copy_from_slice(&self.log_slice_bytes.to_le_bytes());
        debug_assert!(self.log_slices <= 0xffff, "checked by Plan::new");
        b[56..58].copy_from_slice(&(self.log_slices as u16).to_le_bytes());
        b[58] = self.control_replicas;
        b[59] = u8::from(self.control_member);
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the superblock that memory node `node` holds, checking what a stranger's bytes
    /// would fail: magic, layout version, checksum, node id.
    pub fn decode(node: NodeId, b: &[u8]) -> Result<Superblock, StoreError> {
        let magic = u64_at(b, 0);
        if magic != MAGIC {
            return Err(StoreError::BadMagic { node, magic });
        }
        let found = u32_at(b, 8);
        if found != LAYOUT_VERSION {
            return Err(StoreError::LayoutVersion {
                node,
                found,
                expected: LAYOUT_VERSION,
            });
        }
        if crc32fast::hash(&b[..60]) != u32_at(b, 60) {
            return Err(StoreError::Checksum {
                node,
                what: "superblock",
            });
        }
        let sb = Superblock {
            node: u16_at(b, 12),
            nodes: u16_at(b, 14),
            region_size: u64_at(b, 16),
            catalog_entries: u32_at(b, 32),
            catalog_crc: u32_at(b, 36),
            log_off: u64_at(b, 40),
            log_slice_bytes: u64_at(b, 48),
            log_slices: u32::from(u16_at(b, 56)),
            control_replicas: b[58],
            control_member: b[59] == 1,
        };
        if sb.control_replicas == 0 || b[59] > 1 {
            return Err(StoreError::Corrupt {
                node,
                what: format!(
                    "control chain of {} members, membership byte {}",
                    sb.control_replicas, b[59]
                ),
            });
        }
        if sb.node != node {
            return Err(StoreError::Corrupt {
                node,
                what: format!("its superblock says it is memory node {}", sb.node),
            });
        }
        if u64_at(b, 24) != CATALOG_OFF {
            return Err(StoreError::Corrupt {
                node,
                what: format!("catalog at {:#x}", u64_at(b, 24)),
            });
        }
        Ok(sb)
    }

    pub fn catalog_bytes(&self) -> usize {
        self.catalog_entries as usize * ENTRY_BYTES
    }
}

/// One table replica, as the catalog of its memory node describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    pub table: u32,
    pub name: String,
    pub format: RecordFormat,
    /// 0 for the primary, 1.. for the backups.
    pub rank: u8,
    /// Every replica's memory node, by rank (so one node's catalog names all of them).
    pub replicas: Vec<NodeId>,
    pub value_size: u32,
    /// Metadata words per record (see [`crate::record`]).
    pub meta_words: u8,
    /// Copies of each record in its slot (see [`crate::record`]).
    pub copies: u8,
    pub record_bytes: u32,
    pub table_off: u64,
    pub bucket_count: u64,
    pub slots_per_bucket: u32,
    pub bucket_bytes: u32,
    pub overflow_off: u64,
    pub overflow_buckets: u64,
    pub mv: Option<crate::cvt::MvInfo>,
}

impl CatalogEntry {
    pub fn encode(&self, b: &mut [u8]) {
        assert_eq!(b.len(), ENTRY_BYTES);
        assert!(self.replicas.len() <= MAX_REPLICAS);
        b.fill(0);
        b[0..4].copy_from_slice(&self.table.to_le_bytes());
        b[4] = self.format.code();
        b[5] = self.rank;
        b[6] = self.replicas.len() as u8;
        b[7] = self.meta_words;
        for (i, n) in self.replicas.iter().enumerate() {
            b[8 + 2 * i..10 + 2 * i].copy_from_slice(&n.to_le_bytes());
        }
        b[24..28].copy_from_slice(&self.value_size.to_le_bytes());
        b[28..32].copy_from_slice(&self.record_bytes.to_le_bytes());
        b[32..40].copy_from_slice(&self.table_off.to_le_bytes());
        b[40..48].copy_from_slice(&self.bucket_count.to_le_bytes());
        b[48..52].copy_from_slice(&self.slots_per_bucket.to_le_bytes());
        b[52..56].copy_from_slice(&self.bucket_bytes.to_le_bytes());
        b[56..64].copy_from_slice(&self.overflow_off.to_le_bytes());
        b[64..72].copy_from_slice(&self.overflow_buckets.to_le_bytes());
        let name = self.name.as_bytes();
        let n = name.len().min(NAME_BYTES);
        b[72..72 + n].copy_from_slice(&name[..n]);
        b[120] = self.copies;
        if let Some(mv) = &self.mv {
            assert!(mv.attr_ends.len() <= crate::cvt::MAX_ATTRS);
            b[128] = mv.vnum;
            b[129] = mv.attr_ends.len() as u8;
            b[132..136].copy_from_slice(&mv.bar_lines.to_le_bytes());
            b[136..144].copy_from_slice(&mv.values_off.to_le_bytes());
            b[144..152].copy_from_slice(&mv.value_stride.to_le_bytes());
            for (i, e) in mv.attr_ends.iter().enumerate() {
                b[152 + 4 * i..156 + 4 * i].copy_from_slice(&e.to_le_bytes());
            }
        }
    }

    pub fn decode(node: NodeId, b: &[u8]) -> Result<CatalogEntry, StoreError> {
        let corrupt = |what: String| StoreError::Corrupt { node, what };
        let format = RecordFormat::from_code(b[4])
            .ok_or_else(|| corrupt(format!("record format {}", b[4])))?;
        let count = b[6] as usize;
        if count == 0 || count > MAX_REPLICAS || b[5] as usize >= count {
            return Err(corrupt(format!("replica rank {} of {count}", b[5])));
        }
        let replicas = (0..count).map(|i| u16_at(b, 8 + 2 * i)).collect();
        let name_raw = &b[72..72 + NAME_BYTES];
        let end = name_raw.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
        let name = String::from_utf8(name_raw[..end].to_vec())
            .map_err(|_| corrupt("a table name is not UTF-8".into()))?;
        let e = CatalogEntry {
            table: u32_at(b, 0),
            name,
            format,
            rank: b[5],
            replicas,
            value_size: u32_at(b, 24),
            meta_words: b[7],
            copies: b[120].max(1),
            record_bytes: u32_at(b, 28),
            table_off: u64_at(b, 32),
            bucket_count: u64_at(b, 40),
            slots_per_bucket: u32_at(b, 48),
            bucket_bytes: u32_at(b, 52),
            overflow_off: u64_at(b, 56),
            overflow_buckets: u64_at(b, 64),
            mv: None,
        };
        let mut e = e;
        if format == RecordFormat::Cvt {
            let (vnum, attrs) = (b[128], b[129] as usize);
            let attr_ends: Vec<u32> = (0..attrs.min(crate::cvt::MAX_ATTRS))
                .map(|i| u32_at(b, 152 + 4 * i))
                .collect();
            let ordered = attr_ends.windows(2).all(|w| w[0] < w[1]);
            if vnum == 0
                || usize::from(vnum) > crate::cvt::MAX_VNUM
                || attrs == 0
                || attrs > crate::cvt::MAX_ATTRS
                || !ordered
                || attr_ends.last() != Some(&e.value_size)
            {
                return Err(corrupt(format!(
                    "table {} has an impossible multi-version geometry",
                    e.table
                )));
            }
            e.mv = Some(crate::cvt::MvInfo {
                vnum,
                bar_lines: u32_at(b, 132),
                values_off: u64_at(b, 136),
                value_stride: u64_at(b, 144),
                attr_ends: attr_ends.into(),
            });
        }
        let meta = usize::from(e.meta_words);
        if meta > MAX_META_WORDS || (meta > 0 && format != RecordFormat::Single) {
            return Err(corrupt(format!(
                "table {} has {meta} metadata words per {} record",
                e.table,
                format.name()
            )));
        }
        if usize::from(e.copies) > MAX_COPIES || (e.copies > 1 && format != RecordFormat::Single) {
            return Err(corrupt(format!(
                "table {} has {} copies per {} record",
                e.table,
                e.copies,
                format.name()
            )));
        }
        if format == RecordFormat::Single
            && (e.record_bytes as usize)
                < SingleVersion::with_meta(e.value_size as usize, e.meta_words).bytes()
                    * usize::from(e.copies)
        {
            return Err(corrupt(format!(
                "table {} has records of {} bytes, too small for {} value bytes and {meta} \
                 metadata words",
                e.table, e.record_bytes, e.value_size
            )));
        }
        // Geometry that would make index arithmetic divide by zero or slice out of bounds.
        let slots = u64::from(e.slots_per_bucket);
        let stride = u64::from(e.bucket_bytes).saturating_sub(64) / slots.max(1);
        if e.bucket_count == 0
            || slots == 0
            || u64::from(e.bucket_bytes) < 64 + slots * 64
            || stride < u64::from(e.record_bytes)
            || e.record_bytes < 64
        {
            return Err(corrupt(format!(
                "table {} has an impossible geometry ({} buckets of {} bytes, {} slots, \
                 records of {} bytes)",
                e.table, e.bucket_count, e.bucket_bytes, e.slots_per_bucket, e.record_bytes
            )));
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn control_words_round_trip_and_each_write_raises_the_tag_by_one(
            seq in 0u64..(1 << 47), owner: u16, next: u16,
            rseq in 0u32..u32::MAX, writer: u16, incarnation: u16, w2: u16, i2: u16,
        ) {
            let l = LeaderWord { seq, owner };
            prop_assert_eq!(LeaderWord::parse(l.word()), l);
            prop_assert_eq!(LeaderWord::tag(l.word()), seq);
            prop_assert_eq!(LeaderWord::tag(l.then(next).word()), seq + 1);
            prop_assert_eq!(LeaderWord::parse(l.then(next).word()).owner, next);
            let r = RecoveredWord { seq: rseq, writer, incarnation };
            prop_assert_eq!(RecoveredWord::parse(r.word()), r);
            prop_assert_eq!(r.word() as u16, incarnation);
            prop_assert_eq!(RecoveredWord::tag(r.word()), u64::from(rseq));
            prop_assert_eq!(RecoveredWord::tag(r.then(w2, i2).word()), u64::from(rseq) + 1);
            prop_assert_ne!(r.then(w2, i2).word(), r.then(w2.wrapping_add(1), i2).word());
        }
    }

    #[test]
    fn a_blank_control_word_is_free_at_tag_zero() {
        assert_eq!(LeaderWord::parse(0), LeaderWord::default());
        assert_eq!(RecoveredWord::parse(0), RecoveredWord::default());
        assert_eq!(LeaderWord::default().then(3).word(), (1 << 16) | 3);
    }

    fn sb() -> Superblock {
        Superblock {
            node: 2,
            nodes: 3,
            region_size: 1 << 20,
            catalog_entries: 4,
            catalog_crc: 99,
            log_off: 8192,
            log_slice_bytes: 4096,
            log_slices: 16,
            control_replicas: 2,
            control_member: false,
        }
    }

    #[test]
    fn superblock_round_trips_and_checks() {
        let b = sb().encode();
        assert_eq!(Superblock::decode(2, &b), Ok(sb()));
        assert_eq!(
            Superblock::decode(1, &b).unwrap_err().to_string(),
            "memory node 1: its superblock says it is memory node 2"
        );
        let mut v1 = b;
        v1[8..12].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(
            Superblock::decode(2, &v1).unwrap_err().to_string(),
            "memory node 2 has layout v7, this binary reads v5"
        );
        let mut bad = b;
        bad[20] ^= 1;
        assert_eq!(
            Superblock::decode(2, &bad).unwrap_err().to_string(),
            "memory node 2: superblock checksum mismatch (corrupt or half-written layout)"
        );
        assert!(Superblock::decode(2, &[0u8; 64])
            .unwrap_err()
            .to_string()
            .contains("has no dtxn pool"));
    }

    /// A superblock names the control chain's length (at least 1) and whether the node is a
    /// seeded member; anything else in those bytes is a stranger's or a torn superblock.
    #[test]
    fn a_superblock_names_the_control_chain() {
        let member = Superblock {
            control_replicas: 3,
            control_member: true,
            log_slices: 0xffff,
            ..sb()
        };
        assert_eq!(Superblock::decode(2, &member.encode()), Ok(member));
        for (k, m) in [(0u8, 0u8), (1, 2)] {
            let mut b = sb().encode();
            b[58] = k;
            b[59] = m;
            let crc = crc32fast::hash(&b[..60]);
            b[60..64].copy_from_slice(&crc.to_le_bytes());
            assert!(
                Superblock::decode(2, &b)
                    .unwrap_err()
                    .to_string()
                    .contains("control chain"),
                "{k} {m}"
            );
        }
    }

    #[test]
    fn catalog_entries_round_trip() {
        let e = CatalogEntry {
            table: 7,
            name: "stock".into(),
            format: RecordFormat::Single,
            rank: 1,
            replicas: vec![2, 0],
            value_size: 300,
            meta_words: 0,
            copies: 1,
            record_bytes: 384,
            table_off: 1 << 16,
            bucket_count: 1000,
            slots_per_bucket: 4,
            bucket_bytes: 64 + 4 * 384,
            overflow_off: 1 << 22,
            overflow_buckets: 200,
            mv: None,
        };
        let mut b = [0u8; ENTRY_BYTES];
        e.encode(&mut b);
        assert_eq!(CatalogEntry::decode(0, &b), Ok(e.clone()));
        // Copies: kept; too few bytes for them, or too many, refused.
        let four = CatalogEntry {
            copies: 4,
            record_bytes: 4 * 384,
            bucket_bytes: 64 + 4 * 4 * 384,
            ..e.clone()
        };
        four.encode(&mut b);
        assert_eq!(CatalogEntry::decode(0, &b), Ok(four.clone()));
        for (copies, record_bytes) in [(4, 3 * 384), (MAX_COPIES as u8 + 1, 4 * 384)] {
            CatalogEntry {
                copies,
                record_bytes,
                ..four.clone()
            }
            .encode(&mut b);
            assert!(CatalogEntry::decode(0, &b).is_err(), "{copies} copies");
        }
        e.encode(&mut b);
        b[4] = 9;
        assert!(CatalogEntry::decode(0, &b).is_err());
    }

    fn with_meta(meta_words: u8) -> CatalogEntry {
        let value_size = 300;
        let record_bytes = SingleVersion::with_meta(value_size, meta_words).bytes() as u32;
        CatalogEntry {
            table: 9,
            name: "lease".into(),
            format: RecordFormat::Single,
            rank: 0,
            replicas: vec![1],
            value_size: value_size as u32,
            meta_words,
            copies: 1,
            record_bytes,
            table_off: 1 << 16,
            bucket_count: 10,
            slots_per_bucket: 2,
            bucket_bytes: 64 + 2 * record_bytes,
            overflow_off: 1 << 20,
            overflow_buckets: 3,
            mv: None,
        }
    }

    #[test]
    fn catalog_entries_round_trip_their_meta_words_in_byte_7() {
        for m in 0..=MAX_META_WORDS as u8 {
            let e = with_meta(m);
            let mut b = [0u8; ENTRY_BYTES];
            e.encode(&mut b);
            assert_eq!(b[7], m);
            assert_eq!(CatalogEntry::decode(0, &b), Ok(e));
        }
    }

    #[test]
    fn an_entry_from_before_meta_words_reads_as_none() {
        // What a pool formatted before metadata words holds: byte 7 was left 0.
        let e = with_meta(0);
        let mut b = [0u8; ENTRY_BYTES];
        e.encode(&mut b);
        b[7] = 0;
        assert_eq!(CatalogEntry::decode(0, &b).unwrap().meta_words, 0);
    }

    #[test]
    fn impossible_meta_words_are_corruption() {
        let mut b = [0u8; ENTRY_BYTES];
        with_meta(0).encode(&mut b);
        b[7] = 5;
        let e = CatalogEntry::decode(3, &b).unwrap_err().to_string();
        assert!(e.contains("5 metadata words"), "{e}");
        // Records too small for their words (300 value bytes + 4 words need 6 lines, not 5).
        let mut small = with_meta(4);
        small.record_bytes = SingleVersion::new(300).bytes() as u32;
        small.encode(&mut b);
        let e = CatalogEntry::decode(3, &b).unwrap_err().to_string();
        assert!(
            e.contains("too small for 300 value bytes and 4 metadata words"),
            "{e}"
        );
    }
}
