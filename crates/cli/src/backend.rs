//! Building a memory pool from the command line's backend options.

use anyhow::{bail, Context, Result};
use dtxn_fabric::shm::{ShmConfig, ShmPool};
use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::ucx::{UcxConfig, UcxPool};
use dtxn_fabric::{Pool, Profile};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Deterministic simulation in virtual time, adversarial by default.
    Sim,
    /// Real shared memory and CPU atomics.
    Shm,
    /// Memory nodes served by `dtxn memnode` processes, over UCX (RDMA NICs, or TCP).
    Ucx,
}

/// Where the memory pool lives and how to reach it: the options every command that uses a
/// pool shares (`bench`, `sweep`, `probe`, `verify`). Commands with another default backend
/// change it with `#[command(mut_arg("backend", |a| a.default_value(..)))]`.
#[derive(Debug, Clone, clap::Args)]
pub struct PoolArgs {
    /// Where the memory pool lives.
    #[arg(long = "backend", id = "backend", value_name = "BACKEND", value_enum, default_value_t = Backend::Sim)]
    pub kind: Backend,
    /// sim: hardware profile, a preset (cx5-100g, cx5-100g-pm, ideal) or a TOML file [default:
    /// cx5-100g].
    #[arg(long)]
    pub profile: Option<String>,
    /// sim: turn the adversarial memory model off (READs atomic, ops in arrival order).
    #[arg(long)]
    pub benign: bool,
    /// shm: keep each memory node in a file in this directory (e.g. /dev/shm/dtxn) instead of
    /// anonymous memory.
    #[arg(long)]
    pub shm_dir: Option<PathBuf>,
    /// shm: emulated network latency per round trip, in nanoseconds (at most 1 s) [default: 0].
    #[arg(long)]
    pub delay_ns: Option<u64>,
    /// ucx: the memory nodes' bootstrap addresses, HOST:PORT,... (node i is the i-th; each
    /// is a `dtxn memnode --listen` address).
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT,...")]
    pub memnodes: Vec<String>,
    /// ucx: the memory nodes' --token.
    #[arg(long)]
    pub token: Option<String>,
    /// ucx: UCX transports (sets UCX_TLS), e.g. `tcp`, or `rc,ud` on RDMA NICs. Default: the
    /// environment's UCX_TLS, or `tcp` on `lo` when every memory node is on a loopback address.
    #[arg(long)]
    pub ucx_tls: Option<String>,
    /// ucx: devices UCX may use (sets UCX_NET_DEVICES), e.g. `eth1`, `mlx5_0:1`.
    #[arg(long)]
    pub ucx_devices: Option<String>,
}

/// The pool options plus what a process running coordinators on it needs: its seed and, on
/// ucx, its compute-node number (`bench`, `sweep`, `probe`).
#[derive(Debug, Clone, clap::Args)]
pub struct BackendArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Seed of every random choice (sim runs are reproducible from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// ucx: this process's number among the run's compute processes (0, 1, ... below
    /// --compute-nodes): its coordinators' ids, locks and log slices are its own.
    #[arg(long, default_value_t = 0)]
    pub compute_node: u32,
}

/// A directory dtxn may create (`--shm-dir`, a sweep's `--out`), but not its parents: a typo
/// must not leave directories (and gigabytes of node files) behind where nobody looks.
pub fn check_new_dir(flag: &str, dir: &std::path::Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if dir.exists() {
        bail!("{flag} {}: not a directory", dir.display());
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        bail!(
            "{flag} {}: {} does not exist (dtxn creates the directory, not its parents)",
            dir.display(),
            parent.display()
        );
    }
    Ok(())
}

/// The sim's hardware profile when `--profile` is not given.
pub const DEFAULT_PROFILE: &str = "cx5-100g";

/// The most `--delay-ns` takes: a second per round trip.
const MAX_DELAY_NS: u64 = 1_000_000_000;

impl Backend {
    /// The name `--backend` takes.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Shm => "shm",
            Backend::Ucx => "ucx",
        }
    }
}

impl BackendArgs {
    /// The backend.
    pub fn kind(&self) -> Backend {
        self.pool.kind
    }

    /// A fresh pool of `nodes` memory nodes of `node_size` bytes each.
    pub fn pool(&self, nodes: usize, node_size: u64) -> Result<Pool> {
        if nodes == 0 {
            bail!("a pool needs at least one memory node");
        }
        let p = &self.pool;
        match p.kind {
            Backend::Sim => {
                let mut cfg = SimConfig::new(self.seed, nodes, node_size);
                cfg.profile = Profile::load(p.profile())?;
                cfg.persistent = cfg.profile.pm_write_gbps > 0.0;
                if p.benign {
                    cfg.adversary = Adversary::off();
                }
                Ok(Pool::Sim(SimPool::new(cfg)?))
            }
            Backend::Shm => {
                if let Some(dir) = &p.shm_dir {
                    p.check_shm_dir()?;
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                let cfg = ShmConfig {
                    node_sizes: vec![node_size; nodes],
                    dir: p.shm_dir.clone(),
                    delay_ns: p.delay_ns(),
                };
                Ok(Pool::Shm(ShmPool::create(cfg)?))
            }
            Backend::Ucx => {
                let pool = self.ucx_pool()?;
                p.check_ucx_nodes(&pool, nodes, node_size)?;
                Ok(Pool::Ucx(pool))
            }
        }
    }

    /// Connects to the memory nodes (`ucx`), as compute node `--compute-node`.
    pub fn ucx_pool(&self) -> Result<UcxPool> {
        self.pool.connect(self.seed, self.compute_node)
    }

    /// Refuses options of another backend, which would silently do nothing.
    pub fn check_options(&self) -> Result<()> {
        self.pool.check_options()?;
        if self.pool.kind != Backend::Ucx && self.compute_node != 0 {
            bail!("--compute-node is an option of --backend ucx");
        }
        Ok(())
    }

    /// A short description for reports.
    pub fn describe(&self) -> String {
        let p = &self.pool;
        match p.kind {
            Backend::Sim => format!(
                "sim (profile {}, {}, seed {}; times are virtual)",
                p.profile(),
                if p.benign { "benign" } else { "adversarial" },
                self.seed
            ),
            Backend::Shm => p.describe(),
            Backend::Ucx => format!(
                "ucx ({}, compute node {})",
                p.ucx_detail(),
                self.compute_node
            ),
        }
    }
}

impl PoolArgs {
    /// The memory nodes' addresses, resolved (`ucx`).
    pub fn memnode_addrs(&self) -> Result<Vec<SocketAddr>> {
        if self.memnodes.is_empty() {
            bail!("--backend ucx needs --memnodes HOST:PORT,... (the dtxn memnode listeners)");
        }
        self.memnodes
            .iter()
            .map(|m| {
                let mut all = m
                    .to_socket_addrs()
                    .with_context(|| format!("--memnodes: cannot resolve '{m}' (HOST:PORT)"))?;
                all.next()
                    .with_context(|| format!("--memnodes: '{m}' resolves to no address"))
            })
            .collect()
    }

    /// UCX settings: the flags, else the environment, else TCP on `lo` when every memory
    /// node is local (UCX's shared-memory transports are refused, and without a device list
    /// its TCP transport would also try every other interface).
    pub fn ucx_config(&self, addrs: &[SocketAddr]) -> UcxConfig {
        let mut cfg = UcxConfig::default();
        if let Some(tls) = &self.ucx_tls {
            cfg.settings.push(("TLS".into(), tls.clone()));
        }
        if let Some(dev) = &self.ucx_devices {
            cfg.settings.push(("NET_DEVICES".into(), dev.clone()));
        }
        let env_set =
            std::env::var_os("UCX_TLS").is_some() || std::env::var_os("UCX_NET_DEVICES").is_some();
        if cfg.settings.is_empty() && !env_set && addrs.iter().all(|a| a.ip().is_loopback()) {
            cfg = UcxConfig::loopback_tcp();
        }
        cfg
    }

    /// Connects to the memory nodes (`ucx`), as compute node `compute_node`.
    pub fn connect(&self, seed: u64, compute_node: u32) -> Result<UcxPool> {
        let token = match &self.token {
            Some(t) if !t.is_empty() => t,
            _ => bail!("--backend ucx needs --token (the memory nodes' --token)"),
        };
        let addrs = self.memnode_addrs()?;
        let mut pool = UcxPool::connect(&addrs, token, self.ucx_config(&addrs))?;
        pool.set_seed(seed);
        pool.set_compute_node(compute_node);
        Ok(pool)
    }

    /// Checks that the memory nodes `pool` reached are the `nodes` a run needs, each serving
    /// at least `node_size` bytes.
    fn check_ucx_nodes(&self, pool: &UcxPool, nodes: usize, node_size: u64) -> Result<()> {
        let sizes = pool.node_sizes();
        if sizes.len() != nodes {
            bail!(
                "--memnodes lists {} memory node(s); this run needs {nodes} (--memory-nodes)",
                sizes.len()
            );
        }
        for (i, (&size, addr)) in sizes.iter().zip(pool.addrs()).enumerate() {
            if size < node_size {
                bail!(
                    "memory node {i} ({addr}) serves {size} bytes; this run needs \
                     {node_size} per node: restart it with --size {node_size} or more"
                );
            }
        }
        Ok(())
    }

    /// The sim's hardware profile (`--profile`, or the default).
    pub fn profile(&self) -> &str {
        self.profile.as_deref().unwrap_or(DEFAULT_PROFILE)
    }

    /// shm's emulated latency per round trip (`--delay-ns`, or 0).
    pub fn delay_ns(&self) -> u64 {
        self.delay_ns.unwrap_or(0)
    }

    /// Refuses options of another backend, which would silently do nothing, and values out
    /// of range.
    pub fn check_options(&self) -> Result<()> {
        // (flag, given, the backend it belongs to)
        let given = [
            ("--memnodes", !self.memnodes.is_empty(), Backend::Ucx),
            ("--token", self.token.is_some(), Backend::Ucx),
            ("--ucx-tls", self.ucx_tls.is_some(), Backend::Ucx),
            ("--ucx-devices", self.ucx_devices.is_some(), Backend::Ucx),
            ("--profile", self.profile.is_some(), Backend::Sim),
            ("--benign", self.benign, Backend::Sim),
            ("--shm-dir", self.shm_dir.is_some(), Backend::Shm),
            ("--delay-ns", self.delay_ns.is_some(), Backend::Shm),
        ];
        if let Some((flag, _, owner)) = given
            .iter()
            .find(|(_, set, owner)| *set && *owner != self.kind)
        {
            bail!(
                "{flag} is an option of --backend {}, not of {}",
                owner.name(),
                self.kind.name()
            );
        }
        if self.delay_ns() > MAX_DELAY_NS {
            bail!(
                "--delay-ns {}: at most {MAX_DELAY_NS} (1 s per round trip)",
                self.delay_ns()
            );
        }
        if self.shm_dir.is_some() {
            self.check_shm_dir()?;
        }
        Ok(())
    }

    /// `--shm-dir DIR`: DIR may be created, not its parents.
    fn check_shm_dir(&self) -> Result<()> {
        match &self.shm_dir {
            Some(dir) => check_new_dir("--shm-dir", dir),
            None => Ok(()),
        }
    }

    /// A short description for reports.
    pub fn describe(&self) -> String {
        match self.kind {
            Backend::Sim => format!("sim (profile {})", self.profile()),
            Backend::Shm => format!(
                "shm ({}, delay {} ns)",
                self.shm_dir
                    .as_ref()
                    .map_or("anonymous memory".to_string(), |d| d.display().to_string()),
                self.delay_ns()
            ),
            Backend::Ucx => format!("ucx ({})", self.ucx_detail()),
        }
    }

    /// The memory nodes and UCX settings, for descriptions.
    fn ucx_detail(&self) -> String {
        format!(
            "memory nodes {}{}{}",
            self.memnodes.join(","),
            self.ucx_tls
                .as_ref()
                .map_or(String::new(), |t| format!(", UCX_TLS={t}")),
            self.ucx_devices
                .as_ref()
                .map_or(String::new(), |d| format!(", UCX_NET_DEVICES={d}")),
        )
    }
}
