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
    /// sim: hardware profile, a preset (cx5-100g, cx5-100g-pm, cx5-100g-papers: with the
    /// papers' compute-side CPU and NIC, cx5-100g-papers-pm, ideal) or a TOML file [default:
    /// cx5-100g].
    #[arg(long)]
    pub profile: Option<String>,
    /// sim: the profile with some of its fields replaced, e.g. `link_gbps=0,cn_link_gbps=0`
    /// (links of unlimited bandwidth) or `mn_cores=10` (the fields are listed in the book's
    /// backends chapter; 0 means unlimited or free).
    #[arg(long, value_name = "FIELD=VALUE,...")]
    pub profile_set: Option<String>,
    /// sim: turn the adversarial memory model off (READs atomic, ops in arrival order).
    #[arg(long)]
    pub benign: bool,
    /// sim: how hostile the simulated fabric is: a preset (`default`, or `harsh`: 10-30 us
    /// windows, overtaking, coordinator stalls, late completions), then knobs overriding it,
    /// comma-separated, e.g. `harsh,stall=100us` or `window=20us,stall_prob=0.05` (see the
    /// book's correctness chapter for every knob).
    #[arg(long, value_name = "PRESET,KNOB=VALUE,...")]
    pub adversary: Option<String>,
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
        self.pool_with(nodes, node_size, false)
    }

    /// [`BackendArgs::pool`], but on ucx a memory node that does not answer is taken as down
    /// rather than refused (`UcxConfig::allow_down`): for a pool whose view may mark it failed
    /// (memory-node failover), which the store and [`crate::remote::check_loaded`] decide.
    pub fn pool_allowing_down(&self, nodes: usize, node_size: u64) -> Result<Pool> {
        self.pool_with(nodes, node_size, true)
    }

    fn pool_with(&self, nodes: usize, node_size: u64, allow_down: bool) -> Result<Pool> {
        if nodes == 0 {
            bail!("a pool needs at least one memory node");
        }
        let p = &self.pool;
        match p.kind {
            Backend::Sim => {
                let mut cfg = SimConfig::new(self.seed, nodes, node_size);
                cfg.profile = p.sim_profile()?;
                cfg.persistent = cfg.profile.pm_write_gbps > 0.0;
                if p.benign {
                    cfg.adversary = Adversary::off();
                }
                if let Some(spec) = &p.adversary {
                    cfg.adversary = adversary(spec, self.seed)?;
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
                let pool = self
                    .pool
                    .connect(self.seed, self.compute_node, allow_down)?;
                p.check_ucx_nodes(&pool, nodes, node_size)?;
                Ok(Pool::Ucx(pool))
            }
        }
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
                p.profile_shown(),
                match (&p.adversary, p.benign) {
                    (Some(spec), _) => format!("adversary {spec}"),
                    (None, true) => "benign".to_string(),
                    (None, false) => "adversarial".to_string(),
                },
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

    /// Connects to the memory nodes (`ucx`), as compute node `compute_node`. With
    /// `allow_down`, a memory node that is not listening is taken as down
    /// (`UcxConfig::allow_down`) instead of refused.
    pub fn connect(&self, seed: u64, compute_node: u32, allow_down: bool) -> Result<UcxPool> {
        let token = match &self.token {
            Some(t) if !t.is_empty() => t,
            _ => bail!("--backend ucx needs --token (the memory nodes' --token)"),
        };
        let addrs = self.memnode_addrs()?;
        let mut cfg = self.ucx_config(&addrs);
        cfg.allow_down = allow_down;
        let mut pool = UcxPool::connect(&addrs, token, cfg)?;
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
            // A node down has no size to check (the pool's view decides whether it may be).
            if size < node_size && !pool.node_down(i as dtxn_fabric::NodeId) {
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

    /// The sim's hardware profile, loaded, with `--profile-set`'s fields replaced.
    pub fn sim_profile(&self) -> Result<Profile> {
        let p = Profile::load(self.profile())?;
        match &self.profile_set {
            Some(spec) => p
                .with_fields(spec)
                .map_err(|e| anyhow::anyhow!("--profile-set: {e}")),
            None => Ok(p),
        }
    }

    /// The profile's name in reports: `--profile`, and `--profile-set`'s fields if given.
    fn profile_shown(&self) -> String {
        match &self.profile_set {
            Some(spec) => format!("{} with {spec}", self.profile()),
            None => self.profile().to_string(),
        }
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
            ("--profile-set", self.profile_set.is_some(), Backend::Sim),
            ("--benign", self.benign, Backend::Sim),
            ("--adversary", self.adversary.is_some(), Backend::Sim),
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
        if let Some(spec) = &self.adversary {
            if self.benign {
                bail!("--benign and --adversary: give one (--benign is --adversary off)");
            }
            adversary(spec, 0)?;
        }
        if self.profile_set.is_some() {
            // A misspelt field is refused before anything is loaded.
            self.sim_profile()?;
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
            Backend::Sim => format!("sim (profile {})", self.profile_shown()),
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

/// The presets `--adversary` takes.
pub const ADVERSARY_PRESETS: [&str; 3] = ["default", "harsh", "off"];

/// `--adversary SPEC`: a preset (`default`: today's hostile fabric; `harsh`; `off`: benign),
/// then `KNOB=VALUE` items applied over it, left to right. The harsh preset's window is drawn
/// from `seed` in 10-30 us, so seeds cover the range and each run replays from its seed.
pub fn adversary(spec: &str, seed: u64) -> Result<Adversary> {
    let mut adv = Adversary::hostile();
    let items: Vec<&str> = spec.split(',').map(str::trim).collect();
    if items.iter().any(|i| i.is_empty()) {
        bail!("--adversary {spec}: an empty item (give PRESET,KNOB=VALUE,...)");
    }
    for (i, item) in items.iter().enumerate() {
        let Some((knob, value)) = item.split_once('=') else {
            if i > 0 {
                bail!("--adversary {spec}: the preset '{item}' comes first, knobs after it");
            }
            adv = match *item {
                "default" => Adversary::hostile(),
                "harsh" => Adversary::harsh(10_000 + dtxn_workloads::rng::mix(seed, 0xad) % 20_001),
                "off" => Adversary::off(),
                other => bail!(
                    "--adversary: unknown preset '{other}' (presets: {}; knobs: {})",
                    ADVERSARY_PRESETS.join(", "),
                    ADVERSARY_KNOBS.join(", ")
                ),
            };
            continue;
        };
        let bad = |what: &str| anyhow::anyhow!("--adversary {knob}={value}: {what}");
        let duration = || -> Result<u64> {
            let ns = crate::units::parse_duration(value).map_err(|e| bad(&e))?;
            if ns > MAX_ADVERSARY_NS {
                return Err(bad("at most 1s"));
            }
            Ok(ns)
        };
        let prob = || -> Result<f64> {
            match value.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(bad("a probability from 0 to 1")),
            }
        };
        let flag = || -> Result<bool> {
            match value {
                "true" | "on" | "1" => Ok(true),
                "false" | "off" | "0" => Ok(false),
                _ => Err(bad("true or false")),
            }
        };
        match knob {
            "window" => adv.window_ns = duration()?,
            "tear_reads" => adv.tear_reads = flag()?,
            "reorder" => adv.reorder = flag()?,
            "lose_write_under_faa" => adv.lose_write_under_faa = flag()?,
            "overtake_prob" => adv.overtake_prob = prob()?,
            "stall_prob" => adv.stall_prob = prob()?,
            "stall" => adv.stall_max_ns = duration()?,
            "completion_delay_prob" => adv.completion_delay_prob = prob()?,
            "completion_delay" => adv.completion_delay_max_ns = duration()?,
            _ => bail!(
                "--adversary: unknown knob '{knob}' (knobs: {})",
                ADVERSARY_KNOBS.join(", ")
            ),
        }
    }
    Ok(adv)
}

/// The knobs `--adversary` takes, as `KNOB=VALUE`.
pub const ADVERSARY_KNOBS: [&str; 9] = [
    "window",
    "tear_reads",
    "reorder",
    "lose_write_under_faa",
    "overtake_prob",
    "stall_prob",
    "stall",
    "completion_delay_prob",
    "completion_delay",
];

/// The longest window, stall or delay `--adversary` takes.
const MAX_ADVERSARY_NS: u64 = 1_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adversary_specs_parse_into_presets_and_knobs() {
        assert_eq!(adversary("default", 1).unwrap(), Adversary::hostile());
        assert_eq!(adversary("off", 1).unwrap(), Adversary::off());
        let h = adversary("harsh", 1).unwrap();
        assert!((10_000..=30_000).contains(&h.window_ns), "{h:?}");
        assert_eq!(h, adversary("harsh", 1).unwrap());
        assert_eq!(h, Adversary::harsh(h.window_ns));
        let windows: std::collections::HashSet<u64> = (0..20)
            .map(|s| adversary("harsh", s).unwrap().window_ns)
            .collect();
        assert!(windows.len() > 10, "the window varies with the seed");
        let k = adversary(
            "harsh,window=5us,stall_prob=0.5,stall=1ms,tear_reads=false",
            1,
        )
        .unwrap();
        assert_eq!(
            (k.window_ns, k.stall_prob, k.stall_max_ns, k.tear_reads),
            (5_000, 0.5, 1_000_000, false)
        );
        assert_eq!(adversary("window=20us", 3).unwrap().window_ns, 20_000);
        for (bad, says) in [
            ("brutal", "unknown preset 'brutal'"),
            ("window=20us,harsh", "comes first"),
            ("stall_prob=2", "a probability from 0 to 1"),
            ("window=20", "no unit"),
            ("window=2s", "at most 1s"),
            ("speed=3", "unknown knob 'speed'"),
            ("harsh,", "an empty item"),
            ("reorder=maybe", "true or false"),
        ] {
            let e = adversary(bad, 1).unwrap_err().to_string();
            assert!(e.contains(says) && !e.contains('\n'), "{bad}: {e}");
        }
    }
}
