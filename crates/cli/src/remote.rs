//! Pools of remote memory nodes (`--backend ucx`): who formats and loads them, and how a compute
//! process that did not load finds out whether the pool is the one its options describe.
//!
//! **The loader is a compute process** (`dtxn bench --backend ucx --load` or `--load-only`),
//! not the memory-node daemon: `dtxn memnode` stays free of workload and transaction logic, and
//! every process derives the same [`Plan`] from the same workload and pool options. It formats
//! and loads a staging copy of every region in its own memory (the store's loaders, with this
//! process's CPU), then copies each region to its memory node with large WRITEs: one round trip
//! per MiB, instead of one per record access. Each node's superblock is invalidated first and
//! written last, so a half-copied region never passes bootstrap.

use anyhow::{bail, Context, Result};
use dtxn_fabric::shm::{ShmConfig, ShmPool};
use dtxn_fabric::{NodeId, Pool};
use dtxn_store::layout::{Superblock, ENTRY_BYTES, SUPERBLOCK_BYTES, VIEW_OFF};
use dtxn_store::{Plan, StoreError, View};

/// Bytes per copying WRITE (UCX cuts it into line-aligned pieces; one round trip each).
const COPY: usize = 1 << 20;

/// Formats the pool for `plan` and loads it with `fill` (given a local pool of the same
/// shape), then copies every region to its memory node.
pub fn load(
    pool: &Pool,
    plan: &Plan,
    addrs: &[String],
    fill: impl FnOnce(&Pool) -> Result<()>,
) -> Result<()> {
    let sizes = pool.node_sizes();
    // Same region sizes as the memory nodes, so the superblocks say what they serve. Pages
    // the plan never touches are never allocated.
    let staging = Pool::Shm(ShmPool::create(ShmConfig {
        node_sizes: sizes.clone(),
        dir: None,
        delay_ns: 0,
    })?);
    plan.format_pool(&staging)?;
    fill(&staging)?;
    let mut buf = vec![0u8; COPY];
    for node in 0..sizes.len() {
        let addr = addrs.get(node).map_or("?", String::as_str);
        let ctx = || format!("loading memory node {node} ({addr})");
        let id = node as NodeId;
        pool.try_with_local(id, |m| m.write(0, &[0u8; SUPERBLOCK_BYTES]))
            .with_context(ctx)?;
        let mut off = SUPERBLOCK_BYTES as u64;
        while off < plan.region_bytes {
            let n = (plan.region_bytes - off).min(COPY as u64) as usize;
            staging.with_local(id, |m| m.read(off, &mut buf[..n]));
            pool.try_with_local(id, |m| m.write(off, &buf[..n]))
                .with_context(ctx)?;
            off += n as u64;
        }
        staging.with_local(id, |m| m.read(0, &mut buf[..SUPERBLOCK_BYTES]));
        pool.try_with_local(id, |m| m.write(0, &buf[..SUPERBLOCK_BYTES]))
            .with_context(ctx)?;
    }
    Ok(())
}

/// Checks that every memory node holds the pool `plan` describes (its superblock and catalog,
/// with `load_hint` saying how to load it when it does not).
///
/// A node the pool's view marks failed (memory-node failover) is not checked: its tables live
/// on their other replicas, and it may be gone, or answer again with anything.
pub fn check_loaded(pool: &Pool, plan: &Plan, addrs: &[String], load_hint: &str) -> Result<()> {
    // Read once node 0 (which never fails) has passed: before, the word is not known to be
    // a view at all.
    let mut view = View::default();
    for node in 0..pool.node_sizes().len() {
        let addr = addrs.get(node).map_or("?", String::as_str);
        let id = node as NodeId;
        if node == 1 {
            view = pool
                .try_with_local(0, |m| m.read_u64(VIEW_OFF))
                .map(View::parse)
                .with_context(|| {
                    format!(
                        "memory node 0 ({}), which holds the pool's view",
                        addrs.first().map_or("?", String::as_str)
                    )
                })?;
        }
        if view.is_failed(id) {
            continue;
        }
        if pool.node_down(id) {
            bail!(
                "memory node {node} ({addr}) is not listening, and the pool's view (number {}) \
                 does not mark it failed: start it again on its file (dtxn memnode --path), or \
                 run with --leases so that a coordinator finding it down promotes its backups",
                view.number
            );
        }
        let mut b = [0u8; SUPERBLOCK_BYTES];
        pool.try_with_local(id, |m| m.read(0, &mut b))
            .with_context(|| format!("memory node {node} ({addr})"))?;
        let sb = match Superblock::decode(id, &b) {
            Ok(sb) => sb,
            Err(StoreError::BadMagic { .. }) => {
                bail!("memory node {node} ({addr}) has no dtxn pool: load it first: {load_hint}")
            }
            Err(e) => bail!("{e} ({addr}): load it again: {load_hint}"),
        };
        let entries = plan.catalog_of(id);
        let mut cat = vec![0u8; entries.len() * ENTRY_BYTES];
        for (e, c) in entries.iter().zip(cat.chunks_mut(ENTRY_BYTES)) {
            e.encode(c);
        }
        let want = (
            plan.shape.memory_nodes,
            entries.len() as u32,
            crc32fast::hash(&cat),
            plan.log_off,
            plan.shape.log_slices,
        );
        let got = (
            sb.nodes,
            sb.catalog_entries,
            sb.catalog_crc,
            sb.log_off,
            sb.log_slices,
        );
        if want != got {
            bail!(
                "memory node {node} ({addr}) holds a pool loaded with other options (its \
                 catalog, log slices or node count differ): give every compute process the \
                 loader's workload and its options (e.g. --warehouses, --mix), --memory-nodes, \
                 --replicas, --compute-nodes, --threads and --coroutines, or load it again: \
                 {load_hint}"
            );
        }
    }
    Ok(())
}
