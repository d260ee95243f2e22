//! A compute node's map of the pool, learnt with one-sided READs only; and the memory-node side
//! that writes the layout and loads tables at start-up.

use crate::error::StoreError;
use crate::index::TableInfo;
use crate::layout::{
    CatalogEntry, Superblock, CATALOG_OFF, ENTRY_BYTES, SUPERBLOCK_BYTES, VIEW_OFF,
};
use crate::plan::Plan;
use crate::record::RecordHeader;
use crate::view::View;
use dtxn_fabric::{Endpoint, FabricError, LocalMem, NodeId, NodeSet, Pool};
use std::collections::BTreeMap;

/// Everything a coordinator needs to find data and logs, in one view of the pool
/// ([`View`]): the catalog never changes after start-up, and a view only removes failed
/// memory nodes from it ([`PoolMap::in_view`]), so compute nodes synchronize nothing but the
/// view word.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolMap {
    /// The live memory nodes' superblocks, ascending by id.
    pub nodes: Vec<Superblock>,
    /// Memory nodes in the pool, live or failed.
    node_count: u16,
    view: View,
    /// Every table as the catalog places it (failed replicas too), ascending by id.
    catalog: Vec<TableInfo>,
    /// The tables with a live replica, ascending by id, each with its live replicas only.
    tables: Vec<TableInfo>,
    /// Tables whose every replica failed, ascending.
    lost: Vec<u32>,
    /// Recovery of a coordinator that died in an older view: its locks on the primaries that
    /// failed since are lost ([`PoolMap::lost_locks`]).
    older_view: bool,
    /// For table ids below [`DENSE_IDS`]: 1 + the table's position in `tables`, or 0 if there
    /// is no such table. Every verb a transaction posts looks its table up, and a map probe
    /// per verb was 2% of a TPC-C worker.
    by_id: Vec<u16>,
}

/// Table ids below this are found by direct index; others (the workloads use small ids) by a
/// binary search.
const DENSE_IDS: u32 = 1024;

impl PoolMap {
    /// A map of these tables (any order; ids unique) in `view`.
    fn new(
        nodes: Vec<Superblock>,
        node_count: u16,
        view: View,
        catalog: BTreeMap<u32, TableInfo>,
    ) -> PoolMap {
        let catalog: Vec<TableInfo> = catalog.into_values().collect();
        let mut tables = Vec::with_capacity(catalog.len());
        let mut lost = Vec::new();
        for t in &catalog {
            let mut replicas = view.live(&t.replicas);
            if replicas.is_empty() {
                lost.push(t.id);
            } else {
                let joiners = view.joiners(&t.replicas);
                replicas.extend(&joiners);
                tables.push(TableInfo {
                    replicas,
                    joining: joiners.len() as u8,
                    ..t.clone()
                });
            }
        }
        let dense = tables
            .iter()
            .map(|t| t.id)
            .filter(|&id| id < DENSE_IDS)
            .max()
            .map_or(0, |m| m as usize + 1);
        let mut by_id = vec![0u16; dense];
        for (pos, t) in tables.iter().enumerate() {
            if t.id < DENSE_IDS {
                // At most DENSE_IDS tables are indexed, so the position fits.
                by_id[t.id as usize] = pos as u16 + 1;
            }
        }
        // A node back from failure (joining) was not read at bootstrap: its superblock is the
        // one its copier formats it with, every node's but its id.
        let nodes = (0..node_count)
            .filter(|&n| !view.is_failed(n))
            .filter_map(|n| match nodes.iter().find(|sb| sb.node == n) {
                Some(sb) => Some(*sb),
                None => nodes.first().map(|sb| Superblock {
                    node: n,
                    control_member: false,
                    ..*sb
                }),
            })
            .collect();
        PoolMap {
            nodes,
            node_count,
            view,
            catalog,
            tables,
            lost,
            older_view: false,
            by_id,
        }
    }

    /// This map, for recovering a coordinator that died in an older view than this one: the
    /// lock words it held on a failed primary are gone, which [`PoolMap::lost_locks`] says.
    /// (Its commits may not have written the joining replicas: recovery judges a commit by
    /// the readable replicas alone, see `dtxn_txn`'s `mechanisms/settle.rs`.)
    pub fn for_older_view(&self) -> PoolMap {
        PoolMap {
            older_view: true,
            ..self.clone()
        }
    }

    /// This map with no joining replica (a negative control's: commits that do not write the
    /// joiners, which re-replication needs them to).
    #[doc(hidden)]
    pub fn without_joiners(&self) -> PoolMap {
        let mut m = self.clone();
        for t in &mut m.tables {
            let n = t.readable().len();
            t.replicas.truncate(n);
            t.joining = 0;
        }
        m
    }

    /// The locks on `t`'s primary that a coordinator being recovered held are lost (it died
    /// in an older view, before `t`'s backup was promoted: see [`PoolMap::for_older_view`]).
    pub fn lost_locks(&self, t: &TableInfo) -> bool {
        self.older_view && self.is_promoted(t)
    }

    /// The same pool in `view` (a later view: more memory nodes failed): each table's
    /// replicas are its live ones, the first live one its primary.
    pub fn in_view(&self, view: View) -> PoolMap {
        PoolMap::new(
            self.nodes.clone(),
            self.node_count,
            view,
            self.catalog.iter().map(|t| (t.id, t.clone())).collect(),
        )
    }

    /// The view this map is of.
    pub fn view(&self) -> View {
        self.view
    }

    /// The live memory nodes, ascending.
    pub fn live_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().map(|sb| sb.node)
    }

    /// Memory nodes in the pool, live or failed.
    pub fn node_count(&self) -> u16 {
        self.node_count
    }

    #[inline]
    pub fn table(&self, id: u32) -> Result<&TableInfo, StoreError> {
        let pos = match self.by_id.get(id as usize) {
            Some(&p) => (p as usize).checked_sub(1),
            None => self.tables.binary_search_by_key(&id, |t| t.id).ok(),
        };
        match pos {
            Some(p) => Ok(&self.tables[p]),
            None if self.lost.binary_search(&id).is_ok() => Err(StoreError::TableLost {
                table: id,
                view: self.view.to_string(),
            }),
            None => Err(StoreError::NoSuchTable(id)),
        }
    }

    /// Every table with a live replica, ascending by id.
    pub fn tables(&self) -> impl Iterator<Item = &TableInfo> {
        self.tables.iter()
    }

    /// The tables whose primary in this view is not the catalog's (a backup was promoted),
    /// or is a node that rejoined (it came back blank: its overflow counter and words only
    /// a primary keeps are not the primary's).
    pub fn promoted(&self) -> impl Iterator<Item = &TableInfo> {
        self.tables.iter().filter(|t| self.is_promoted(t))
    }

    /// The promoted tables ([`PoolMap::promoted`]) whose primary is not yet repaired, `repaired`
    /// being the view repaired last: if that is the view just before this one, those whose
    /// primary changed in the step (another node, or the same node in another state); after
    /// a gap of views, every promoted table. (A primary unchanged over a step served in the
    /// repaired view, repaired itself if it was promoted, and nothing of its changed since.)
    pub fn promoted_since(&self, repaired: View) -> impl Iterator<Item = &TableInfo> {
        let before = (repaired.number.checked_add(1) == Some(self.view.number))
            .then(|| self.in_view(repaired));
        self.tables.iter().filter(move |t| {
            if !self.is_promoted(t) {
                return false;
            }
            let Some(before) = &before else {
                return true;
            };
            let now = t.primary();
            match before.table(t.id) {
                Ok(b) => {
                    b.primary() != now
                        || repaired.is_failed(now) != self.view.is_failed(now)
                        || repaired.is_joining(now) != self.view.is_joining(now)
                        || repaired.is_rejoined(now) != self.view.is_rejoined(now)
                }
                Err(_) => true,
            }
        })
    }

    /// `t` (a table of this map) has a promoted backup for its primary.
    pub fn is_promoted(&self, t: &TableInfo) -> bool {
        if self.view.is_rejoined(t.replicas[0]) {
            return true;
        }
        match self.catalog.binary_search_by_key(&t.id, |c| c.id) {
            Ok(c) => self.catalog[c].replicas[0] != t.replicas[0],
            Err(_) => false,
        }
    }

    /// The catalog's replicas of table `id` (failed ones too), by rank.
    pub fn catalog_replicas(&self, id: u32) -> Option<&[NodeId]> {
        self.catalog
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .map(|c| self.catalog[c].replicas.as_slice())
    }

    /// The catalog as the memory nodes hold it (every table, failed replicas too).
    pub fn catalog(&self) -> &[TableInfo] {
        &self.catalog
    }

    /// What a blank memory node `node` must be given to join the pool (issue #23,
    /// re-replication): its catalog and then its superblock, as (offset, bytes), in the order
    /// to WRITE them on one QP (the superblock last, so a half-formatted node never passes
    /// bootstrap, as in [`Plan::format`]); its tables and logs are zero on a blank node.
    pub fn format_image(&self, node: NodeId, region_size: u64) -> Vec<(u64, Vec<u8>)> {
        let entries: Vec<CatalogEntry> = self
            .catalog
            .iter()
            .filter_map(|t| {
                let rank = t.replicas.iter().position(|&n| n == node)?;
                Some(CatalogEntry {
                    table: t.id,
                    name: t.name.clone(),
                    format: t.format,
                    rank: rank as u8,
                    replicas: t.replicas.clone(),
                    value_size: t.value_size,
                    meta_words: t.meta_words,
                    copies: t.copies,
                    record_bytes: t.record_bytes,
                    table_off: t.table_off,
                    bucket_count: t.bucket_count,
                    slots_per_bucket: t.slots_per_bucket,
                    bucket_bytes: t.bucket_bytes as u32,
                    overflow_off: t.overflow_off,
                    overflow_buckets: t.overflow_buckets,
                    mv: t.mv.clone(),
                })
            })
            .collect();
        let mut cat = vec![0u8; entries.len() * ENTRY_BYTES];
        for (e, b) in entries.iter().zip(cat.chunks_mut(ENTRY_BYTES)) {
            e.encode(b);
        }
        let sb = Superblock {
            node,
            nodes: self.node_count,
            region_size,
            catalog_entries: entries.len() as u32,
            catalog_crc: crc32fast::hash(&cat),
            // A blank node holds no control words: a member again only once seeded.
            control_member: false,
            ..self.nodes[0]
        };
        vec![(CATALOG_OFF, cat), (0, sb.encode().to_vec())]
    }

    /// The control chain's length `k` the pool was formatted with (memory nodes `0..k`).
    pub fn control_replicas(&self) -> u8 {
        self.nodes.first().map_or(1, |sb| sb.control_replicas)
    }

    /// The control chain in this view, head first: the members (nodes `0..k`) that never
    /// failed. A failed one that rejoined comes back as a data replica only: its control
    /// words are blank, and re-seeding them is the design's last increment
    /// (`docs/src/control-chain.md`, 4.10). Empty: every member failed, and the control
    /// words are lost.
    pub fn control_chain(&self) -> Vec<NodeId> {
        self.view.control_chain(self.control_replicas())
    }

    /// Whether memory node `n` is the control chain's last member in this view: its loss
    /// is the pool's (the control words go with it). With one member, node 0.
    pub fn holds_control_alone(&self, n: NodeId) -> bool {
        self.control_chain() == [n]
    }

    /// The control chain's members in this view, as a set: where lease and acknowledgement
    /// words have their copies.
    pub fn control_set(&self) -> NodeSet {
        self.control_chain().into_iter().collect()
    }

    /// Tables whose every replica failed, ascending.
    pub fn lost(&self) -> &[u32] {
        &self.lost
    }

    pub fn table_by_name(&self, name: &str) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// The log slice of coordinator `slice` (same offset on every memory node).
    pub fn log_slice(&self, slice: u32) -> Option<(u64, u64)> {
        let sb = &self.nodes[0];
        (slice < sb.log_slices).then(|| {
            (
                sb.log_off + u64::from(slice) * sb.log_slice_bytes,
                sb.log_slice_bytes,
            )
        })
    }

    /// Learns the pool from its memory nodes with one-sided READs: the superblocks of all
    /// nodes and the view in one batch, then the live nodes' catalogs in another (two round
    /// trips). If a memory node does not answer, the view is read alone first and only the
    /// nodes it holds live are asked (one more round trip); a node down that the view still
    /// holds live is an error (nobody has changed the view yet).
    ///
    /// With a control chain of more than one member (`k > 1`, in the superblocks), the view
    /// word read at node 0, the chain's head, may be a write not yet committed: the view is
    /// the **tail**'s word, the last member that answers (one more round trip). The members
    /// are the nodes below `k` whose superblock says they were seeded and never failed (a
    /// replacement is formatted as no member). Node 0 down: the superblocks of the others
    /// give `k`, and the tail the view, which must have failed node 0 (else node 0's
    /// `NodeDown`, as for any node the view holds live). With `k = 1` node 0 holds the view
    /// alone, and its loss is the pool's.
    pub async fn bootstrap(ep: &mut Endpoint) -> Result<PoolMap, StoreError> {
        let n = ep.node_sizes().len();
        let view = ep.read(0, VIEW_OFF, 8);
        let reads: Vec<_> = (0..n)
            .map(|node| ep.read(node as NodeId, 0, SUPERBLOCK_BYTES))
            .collect();
        // Each node's superblock, where it was read.
        let (head_view, sbs): (Option<View>, Superblocks) = match ep.post().await {
            Ok(()) => {
                let sbs = reads.iter().map(|&r| Some(ep.bytes(r).to_vec())).collect();
                (Some(View::parse(ep.word(view, 0))), sbs)
            }
            Err(FabricError::NodeDown(down)) if down != 0 => {
                match past_one_down(ep, n, down).await? {
                    Some(found) => found,
                    None => (None, read_superblocks(ep, n).await?),
                }
            }
            Err(FabricError::NodeDown(_)) => (None, read_superblocks(ep, n).await?),
            Err(e) => return Err(e.into()),
        };
        // The chain's length, from any superblock that decodes.
        let decoded: Vec<Option<Superblock>> = sbs
            .iter()
            .enumerate()
            .map(|(node, b)| {
                b.as_ref()
                    .and_then(|b| Superblock::decode(node as NodeId, b).ok())
            })
            .collect();
        let (k, members) = chain_members(decoded.iter().flatten());
        let view = match (head_view, k) {
            (Some(v), 1) => v,
            // Node 0 holds the view alone (and may be down: then so is the pool).
            (None, 1) => {
                let w = ep.read(0, VIEW_OFF, 8);
                ep.post().await?;
                View::parse(ep.word(w, 0))
            }
            _ => tail_view(ep, &members).await?,
        };
        // A node the view holds live whose superblock was not read is down, and nobody
        // has changed the view yet. (A failed node's superblock is not decoded: it may
        // answer again, with nothing.)
        let mut nodes = Vec::with_capacity(n);
        for (node, b) in sbs.iter().enumerate() {
            let node = node as NodeId;
            if view.is_failed(node) {
                continue;
            }
            match b {
                Some(b) => nodes.push(Superblock::decode(node, b)?),
                None => return Err(FabricError::NodeDown(node).into()),
            }
        }
        for sb in &nodes {
            if usize::from(sb.nodes) != n {
                return Err(StoreError::Corrupt {
                    node: sb.node,
                    what: format!("it belongs to a pool of {} memory nodes, not {n}", sb.nodes),
                });
            }
        }
        let reads: Vec<_> = nodes
            .iter()
            .map(|sb| ep.read(sb.node, CATALOG_OFF, sb.catalog_bytes()))
            .collect();
        ep.post().await?;
        let mut catalogs = Vec::with_capacity(nodes.len());
        for (sb, id) in nodes.iter().zip(reads) {
            let bytes = ep.bytes(id);
            if crc32fast::hash(bytes) != sb.catalog_crc {
                return Err(StoreError::Checksum {
                    node: sb.node,
                    what: "catalog",
                });
            }
            let entries = bytes
                .chunks(ENTRY_BYTES)
                .map(|e| CatalogEntry::decode(sb.node, e))
                .collect::<Result<Vec<_>, _>>()?;
            catalogs.push(entries);
        }
        PoolMap::from_catalogs(view, n as u16, nodes, catalogs)
    }

    /// Merges the live nodes' catalogs (`catalogs[i]` is `nodes[i]`'s), checking that every
    /// replica tells the same story and that every live replica of every table is there.
    pub fn from_catalogs(
        view: View,
        node_count: u16,
        nodes: Vec<Superblock>,
        catalogs: Vec<Vec<CatalogEntry>>,
    ) -> Result<PoolMap, StoreError> {
        let mut tables: BTreeMap<u32, TableInfo> = BTreeMap::new();
        let mut seen: BTreeMap<u32, Vec<NodeId>> = BTreeMap::new();
        for (sb, entries) in nodes.iter().zip(&catalogs) {
            for e in entries {
                let node = sb.node;
                let inconsistent = |what: String| StoreError::Inconsistent {
                    table: e.table,
                    what,
                };
                if e.replicas.get(e.rank as usize) != Some(&node) {
                    return Err(inconsistent(format!(
                        "memory node {node} holds rank {} but the catalog places it on {:?}",
                        e.rank, e.replicas
                    )));
                }
                let info = info_of(e);
                match tables.get(&e.table) {
                    None => {
                        tables.insert(e.table, info);
                    }
                    Some(t) if *t != info => {
                        return Err(inconsistent(format!(
                            "memory node {node} describes it differently from memory node {}",
                            t.replicas[seen[&e.table][0] as usize]
                        )))
                    }
                    Some(_) => {}
                }
                seen.entry(e.table).or_default().push(e.rank.into());
            }
        }
        for (table, ranks) in &mut seen {
            ranks.sort_unstable();
            let want: Vec<NodeId> = (0..tables[table].replicas.len() as NodeId)
                .filter(|&r| !view.is_failed(tables[table].replicas[r as usize]))
                .collect();
            if *ranks != want {
                return Err(StoreError::Inconsistent {
                    table: *table,
                    what: format!("replica ranks {ranks:?} found, {want:?} expected"),
                });
            }
        }
        Ok(PoolMap::new(nodes, node_count, view, tables))
    }
}

fn info_of(e: &CatalogEntry) -> TableInfo {
    TableInfo {
        id: e.table,
        name: e.name.clone(),
        format: e.format,
        value_size: e.value_size,
        meta_words: e.meta_words,
        copies: e.copies,
        record_bytes: e.record_bytes,
        slot_stride: (u64::from(e.bucket_bytes) - 64) / u64::from(e.slots_per_bucket.max(1)),
        slots_per_bucket: e.slots_per_bucket,
        bucket_bytes: u64::from(e.bucket_bytes),
        bucket_count: e.bucket_count,
        overflow_buckets: e.overflow_buckets,
        joining: 0,
        table_off: e.table_off,
        overflow_off: e.overflow_off,
        replicas: e.replicas.clone(),
        mv: e.mv.clone(),
    }
}

impl Plan {
    /// What memory node `node`'s catalog says: one entry per table replica it holds.
    pub fn catalog_of(&self, node: NodeId) -> Vec<CatalogEntry> {
        self.tables
            .iter()
            .filter_map(|t| {
                let rank = t.replicas.iter().position(|&n| n == node)?;
                Some(CatalogEntry {
                    table: t.id,
                    name: t.name.clone(),
                    format: t.format,
                    rank: rank as u8,
                    replicas: t.replicas.clone(),
                    value_size: t.value_size,
                    meta_words: t.meta_words,
                    copies: t.copies,
                    record_bytes: t.record_bytes,
                    table_off: t.table_off,
                    bucket_count: t.bucket_count,
                    slots_per_bucket: t.slots_per_bucket,
                    bucket_bytes: t.bucket_bytes as u32,
                    overflow_off: t.overflow_off,
                    overflow_buckets: t.overflow_buckets,
                    mv: t.mv.clone(),
                })
            })
            .collect()
    }

    /// Formats every memory node of `pool` (see [`Plan::format`]).
    pub fn format_pool(&self, pool: &Pool) -> Result<(), StoreError> {
        for node in 0..self.shape.memory_nodes {
            pool.with_local(node, |m| self.format(node, m))?;
        }
        Ok(())
    }

    /// Writes memory node `node`'s superblock, catalog, and empty tables and logs, with the
    /// node's own CPU (allowed at start-up only, as in the papers). The catalog goes first and
    /// the superblock last, so a half-formatted region never passes bootstrap.
    pub fn format(&self, node: NodeId, mem: &mut dyn LocalMem) -> Result<(), StoreError> {
        if mem.size() < self.region_bytes {
            return Err(StoreError::DoesNotFit {
                node,
                table: "(whole pool)".into(),
                need: self.region_bytes,
                have: mem.size(),
            });
        }
        let entries = self.catalog_of(node);
        let mut cat = vec![0u8; entries.len() * ENTRY_BYTES];
        for (e, b) in entries.iter().zip(cat.chunks_mut(ENTRY_BYTES)) {
            e.encode(b);
        }
        mem.write(0, &[0u8; SUPERBLOCK_BYTES]);
        mem.write_u64(crate::layout::CLAIM_OFF, 0);
        mem.write_u64(crate::layout::ORACLE_OFF, 0);
        let control = node < NodeId::from(self.control_replicas);
        if control {
            let members = crate::layout::MEMBERSHIP_END;
            mem.write(
                crate::layout::LEADER_OFF,
                &vec![0u8; (members - crate::layout::LEADER_OFF) as usize],
            );
        }
        mem.write(CATALOG_OFF, &cat);
        let zero = vec![0u8; 1 << 16];
        let log_end = self.log_off
            + u64::from(self.shape.log_slices) * self.shape.log_slice_bytes.div_ceil(64) * 64;
        zero_range(mem, self.log_off, log_end, &zero);
        for t in self.tables.iter().filter(|t| t.replicas.contains(&node)) {
            zero_range(mem, t.table_off, t.table_off + t.bytes(), &zero);
        }
        let sb = Superblock {
            node,
            nodes: self.shape.memory_nodes,
            region_size: mem.size(),
            catalog_entries: entries.len() as u32,
            catalog_crc: crc32fast::hash(&cat),
            log_off: self.log_off,
            log_slice_bytes: self.shape.log_slice_bytes.div_ceil(64) * 64,
            log_slices: self.shape.log_slices,
            control_replicas: self.control_replicas,
            control_member: control,
        };
        mem.write(0, &sb.encode());
        Ok(())
    }
}

fn zero_range(mem: &mut dyn LocalMem, from: u64, to: u64, zero: &[u8]) {
    let mut at = from;
    while at < to {
        let n = (to - at).min(zero.len() as u64);
        mem.write(at, &zero[..n as usize]);
        at += n;
    }
}

/// Bulk-loads records at start-up with the memory nodes' CPUs: each record is placed once (on
/// the primary's index) and the same bytes are written at the same offsets on every replica.
pub struct Loader<'a> {
    table: &'a TableInfo,
    record: Vec<u8>,
    bucket: Vec<u8>,
}

impl<'a> Loader<'a> {
    pub fn new(table: &'a TableInfo) -> Loader<'a> {
        Loader {
            table,
            record: vec![0; table.record_bytes as usize],
            bucket: vec![0; table.bucket_bytes as usize],
        }
    }

    /// Inserts `key` with version 0 (the initial load) into every replica in `pool`. Returns
    /// the record's offset.
    pub fn insert(&mut self, pool: &Pool, key: u64, value: &[u8]) -> Result<u64, StoreError> {
        let t = self.table;
        if value.len() != t.value_size as usize {
            return Err(StoreError::ValueSize {
                table: t.id,
                got: value.len(),
                want: t.value_size as usize,
            });
        }
        let header = RecordHeader {
            lock: 0,
            version: 0,
            key,
            table: t.id,
            valid: true,
            restores: 0,
        };
        // A multi-version record: a CVT with one version (0, loaded) and its value.
        let mv = crate::cvt::MvCodec::new(t);
        match &mv {
            Some(k) => {
                let mut cells = crate::cvt::Cells::new();
                k.free_cells(&mut cells);
                cells[0].flags = crate::cvt::VALID | crate::cvt::CREATED;
                k.encode(&crate::cvt::Cvt { header, cells }, value, &mut self.record);
            }
            None => t.codec().encode(&header, value, &mut self.record),
        }
        // Find the slot on the primary: walk the chain, remember the first free slot.
        let mut bucket = t.home_bucket(key);
        let mut free = None;
        let mut chain_end;
        let mut new_overflow = None;
        loop {
            pool.with_local(t.primary(), |m| m.read(bucket, &mut self.bucket));
            let scan = t.scan(bucket, &self.bucket, key);
            if scan.found.is_some() {
                return Err(StoreError::DuplicateKey { table: t.id, key });
            }
            if free.is_none() {
                free = scan.free.map(|(_, off)| off);
            }
            chain_end = bucket;
            match scan.next {
                Some(n) => bucket = n,
                None => break,
            }
        }
        let slot = match free {
            Some(s) => s,
            None => {
                let used = pool.with_local(t.primary(), |m| m.read_u64(t.overflow_counter()));
                if used >= t.overflow_buckets {
                    return Err(StoreError::OverflowFull {
                        table: t.id,
                        buckets: t.overflow_buckets,
                    });
                }
                new_overflow = Some(used);
                t.slot(t.overflow_bucket(used), 0)
            }
        };
        let record = &self.record;
        for &node in &t.replicas {
            pool.with_local(node, |m| {
                if let Some(i) = new_overflow {
                    m.write_u64(t.overflow_counter(), i + 1);
                    m.write_u64(chain_end, i + 1);
                }
                m.write(slot, record);
            });
        }
        Ok(slot)
    }
}

impl PoolMap {
    /// The committed view and the control chain's members that answer (ascending), read
    /// without a map: every superblock that answers, then the view at the tail (the last
    /// member; with one member, node 0). For a coordinator that must change the view before
    /// it can bootstrap (a node the view holds live is down).
    pub async fn control_view(ep: &mut Endpoint) -> Result<(View, NodeSet), StoreError> {
        let n = ep.node_sizes().len();
        let sbs = read_superblocks(ep, n).await?;
        let decoded: Vec<Superblock> = sbs
            .iter()
            .enumerate()
            .filter_map(|(node, b)| Superblock::decode(node as NodeId, b.as_ref()?).ok())
            .collect();
        let (_, members) = chain_members(decoded.iter());
        let view = tail_view(ep, &members).await?;
        Ok((view, members.into_iter().collect()))
    }
}

/// Bootstrap's way past memory node `down` (not node 0) found down, as with one control
/// member: the view at node 0, then the superblocks of the nodes it holds live; with one
/// member, that view and those superblocks. `None` where node 0's view is not the one to go
/// by, or is not known: node 0 down too, its view holding `down` live (a control chain's tail
/// may have failed it; with one member, the caller finds `down` live and down), or a chain of
/// more than one member (`Some` with no view: the tail's is read then).
async fn past_one_down(
    ep: &mut Endpoint,
    n: usize,
    down: NodeId,
) -> Result<Option<(Option<View>, Superblocks)>, StoreError> {
    let w = ep.read(0, VIEW_OFF, 8);
    match ep.post().await {
        Ok(()) => {}
        Err(FabricError::NodeDown(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let view = View::parse(ep.word(w, 0));
    if !view.is_failed(down) {
        return Ok(None);
    }
    let reads = (0..n as NodeId)
        .map(|node| (!view.is_failed(node)).then(|| ep.read(node, 0, SUPERBLOCK_BYTES)))
        .collect::<Vec<_>>();
    match ep.post().await {
        Ok(()) => {}
        Err(FabricError::NodeDown(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let sbs: Superblocks = reads
        .into_iter()
        .map(|r| r.map(|r| ep.bytes(r).to_vec()))
        .collect();
    let one_member = sbs[0]
        .as_ref()
        .and_then(|b| Superblock::decode(0, b).ok())
        .is_some_and(|sb| sb.control_replicas == 1);
    Ok(Some((one_member.then_some(view), sbs)))
}

/// The control chain's length `k` (any superblock's; 1 if none decoded) and its members among
/// the decoded superblocks, ascending: the nodes below `k` seeded at format that never failed
/// (a replacement is formatted as no member).
fn chain_members<'a>(decoded: impl Iterator<Item = &'a Superblock> + Clone) -> (u8, Vec<NodeId>) {
    let k = decoded.clone().next().map_or(1, |sb| sb.control_replicas);
    let members = decoded
        .filter(|sb| sb.node < NodeId::from(k) && sb.control_member)
        .map(|sb| sb.node)
        .collect();
    (k, members)
}

/// Each memory node's superblock bytes, where they were read.
type Superblocks = Vec<Option<Vec<u8>>>;

/// The superblocks of every memory node that answers (node 0 among those that do not), in one
/// batch, posted again without a node found down.
async fn read_superblocks(ep: &mut Endpoint, n: usize) -> Result<Superblocks, StoreError> {
    loop {
        let down = ep.seen_down();
        let reads: Vec<_> = (0..n as NodeId)
            .map(|node| (!down.contains(node)).then(|| ep.read(node, 0, SUPERBLOCK_BYTES)))
            .collect();
        match ep.post().await {
            Ok(()) => {
                return Ok(reads
                    .into_iter()
                    .map(|r| r.map(|r| ep.bytes(r).to_vec()))
                    .collect())
            }
            Err(FabricError::NodeDown(_)) if ep.seen_down() != down => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The committed view of a control chain over `members` (ascending): the tail's word, the
/// last member that answers. Every member down: node 0's `NodeDown` (the control words are
/// lost).
async fn tail_view(ep: &mut Endpoint, members: &[NodeId]) -> Result<View, StoreError> {
    for &tail in members.iter().rev() {
        let w = ep.read(tail, VIEW_OFF, 8);
        match ep.post().await {
            Ok(()) => return Ok(View::parse(ep.word(w, 0))),
            Err(FabricError::NodeDown(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(FabricError::NodeDown(0).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordFormat;

    fn info(id: u32) -> TableInfo {
        TableInfo {
            id,
            name: format!("t{id}"),
            format: RecordFormat::Single,
            value_size: 8,
            meta_words: 0,
            copies: 1,
            record_bytes: 64,
            slot_stride: 64,
            slots_per_bucket: 1,
            bucket_bytes: 128,
            bucket_count: 1,
            overflow_buckets: 0,
            joining: 0,
            table_off: u64::from(id) * 4096,
            overflow_off: 0,
            replicas: vec![0],
            mv: None,
        }
    }

    #[test]
    fn tables_are_found_by_id_below_and_above_the_dense_range() {
        let ids = [7, 1, DENSE_IDS - 1, DENSE_IDS, 70_000, 3];
        let map = PoolMap::new(
            Vec::new(),
            1,
            View::default(),
            ids.iter().map(|&i| (i, info(i))).collect(),
        );
        for id in ids {
            assert_eq!(map.table(id).unwrap().table_off, u64::from(id) * 4096);
        }
        for absent in [0, 2, 8, DENSE_IDS - 2, DENSE_IDS + 1, 69_999, u32::MAX] {
            assert!(matches!(
                map.table(absent),
                Err(StoreError::NoSuchTable(i)) if i == absent
            ));
        }
        let listed: Vec<u32> = map.tables().map(|t| t.id).collect();
        assert_eq!(listed, [1, 3, 7, DENSE_IDS - 1, DENSE_IDS, 70_000]);
        assert_eq!(map.table_by_name("t3").unwrap().id, 3);
    }

    /// Memory node `node`'s superblock in a pool of four.
    fn superblock_of_4(node: NodeId) -> Superblock {
        Superblock {
            node,
            nodes: 4,
            region_size: 1 << 20,
            catalog_entries: 0,
            catalog_crc: 0,
            log_off: 1 << 16,
            log_slice_bytes: 4096,
            log_slices: 4,
            control_replicas: 2,
            control_member: node < 2,
        }
    }

    #[test]
    fn a_view_promotes_the_first_live_backup_and_loses_tables_with_none() {
        let mut a = info(1);
        a.replicas = vec![1, 2, 0];
        let mut b = info(2);
        b.replicas = vec![2, 3];
        let mut c = info(3);
        c.replicas = vec![0, 1];
        let all = PoolMap::new(
            (0..4).map(superblock_of_4).collect(),
            4,
            View::default(),
            [(1, a), (2, b), (3, c)].into_iter().collect(),
        );
        assert_eq!(all.promoted().count(), 0);
        let v = View::default().without(&[2]).unwrap();
        let m = all.in_view(v);
        assert_eq!(m.view(), v);
        assert_eq!(m.live_nodes().collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!(m.table(1).unwrap().replicas, [1, 0]);
        assert_eq!(m.table(2).unwrap().replicas, [3], "promoted");
        assert_eq!(m.table(3).unwrap().replicas, [0, 1]);
        let promoted: Vec<u32> = m.promoted().map(|t| t.id).collect();
        assert_eq!(promoted, [2]);
        // Node 3 too: table 2 has no replica left, and is refused, not served.
        let m = m.in_view(v.without(&[3]).unwrap());
        assert_eq!(m.lost(), [2]);
        assert!(matches!(
            m.table(2),
            Err(StoreError::TableLost { table: 2, .. })
        ));
        assert_eq!(m.tables().map(|t| t.id).collect::<Vec<_>>(), [1, 3]);
        // A later view of the same failures is the same map (views only grow).
        assert_eq!(all.in_view(m.view()).tables, m.tables);
        assert_eq!(m.log_slice(1), Some(((1 << 16) + 4096, 4096)));
        // Node 2 comes back and joins: written after the readable replicas, never read; the
        // map of a view that failed it before learns its superblock.
        let j = v.joining(2).unwrap();
        let m = all.in_view(v).in_view(j);
        assert_eq!(m.live_nodes().collect::<Vec<_>>(), [0, 1, 2, 3]);
        let b = m.table(2).unwrap();
        assert_eq!((b.replicas.as_slice(), b.joining), (&[3, 2][..], 1));
        assert_eq!(b.readable(), [3]);
        assert_eq!(b.backups(), [2], "commits write the joiner");
        assert!(b.is_joiner(2) && !b.is_joiner(3));
        assert_eq!(m.table(1).unwrap().replicas, [1, 0, 2]);
        // A full replica, ranked last; once the others failed, it is the primary and is
        // repaired like a promoted backup.
        let r = j.joined(2).unwrap();
        let m = all.in_view(r);
        assert_eq!(m.table(2).unwrap().replicas, [3, 2]);
        assert_eq!(m.table(2).unwrap().joining, 0);
        let m = all.in_view(r.without(&[3]).unwrap());
        assert_eq!(m.table(2).unwrap().replicas, [2]);
        assert!(m.is_promoted(m.table(2).unwrap()), "a rejoined primary");
        // A joiner alone is no replica: the table is lost.
        let m = all.in_view(v.without(&[3]).unwrap().joining(2).unwrap());
        assert_eq!(m.lost(), [2]);
    }

    /// What a view's repair must scan, the view before it repaired: the tables whose primary
    /// changed in the step, or everything promoted after a gap of views.
    #[test]
    fn a_repair_scans_only_the_primaries_changed_since_the_view_repaired_last() {
        let mut a = info(1);
        a.replicas = vec![1, 2, 0];
        let mut b = info(2);
        b.replicas = vec![2, 3];
        let mut c = info(3);
        c.replicas = vec![3, 1];
        let all = PoolMap::new(
            (0..4).map(superblock_of_4).collect(),
            4,
            View::default(),
            [(1, a), (2, b), (3, c)].into_iter().collect(),
        );
        let since = |m: &PoolMap, repaired: View| -> Vec<u32> {
            m.promoted_since(repaired).map(|t| t.id).collect()
        };
        // Node 2 fails: table 2 promoted (to 3).
        let v1 = View::default().without(&[2]).unwrap();
        assert_eq!(since(&all.in_view(v1), View::default()), [2]);
        // Node 2 comes back, joins, rejoins: table 2 stays on 3, nothing to repair again
        // (it was promoted all along).
        let v2 = v1.joining(2).unwrap();
        let v3 = v2.joined(2).unwrap();
        assert_eq!(all.in_view(v2).promoted().count(), 1);
        assert_eq!(since(&all.in_view(v2), v1), [] as [u32; 0]);
        assert_eq!(since(&all.in_view(v3), v2), [] as [u32; 0]);
        // Node 3 fails: table 2 goes to 2 (rejoined), table 3 to 1; table 2 is repaired
        // again, its primary having changed.
        let v4 = v3.without(&[3]).unwrap();
        assert_eq!(since(&all.in_view(v4), v3), [2, 3]);
        // After a gap (view 1 repaired last, view 3 now): every promoted table.
        assert_eq!(since(&all.in_view(v3), v1), [2]);
        assert_eq!(
            all.in_view(v3).promoted().map(|t| t.id).collect::<Vec<_>>(),
            [2]
        );
    }
}
