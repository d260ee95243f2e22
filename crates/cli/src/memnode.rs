//! `dtxn memnode`: a memory-node daemon. It serves one region over UCX (see
//! `dtxn_fabric::ucx::MemNode`) until SIGTERM or SIGINT, and does nothing else: no transaction
//! logic runs here.

use anyhow::{bail, Context, Result};
use dtxn_fabric::ucx::{MemNode, MemNodeConfig, UcxConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct MemnodeArgs {
    /// Address of the bootstrap listener that compute processes connect to (port 0: any free
    /// port; the address is printed).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Region size in bytes, e.g. 512M, 4GiB (K, M, G, T, with or without `iB`, are powers of
    /// 1024). A multiple of 64.
    #[arg(long, value_parser = crate::units::parse_size, allow_hyphen_values = true)]
    pub size: u64,
    /// Keep the region in this file (created or extended to --size, contents kept; e.g. on a
    /// persistent-memory/DAX mount). Locked while served: a second daemon on it is refused.
    /// A FLUSH from a compute process (`--set flush=true`) then writes the pages it covers
    /// back to the file (msync) before it completes. Without it, UCX allocates the region,
    /// zeroed.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// What compute processes must present to get the region's key (it travels in clear).
    #[arg(long)]
    pub token: String,
    /// This node's position in the compute processes' list of memory nodes (told to its RPC
    /// handler).
    #[arg(long, default_value_t = 0)]
    pub node: u16,
    /// UCX transports (sets UCX_TLS), e.g. `tcp`, or `rc,ud` on RDMA NICs. Default: UCX's own
    /// choice or the environment's UCX_TLS.
    #[arg(long)]
    pub ucx_tls: Option<String>,
    /// Devices UCX may use (sets UCX_NET_DEVICES), e.g. `lo`, `eth1`, `mlx5_0:1`. Without it,
    /// UCX's TCP transport uses every interface.
    #[arg(long)]
    pub ucx_devices: Option<String>,
    /// Microseconds the progress thread keeps polling after its last request before it sleeps
    /// on UCX's event fd. Spinning gives the lowest latency on a core of its own; use 0 where
    /// memory nodes share a few cores with other busy processes (they would starve each other).
    #[arg(long, default_value_t = 200)]
    pub spin_us: u64,
}

pub fn run(a: MemnodeArgs) -> Result<ExitCode> {
    if a.token.is_empty() {
        bail!("--token must not be empty");
    }
    // Registered before the node starts, so that a signal in between is not lost.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .context("cannot install signal handlers")?;
    let mut ucx = UcxConfig::default();
    if let Some(tls) = &a.ucx_tls {
        ucx.settings.push(("TLS".into(), tls.clone()));
    }
    if let Some(dev) = &a.ucx_devices {
        ucx.settings.push(("NET_DEVICES".into(), dev.clone()));
    }
    let node = MemNode::start(
        MemNodeConfig {
            size: a.size,
            listen: a.listen,
            token: a.token,
            file: a.path.clone(),
            ucx,
            spin: std::time::Duration::from_micros(a.spin_us),
        },
        a.node,
    )?;
    // The RPC forms of the transaction mechanisms (stages run as RPCs, `--set ford.rpc=...`).
    node.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "dtxn memnode: node {} serving {} bytes{} at {}",
        a.node,
        a.size,
        a.path
            .as_ref()
            .map_or(String::new(), |p| format!(" of {}", p.display())),
        node.addr()
    )?;
    out.flush()?;
    drop(out);
    let sig = signals.forever().next();
    node.shutdown();
    println!(
        "dtxn memnode: stopped{}",
        sig.map_or(String::new(), |s| format!(" (signal {s})"))
    );
    Ok(ExitCode::SUCCESS)
}
