//! Building a memory pool from the command line's backend options.

use anyhow::{bail, Context, Result};
use dtxn_fabric::shm::{ShmConfig, ShmPool};
use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{Pool, Profile};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Deterministic simulation in virtual time, adversarial by default.
    Sim,
    /// Real shared memory and CPU atomics.
    Shm,
}

/// Options shared by every command that runs against a memory pool.
#[derive(Debug, Clone, clap::Args)]
pub struct BackendArgs {
    /// Where the memory pool lives.
    #[arg(long, value_enum, default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// sim: hardware profile, a preset (cx5-100g, cx5-100g-pm, ideal) or a TOML file.
    #[arg(long, default_value = "cx5-100g")]
    pub profile: String,
    /// sim: turn the adversarial memory model off (READs atomic, ops in arrival order).
    #[arg(long)]
    pub benign: bool,
    /// Seed of every random choice (sim runs are reproducible from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// shm: keep each memory node in a file in this directory (e.g. /dev/shm/dtxn) instead of
    /// anonymous memory.
    #[arg(long)]
    pub shm_dir: Option<PathBuf>,
    /// shm: emulated network latency per round trip, in nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub delay_ns: u64,
}

impl BackendArgs {
    /// A fresh pool of `nodes` memory nodes of `node_size` bytes each.
    pub fn pool(&self, nodes: usize, node_size: u64) -> Result<Pool> {
        if nodes == 0 {
            bail!("a pool needs at least one memory node");
        }
        match self.backend {
            Backend::Sim => {
                let mut cfg = SimConfig::new(self.seed, nodes, node_size);
                cfg.profile = Profile::load(&self.profile)?;
                cfg.persistent = cfg.profile.pm_write_gbps > 0.0;
                if self.benign {
                    cfg.adversary = Adversary::off();
                }
                Ok(Pool::Sim(SimPool::new(cfg)?))
            }
            Backend::Shm => {
                if let Some(dir) = &self.shm_dir {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                let cfg = ShmConfig {
                    node_sizes: vec![node_size; nodes],
                    dir: self.shm_dir.clone(),
                    delay_ns: self.delay_ns,
                };
                Ok(Pool::Shm(ShmPool::create(cfg)?))
            }
        }
    }

    /// A short description for reports.
    pub fn describe(&self) -> String {
        match self.backend {
            Backend::Sim => format!(
                "sim (profile {}, {}, seed {}; times are virtual)",
                self.profile,
                if self.benign { "benign" } else { "adversarial" },
                self.seed
            ),
            Backend::Shm => format!(
                "shm ({}, delay {} ns)",
                self.shm_dir
                    .as_ref()
                    .map_or("anonymous memory".to_string(), |d| d.display().to_string()),
                self.delay_ns
            ),
        }
    }
}
