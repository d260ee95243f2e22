//! Sizing and placement: from table specs and the pool's shape to every table's geometry and
//! offsets, identical on all of its replicas.

use crate::error::StoreError;
use crate::index::TableInfo;
use crate::layout::{CATALOG_OFF, ENTRY_BYTES, MAX_REPLICAS, NAME_BYTES};
use crate::record::{RecordFormat, SingleVersion, MAX_COPIES, MAX_META_WORDS};
use dtxn_fabric::NodeId;

/// What a workload asks of the store for one table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    pub id: u32,
    pub name: String,
    pub format: RecordFormat,
    pub value_size: usize,
    /// Rows expected (loaded plus inserted later).
    pub rows: u64,
    pub slots_per_bucket: u32,
    /// Rows per slot of the main buckets, in (0, 1].
    pub load_factor: f64,
    /// Overflow buckets as a fraction of the main buckets.
    pub overflow_fraction: f64,
    /// The value's attributes (columns), their sizes in order; empty: one attribute. A
    /// multi-version table keeps pre-images of only the attributes an update changes.
    pub attributes: Vec<u32>,
    /// The updates of this table, as (pre-image bytes, share of the table's updates): sizes a
    /// multi-version record's attribute bar by Motor's formula, each kind of update kept
    /// `max(vnum x share, 1)` times (truncated). Empty: whole-value updates. `[(0, 1.0)]`:
    /// never updated (no bar).
    pub update_mix: Vec<(u32, f64)>,
    /// Versions per CVT of a multi-version table (`format` [`RecordFormat::Cvt`]).
    pub vnum: u8,
    /// Extra 8-byte words per record that the protocol keeps its metadata in (leases,
    /// timestamps, queue locks), 0 to [`MAX_META_WORDS`]; they follow the header in line 0
    /// (see [`crate::record`]). Single-version tables only.
    pub meta_words: u8,
    /// Copies of the record per slot, 1 to [`MAX_COPIES`]: copy 0 is the record, the others
    /// hold older versions (RCC's MVCC version slots, see [`crate::record`]). Single-version
    /// tables only.
    pub copies: u8,
}

impl TableSpec {
    pub fn new(id: u32, name: &str, value_size: usize, rows: u64) -> TableSpec {
        TableSpec {
            id,
            name: name.into(),
            format: RecordFormat::Single,
            value_size,
            rows,
            slots_per_bucket: 4,
            load_factor: 0.75,
            overflow_fraction: 0.25,
            attributes: Vec::new(),
            update_mix: Vec::new(),
            vnum: 4,
            meta_words: 0,
            copies: 1,
        }
    }

    /// This table with `copies` copies of each record (RCC's MVCC version slots).
    pub fn with_copies(mut self, copies: u8) -> TableSpec {
        self.copies = copies;
        self
    }

    /// This table with `words` metadata words per record.
    pub fn with_meta_words(mut self, words: u8) -> TableSpec {
        self.meta_words = words;
        self
    }

    /// Motor's layout for this table, with `vnum` versions per record.
    pub fn multi_version(mut self, vnum: u8) -> TableSpec {
        self.format = RecordFormat::Cvt;
        self.vnum = vnum;
        self
    }

    /// The end offset of each attribute (the value as one attribute if none are declared).
    pub fn attr_ends(&self) -> Vec<u32> {
        if self.attributes.is_empty() {
            return vec![self.value_size as u32];
        }
        self.attributes
            .iter()
            .scan(0u32, |end, &a| {
                *end += a;
                Some(*end)
            })
            .collect()
    }

    /// Lines of a multi-version record's attribute bar (Motor's ABS formula, in stamped
    /// lines: each update's pre-images start a line; those of 8 bytes or less stay in their
    /// Vcell and take none).
    pub fn bar_lines(&self) -> u32 {
        let whole = [(self.value_size as u32, 1.0)];
        let mix: &[(u32, f64)] = if self.update_mix.is_empty() {
            &whole
        } else {
            &self.update_mix
        };
        mix.iter()
            .filter(|&&(bytes, _)| bytes as usize > crate::cvt::INLINE_BYTES)
            .map(|&(bytes, share)| {
                let keep = ((f64::from(self.vnum) * share) as u32).max(1);
                let lines = (bytes.min(self.value_size as u32) as usize)
                    .div_ceil(crate::cvt::BAR_LINE_DATA) as u32;
                keep * lines
            })
            .sum()
    }
}

/// The pool: how many memory nodes, how many replicas per table, how big the log is.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolShape {
    pub memory_nodes: u16,
    /// Copies of every table: a primary and `replicas - 1` backups (FORD's f + 1).
    pub replicas: usize,
    /// Coordinators that may log (one slice each, on every memory node).
    pub log_slices: u32,
    pub log_slice_bytes: u64,
    /// Region size per memory node; `None` sizes the regions to fit.
    pub region_bytes: Option<u64>,
}

impl Default for PoolShape {
    fn default() -> PoolShape {
        PoolShape {
            memory_nodes: 2,
            replicas: 2,
            log_slices: 1024,
            log_slice_bytes: 32 << 10,
            region_bytes: None,
        }
    }
}

/// The layout of a pool: what every memory node's superblock and catalog will say.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub shape: PoolShape,
    pub tables: Vec<TableInfo>,
    pub log_off: u64,
    /// Bytes each memory node needs.
    pub node_need: Vec<u64>,
    /// The region size of every memory node.
    pub region_bytes: u64,
    /// The control chain's length `k`: memory nodes `0..k` hold the pool's control words
    /// (1 unless [`Plan::with_control_replicas`]; see docs/src/control-chain.md).
    pub control_replicas: u8,
}

const PAGE: u64 = 4096;
const MAX_VALUE: usize = 1 << 20;

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

impl Plan {
    pub fn new(specs: &[TableSpec], shape: &PoolShape) -> Result<Plan, StoreError> {
        let nodes = shape.memory_nodes as usize;
        if nodes == 0 {
            return Err(StoreError::NoNodes);
        }
        if shape.replicas == 0 {
            return Err(StoreError::NoReplicas);
        }
        if shape.log_slices > 0xffff {
            return Err(StoreError::TooManyLogSlices(shape.log_slices));
        }
        if shape.replicas > nodes || shape.replicas > MAX_REPLICAS {
            return Err(StoreError::TooManyReplicas {
                replicas: shape.replicas,
                nodes: nodes.min(MAX_REPLICAS),
            });
        }
        let mut ids: Vec<u32> = specs.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(StoreError::DuplicateTable(w[0]));
        }
        let catalog = round_up((specs.len() * ENTRY_BYTES) as u64, PAGE).max(PAGE);
        let log_off = CATALOG_OFF + catalog;
        let log_bytes = u64::from(shape.log_slices) * round_up(shape.log_slice_bytes, 64);
        let base = round_up(log_off + log_bytes, PAGE);
        let mut next_free = vec![base; nodes];
        let mut tables = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            check_spec(s)?;
            let record_bytes = match s.format {
                RecordFormat::Single => {
                    SingleVersion::with_meta(s.value_size, s.meta_words).bytes()
                        * usize::from(s.copies)
                }
                RecordFormat::Cvt => crate::cvt::cvt_bytes(usize::from(s.vnum), s.value_size),
            } as u64;
            let stride = spread_stride(record_bytes);
            let slots = s.slots_per_bucket;
            let bucket_bytes = 64 + u64::from(slots) * stride;
            let per_bucket = f64::from(slots) * s.load_factor;
            let bucket_count = ((s.rows as f64 / per_bucket).ceil() as u64).max(1);
            let overflow_buckets =
                ((bucket_count as f64 * s.overflow_fraction).ceil() as u64).max(1);
            let index_bytes = 64 + (bucket_count + overflow_buckets) * bucket_bytes;
            let slots_total = (bucket_count + overflow_buckets) * u64::from(slots);
            // Multi-version tables: each slot's attribute bar, in a region after the index
            // (only READ and WRITE reach it: no atomics to spread).
            let mv = (s.format == RecordFormat::Cvt).then(|| {
                let value_stride = u64::from(s.bar_lines()) * 64;
                (value_stride, index_bytes + slots_total * value_stride)
            });
            let bytes = mv.map_or(index_bytes, |(_, b)| b);
            if bucket_bytes > u64::from(u32::MAX) {
                return Err(StoreError::BadTable {
                    name: s.name.clone(),
                    what: format!("a bucket of {bucket_bytes} bytes is too large"),
                });
            }
            // Primaries spread round-robin (FORD's SmallBank case study: one node holding every
            // primary is the bottleneck); backups on the following nodes.
            let replicas: Vec<NodeId> = (0..shape.replicas)
                .map(|r| ((i + r) % nodes) as NodeId)
                .collect();
            // Same offset on every replica; tables start at varying line offsets within a page
            // so that their first lock words do not share a NIC atomic-table slot.
            let start = replicas
                .iter()
                .map(|&n| next_free[n as usize])
                .max()
                .expect("a replica");
            let table_off = round_up(start, PAGE) + (i as u64 % 64) * 64;
            for &n in &replicas {
                next_free[n as usize] = table_off + bytes;
            }
            tables.push(TableInfo {
                id: s.id,
                name: s.name.clone(),
                format: s.format,
                value_size: s.value_size as u32,
                meta_words: s.meta_words,
                copies: s.copies,
                record_bytes: record_bytes as u32,
                slot_stride: stride,
                slots_per_bucket: slots,
                bucket_bytes,
                bucket_count,
                overflow_buckets,
                joining: 0,
                table_off,
                overflow_off: table_off + 64 + bucket_count * bucket_bytes,
                replicas,
                mv: mv.map(|(value_stride, _)| crate::cvt::MvInfo {
                    vnum: s.vnum,
                    bar_lines: s.bar_lines(),
                    values_off: table_off + index_bytes,
                    value_stride,
                    attr_ends: s.attr_ends().into(),
                }),
            });
        }
        let node_need: Vec<u64> = next_free;
        let needed = round_up(*node_need.iter().max().expect("a node"), 1 << 20);
        let region_bytes = shape.region_bytes.unwrap_or(needed);
        for (n, &need) in node_need.iter().enumerate() {
            if need > region_bytes {
                let table = tables
                    .iter()
                    .rev()
                    .find(|t| t.replicas.contains(&(n as NodeId)))
                    .map_or("(logs)".to_string(), |t| t.name.clone());
                return Err(StoreError::DoesNotFit {
                    node: n as NodeId,
                    table,
                    need,
                    have: region_bytes,
                });
            }
        }
        Ok(Plan {
            shape: shape.clone(),
            tables,
            log_off,
            node_need,
            region_bytes,
            control_replicas: 1,
        })
    }

    /// The plan with memory nodes `0..k` holding the control words (the control chain), not
    /// node 0 alone: 1 to the pool's memory nodes, and at most [`MAX_REPLICAS`].
    pub fn with_control_replicas(mut self, k: u8) -> Result<Plan, StoreError> {
        let max = (MAX_REPLICAS as u16).min(self.shape.memory_nodes) as u8;
        if k == 0 || k > max {
            return Err(StoreError::ControlReplicas {
                asked: k,
                nodes: self.shape.memory_nodes,
                max,
            });
        }
        self.control_replicas = k;
        Ok(self)
    }

    pub fn table(&self, id: u32) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.id == id)
    }

    /// This plan as seen in `view`: each table's replicas are its live ones, the first its
    /// primary (what checks after a run with failed memory nodes read). A table whose every
    /// replica failed is an error.
    pub fn in_view(&self, view: crate::View) -> Result<Plan, StoreError> {
        let mut p = self.clone();
        for t in &mut p.tables {
            t.replicas = view.live(&t.replicas);
            if t.replicas.is_empty() {
                return Err(StoreError::TableLost {
                    table: t.id,
                    view: view.to_string(),
                });
            }
        }
        Ok(p)
    }
}

fn check_spec(s: &TableSpec) -> Result<(), StoreError> {
    let bad = |what: String| StoreError::BadTable {
        name: s.name.clone(),
        what,
    };
    if s.name.is_empty() || s.name.len() > NAME_BYTES {
        return Err(bad(format!("names are 1 to {NAME_BYTES} bytes")));
    }
    if s.value_size > MAX_VALUE {
        return Err(bad(format!("values are at most {MAX_VALUE} bytes")));
    }
    if !(1..=64).contains(&s.slots_per_bucket) {
        return Err(bad("slots per bucket must be 1 to 64".into()));
    }
    if !(s.load_factor > 0.0 && s.load_factor <= 1.0) {
        return Err(bad(format!(
            "load factor {} is not in (0, 1]",
            s.load_factor
        )));
    }
    if !(s.overflow_fraction >= 0.0 && s.overflow_fraction.is_finite()) {
        return Err(bad(format!("overflow fraction {}", s.overflow_fraction)));
    }
    if !s.attributes.is_empty() {
        let sum: u64 = s.attributes.iter().map(|&a| u64::from(a)).sum();
        if sum != s.value_size as u64 || s.attributes.contains(&0) {
            return Err(bad(format!(
                "attributes of {:?} bytes do not add up to the value size {}",
                s.attributes, s.value_size
            )));
        }
    }
    if !(1..=MAX_COPIES).contains(&usize::from(s.copies))
        || (s.copies > 1 && s.format != RecordFormat::Single)
    {
        return Err(bad(format!(
            "records have 1 to {MAX_COPIES} copies (single-version tables only), not {}",
            s.copies
        )));
    }
    if usize::from(s.meta_words) > MAX_META_WORDS {
        return Err(bad(format!(
            "records have at most {MAX_META_WORDS} metadata words, not {}",
            s.meta_words
        )));
    }
    if s.format == RecordFormat::Cvt {
        use crate::cvt::{MAX_ATTRS, MAX_VNUM};
        // Motor needs none; a CVT would have to say which of its lines holds them.
        if s.meta_words > 0 {
            return Err(bad(format!(
                "multi-version (CVT) tables have no metadata words yet, {} asked",
                s.meta_words
            )));
        }
        if !(1..=MAX_VNUM).contains(&usize::from(s.vnum)) {
            return Err(bad(format!(
                "versions per record (vnum) must be 1 to {MAX_VNUM}, not {}",
                s.vnum
            )));
        }
        if s.attributes.len() > MAX_ATTRS {
            return Err(bad(format!(
                "a multi-version table has at most {MAX_ATTRS} attributes, not {}",
                s.attributes.len()
            )));
        }
        if s.bar_lines() > crate::cvt::MAX_BAR_LINES {
            return Err(bad(format!(
                "the attribute bar needs {} lines, at most {} fit (declare a smaller update \
                 mix)",
                s.bar_lines(),
                crate::cvt::MAX_BAR_LINES
            )));
        }
    }
    Ok(())
}

/// The distance between consecutive record slots: the record rounded to lines, plus one line
/// if otherwise fewer than 16 consecutive records would have distinct `addr mod 4096` (the NIC
/// serializes atomics on those bits, G10: lock words at a 4 KiB stride behave like one lock).
pub fn spread_stride(record_bytes: u64) -> u64 {
    let mut stride = round_up(record_bytes.max(64), 64);
    while PAGE / gcd(stride, PAGE) < 16 {
        stride += 64;
    }
    stride
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(nodes: u16, replicas: usize) -> PoolShape {
        PoolShape {
            memory_nodes: nodes,
            replicas,
            log_slices: 8,
            log_slice_bytes: 4096,
            region_bytes: None,
        }
    }

    proptest::proptest! {
        /// Any slots per bucket (1 to 64) on any table: every slot lies inside its own bucket,
        /// inside its table, lines up with `slot`/`is_slot`, and the main and overflow slots
        /// hold the rows asked for at the load factor.
        #[test]
        fn every_slot_count_lays_out_disjoint_slots_inside_the_table(
            slots in 1u32..=64,
            value in 8usize..700,
            rows in 1u64..5000,
            cvt in proptest::bool::ANY,
        ) {
            let mut spec = TableSpec::new(1, "t", value, rows);
            spec.slots_per_bucket = slots;
            if cvt {
                spec = spec.multi_version(2);
            }
            let other = TableSpec::new(2, "u", 8, 10);
            let p = Plan::new(&[spec.clone(), other], &shape(2, 2)).unwrap();
            let t = p.table(1).unwrap();
            let u = p.table(2).unwrap();
            proptest::prop_assert_eq!(t.slots_per_bucket, slots);
            proptest::prop_assert!(t.slot_stride >= u64::from(t.record_bytes));
            proptest::prop_assert!(t.bucket_count as f64 * f64::from(slots) >= rows as f64 * spec.load_factor);
            let end = t.table_off + t.bytes();
            proptest::prop_assert!(u.table_off >= end || u.table_off + u.bytes() <= t.table_off);
            for b in [0, t.bucket_count - 1, t.bucket_count, t.bucket_count + t.overflow_buckets - 1] {
                let bucket = t.table_off + 64 + b * t.bucket_bytes;
                if b >= t.bucket_count {
                    proptest::prop_assert_eq!(bucket, t.overflow_bucket(b - t.bucket_count));
                }
                for i in 0..slots {
                    let off = t.slot(bucket, i);
                    proptest::prop_assert!(t.is_slot(off));
                    proptest::prop_assert!(off >= bucket + 64);
                    proptest::prop_assert!(off + u64::from(t.record_bytes) <= bucket + t.bucket_bytes);
                    proptest::prop_assert!(off + u64::from(t.record_bytes) <= end);
                    proptest::prop_assert!(!t.is_slot(off + 8));
                }
            }
        }
    }

    #[test]
    fn replicas_share_offsets_on_distinct_nodes_and_primaries_spread() {
        let specs: Vec<TableSpec> = (0..6)
            .map(|i| TableSpec::new(i, &format!("t{i}"), 40 + 100 * i as usize, 1000))
            .collect();
        let p = Plan::new(&specs, &shape(3, 2)).unwrap();
        let mut primaries = [0; 3];
        for t in &p.tables {
            assert_eq!(t.replicas.len(), 2);
            assert_ne!(t.replicas[0], t.replicas[1]);
            primaries[t.replicas[0] as usize] += 1;
            assert!(t.table_off >= p.log_off + 8 * 4096);
            assert_eq!(t.table_off % 64, 0);
        }
        assert_eq!(primaries, [2, 2, 2]);
        // No two tables overlap on any node.
        for n in 0..3u16 {
            let mut spans: Vec<(u64, u64)> = p
                .tables
                .iter()
                .filter(|t| t.replicas.contains(&n))
                .map(|t| (t.table_off, t.table_off + t.bytes()))
                .collect();
            spans.sort_unstable();
            assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");
            assert!(spans.last().unwrap().1 <= p.region_bytes);
        }
    }

    #[test]
    fn bad_shapes_and_tables_are_errors_with_reasons() {
        let t = [TableSpec::new(1, "a", 8, 10)];
        assert_eq!(
            Plan::new(&t, &shape(2, 3)).unwrap_err().to_string(),
            "3 replicas need 3 distinct memory nodes; the pool has 2"
        );
        assert_eq!(
            Plan::new(&t, &shape(2, 0)).unwrap_err(),
            StoreError::NoReplicas
        );
        let mut many = shape(1, 1);
        many.log_slices = 65536;
        assert_eq!(
            Plan::new(&t, &many).unwrap_err(),
            StoreError::TooManyLogSlices(65536)
        );
        let mut small = shape(1, 1);
        small.region_bytes = Some(1 << 16);
        let big = [TableSpec::new(1, "stock", 300, 100_000)];
        let e = Plan::new(&big, &small).unwrap_err().to_string();
        assert!(e.starts_with("memory node 0 needs "), "{e}");
        assert!(
            e.contains("its region has 65536 (table 'stock' does not fit)"),
            "{e}"
        );
        let dup = [TableSpec::new(1, "a", 8, 10), TableSpec::new(1, "b", 8, 10)];
        assert_eq!(
            Plan::new(&dup, &shape(1, 1)).unwrap_err(),
            StoreError::DuplicateTable(1)
        );
        let mut lf = TableSpec::new(1, "a", 8, 10);
        lf.load_factor = 0.0;
        assert!(Plan::new(&[lf], &shape(1, 1))
            .unwrap_err()
            .to_string()
            .contains("load factor"));
    }

    #[test]
    fn tables_are_laid_out_with_their_meta_words() {
        // 312 value bytes (TPC-C stock) fill 6 lines: any word adds a seventh.
        let specs = [
            TableSpec::new(1, "bare", 312, 100),
            TableSpec::new(2, "lease", 312, 100).with_meta_words(2),
            TableSpec::new(3, "queue", 312, 100).with_meta_words(4),
        ];
        let p = Plan::new(&specs, &shape(2, 2)).unwrap();
        let words: Vec<u8> = p.tables.iter().map(|t| t.meta_words).collect();
        assert_eq!(words, [0, 2, 4]);
        let records: Vec<u32> = p.tables.iter().map(|t| t.record_bytes).collect();
        assert_eq!(records, [384, 448, 448]);
        for t in &p.tables {
            assert_eq!(t.codec().meta_words(), usize::from(t.meta_words));
            assert_eq!(t.codec().bytes(), t.record_bytes as usize);
            assert!(t.slot_stride >= u64::from(t.record_bytes));
        }
    }

    #[test]
    fn copies_multiply_the_record_and_are_bounded() {
        let specs = [
            TableSpec::new(1, "one", 24, 100).with_meta_words(1),
            TableSpec::new(2, "four", 24, 100)
                .with_meta_words(1)
                .with_copies(4),
        ];
        let p = Plan::new(&specs, &shape(2, 2)).unwrap();
        let records: Vec<(u8, u32, usize)> = p
            .tables
            .iter()
            .map(|t| (t.copies, t.record_bytes, t.copy_bytes()))
            .collect();
        assert_eq!(records, [(1, 64, 64), (4, 256, 64)]);
        for bad in [0, MAX_COPIES as u8 + 1] {
            let s = [TableSpec::new(1, "t", 24, 100).with_copies(bad)];
            assert!(Plan::new(&s, &shape(2, 2)).is_err(), "{bad} copies");
        }
        let cvt = [TableSpec::new(1, "t", 24, 100)
            .multi_version(2)
            .with_copies(2)];
        assert!(Plan::new(&cvt, &shape(2, 2)).is_err());
    }

    #[test]
    fn meta_words_beyond_four_or_on_cvts_are_refused() {
        let five = TableSpec::new(1, "a", 8, 10).with_meta_words(5);
        assert_eq!(
            Plan::new(&[five], &shape(1, 1)).unwrap_err().to_string(),
            "table 'a': records have at most 4 metadata words, not 5"
        );
        let cvt = TableSpec::new(1, "a", 8, 10)
            .multi_version(4)
            .with_meta_words(1);
        let e = Plan::new(&[cvt], &shape(1, 1)).unwrap_err().to_string();
        assert!(
            e.contains("multi-version (CVT) tables have no metadata words yet, 1 asked"),
            "{e}"
        );
    }

    /// G10: consecutive records' lock words fall in distinct NIC atomic-table slots.
    #[test]
    fn lock_words_of_consecutive_records_spread_mod_4096() {
        for value_size in (0..9000).step_by(8) {
            let rec = RecordFormat::Single.record_bytes(value_size) as u64;
            let stride = spread_stride(rec);
            assert!(stride >= rec && stride.is_multiple_of(64));
            assert!(
                stride - round_up(rec, 64) <= 64,
                "at most one line of padding"
            );
            let mut residues: Vec<u64> = (0..16).map(|i| (i * stride) % 4096).collect();
            residues.sort_unstable();
            residues.dedup();
            assert_eq!(
                residues.len(),
                16,
                "value size {value_size}, stride {stride}"
            );
        }
    }
}
