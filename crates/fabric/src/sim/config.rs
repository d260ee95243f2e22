//! What a simulated cluster looks like and how hostile it is.

use crate::Profile;

/// The freedoms of the fabric contract that the simulator exercises. Each knob names the rule
/// of [`crate::Fabric`] it tests.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Adversary {
    /// G2/G3: the lines of a multi-line READ are fetched one by one in a random order, at
    /// distinct instants, so a concurrent WRITE can tear the READ across lines.
    pub tear_reads: bool,
    /// G5/G7: each op starts at a random offset inside a window, so READs on one QP, a READ and a
    /// WRITE on one QP, and ops on different QPs execute in any order the contract allows.
    pub reorder: bool,
    /// G8 (PF-4): a WRITE line that lands on a word while a concurrent FAA holds it in the NIC's
    /// atomic buffer is lost.
    pub lose_write_under_faa: bool,
    /// Width of the random windows above, in nanoseconds.
    pub window_ns: u64,
}

impl Adversary {
    /// Every freedom exercised.
    pub fn hostile() -> Adversary {
        Adversary {
            tear_reads: true,
            reorder: true,
            lose_write_under_faa: true,
            window_ns: 400,
        }
    }

    /// A benign fabric: ops execute in arrival order, READs atomically.
    pub fn off() -> Adversary {
        Adversary {
            tear_reads: false,
            reorder: false,
            lose_write_under_faa: false,
            window_ns: 0,
        }
    }
}

/// Faults injected into a run, at virtual times relative to the run's start.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Faults {
    pub compute_crashes: Vec<ComputeCrash>,
    pub memory_crashes: Vec<MemoryCrash>,
    /// Probability that an op is delayed by up to `delay_max_ns` on its way to the memory node.
    pub delay_prob: f64,
    pub delay_max_ns: u64,
}

/// A compute node stops: its coordinators are dropped at whatever await point they are on, and
/// of the ops they had in flight, those executing after a random cut-off are lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComputeCrash {
    pub at_ns: u64,
    pub compute_node: u32,
}

/// A memory node crashes and restarts `down_ns` later. In persistent-memory mode it comes back
/// with its flushed contents and a random subset of its unflushed lines; otherwise (DRAM) with
/// zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryCrash {
    pub at_ns: u64,
    pub node: u16,
    pub down_ns: u64,
}

/// A simulated memory pool.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SimConfig {
    pub seed: u64,
    pub profile: Profile,
    pub adversary: Adversary,
    /// Region size of each memory node, in bytes (a multiple of 64).
    pub node_sizes: Vec<u64>,
    /// Persistent-memory mode: WRITEs are volatile until a FLUSH on their QP.
    pub persistent: bool,
    pub faults: Faults,
    /// Keep every executed op in [`crate::sim::SimPool::trace`] (the hash is always kept).
    pub keep_trace: bool,
}

impl SimConfig {
    pub fn new(seed: u64, memory_nodes: usize, node_size: u64) -> SimConfig {
        SimConfig {
            seed,
            profile: Profile::cx5_100g(),
            adversary: Adversary::hostile(),
            node_sizes: vec![node_size; memory_nodes],
            persistent: false,
            faults: Faults::default(),
            keep_trace: false,
        }
    }
}
