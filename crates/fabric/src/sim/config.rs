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
    /// G5/G7, harder: the probability that an op is held back a further `window_ns` at its
    /// memory node, so that ops posted after it (on other QPs, or unordered on its own) overtake
    /// it by a whole window. Only with `reorder`.
    #[serde(default)]
    pub overtake_prob: f64,
    /// The probability that a coordinator, when it resumes, finds its thread descheduled (a
    /// preempted thread, a GC pause, a slow core) for a uniformly drawn time up to
    /// `stall_max_ns`: everything on that thread waits, ops already posted go on.
    #[serde(default)]
    pub stall_prob: f64,
    #[serde(default)]
    pub stall_max_ns: u64,
    /// The probability that a batch's completion reaches its coordinator up to
    /// `completion_delay_max_ns` late (a slow completion queue, a lost interrupt): its ops
    /// have executed, the coordinator does not know yet.
    #[serde(default)]
    pub completion_delay_prob: f64,
    #[serde(default)]
    pub completion_delay_max_ns: u64,
}

impl Adversary {
    /// Every freedom exercised.
    pub fn hostile() -> Adversary {
        Adversary {
            tear_reads: true,
            reorder: true,
            lose_write_under_faa: true,
            window_ns: 400,
            overtake_prob: 0.0,
            stall_prob: 0.0,
            stall_max_ns: 0,
            completion_delay_prob: 0.0,
            completion_delay_max_ns: 0,
        }
    }

    /// Every freedom exercised, at the time scales where one-sided protocols break: a READ's
    /// lines and an op's execution spread over `window_ns` (10 to 30 us: longer than a
    /// writer's install-to-release gap), one op in five overtaken by a whole window, one
    /// resumption in fifty stalled for up to 50 us (some 20 round trips), one completion in
    /// twenty up to 20 us late.
    pub fn harsh(window_ns: u64) -> Adversary {
        Adversary {
            window_ns,
            overtake_prob: 0.2,
            stall_prob: 0.02,
            stall_max_ns: 50_000,
            completion_delay_prob: 0.05,
            completion_delay_max_ns: 20_000,
            ..Adversary::hostile()
        }
    }

    /// A benign fabric: ops execute in arrival order, READs atomically.
    pub fn off() -> Adversary {
        Adversary {
            tear_reads: false,
            reorder: false,
            lose_write_under_faa: false,
            window_ns: 0,
            overtake_prob: 0.0,
            stall_prob: 0.0,
            stall_max_ns: 0,
            completion_delay_prob: 0.0,
            completion_delay_max_ns: 0,
        }
    }
}

/// Faults injected into a run, at virtual times relative to the run's start.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Faults {
    pub compute_crashes: Vec<ComputeCrash>,
    pub memory_crashes: Vec<MemoryCrash>,
    /// Memory nodes that come back blank (a replacement under the failed node's id: zeroed
    /// memory, persisted lines too), to be re-replicated (issue #23).
    #[serde(default)]
    pub memory_rejoins: Vec<MemoryRejoin>,
    /// Probability that an op is delayed by up to `delay_max_ns` on its way to the memory node.
    pub delay_prob: f64,
    pub delay_max_ns: u64,
}

/// How many faults of each kind a seeded fault plan draws (see [`Faults::draw`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FaultRates {
    /// Compute nodes that crash (each at most once; never all of them).
    pub compute_crashes: u32,
    /// Memory-node crash-and-restart events.
    pub memory_crashes: u32,
    /// How long a crashed memory node stays down.
    pub memory_down_ns: u64,
    /// Memory nodes that fail for good (fail-stop: distinct nodes, never node 0 unless
    /// `node0`): the survivors change the view and promote backups.
    #[serde(default)]
    pub memory_failures: u32,
    /// Node 0 may be one of them (the pool's control words have copies on other nodes: a
    /// control chain of more than one member).
    #[serde(default)]
    pub node0: bool,
    /// Each failed memory node comes back blank this long after its failure (0: never).
    #[serde(default)]
    pub memory_rejoin_ns: u64,
    pub delay_prob: f64,
    pub delay_max_ns: u64,
}

impl Faults {
    /// A fault plan drawn from `seed`: the crashes fall at uniformly random instants in
    /// `[0, horizon_ns)`, on random nodes. The same inputs give the same plan.
    pub fn draw(
        seed: u64,
        horizon_ns: u64,
        compute_nodes: u32,
        memory_nodes: u16,
        rates: FaultRates,
    ) -> Faults {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed ^ 0xfa17_fa17_fa17_fa17);
        let horizon = horizon_ns.max(1);
        let mut victims: Vec<u32> = (0..compute_nodes).collect();
        let mut compute_crashes = Vec::new();
        let crashes = rates.compute_crashes.min(compute_nodes.saturating_sub(1));
        for _ in 0..crashes {
            let i = rng.random_range(0..victims.len());
            compute_crashes.push(ComputeCrash {
                at_ns: rng.random_range(0..horizon),
                compute_node: victims.swap_remove(i),
            });
        }
        let mut memory_crashes = (0..rates.memory_crashes)
            .filter(|_| memory_nodes > 0)
            .map(|_| MemoryCrash {
                at_ns: rng.random_range(0..horizon),
                node: rng.random_range(0..memory_nodes),
                down_ns: rates.memory_down_ns,
            })
            .collect::<Vec<_>>();
        // Drawn after the others, so that plans without failures stay what they were.
        let first = if rates.node0 { 0 } else { 1 };
        let mut candidates: Vec<u16> = (first..memory_nodes).collect();
        let mut memory_rejoins = Vec::new();
        for _ in 0..(rates.memory_failures as usize).min(candidates.len()) {
            let i = rng.random_range(0..candidates.len());
            let c = MemoryCrash {
                at_ns: rng.random_range(0..horizon),
                node: candidates.swap_remove(i),
                down_ns: MemoryCrash::FOREVER,
            };
            if rates.memory_rejoin_ns > 0 {
                memory_rejoins.push(MemoryRejoin {
                    at_ns: c.at_ns + rates.memory_rejoin_ns,
                    node: c.node,
                });
            }
            memory_crashes.push(c);
        }
        Faults {
            compute_crashes,
            memory_crashes,
            memory_rejoins,
            delay_prob: rates.delay_prob,
            delay_max_ns: rates.delay_max_ns,
        }
    }
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

/// A memory node down (failed) comes back blank at `at_ns`: a replacement with the failed
/// node's id and a zeroed region, which the survivors re-replicate (issue #23). Nothing
/// happens if the node is up then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryRejoin {
    pub at_ns: u64,
    pub node: u16,
}

impl MemoryCrash {
    /// A `down_ns` that outlasts any run: the node fails for good.
    pub const FOREVER: u64 = u64::MAX / 4;

    /// The node never comes back.
    pub fn is_failure(&self) -> bool {
        self.down_ns >= MemoryCrash::FOREVER
    }
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

    /// How long an op of up to 64 KiB may take from its post to the execution of its last
    /// line, queueing at a busy NIC or atomic unit aside: one way, the transfer, the fault
    /// plan's longest delay, a torn op's spread, and for the op and each of up to 1,024 ops
    /// ahead of it on its QP, two reordering windows (its spread and an overtaking), the CPU
    /// cost of posting it and its NIC services (compute node's and memory node's). Ops ahead count because WRITEs on a QP apply in
    /// post order and an op executes after the QP's earlier atomics, and each is then held
    /// back by its own windows: they stack (a TPC-C batch of some 600 WRITEs was seen to fly
    /// 135 us under windows of 400 ns). A lease's guard must exceed it;
    /// `RunReport::max_flight_ns` says what a run really saw (queueing included).
    pub fn flight_bound_ns(&self) -> u64 {
        let (p, a) = (&self.profile, &self.adversary);
        let big = 1 << 16;
        let window = if a.reorder { a.window_ns } else { 0 };
        let per_op = 2 * window
            + p.cpu_per_verb_ns
            + p.cn_nic_service_ns(64, 64)
            + p.nic_service_ns(64)
            + p.atomic_slot_ns;
        p.one_way_ns
            + p.transfer_ns(big)
            + self.faults.delay_max_ns
            + p.nic_service_ns(big).max(window)
            + per_op * 1025
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_plans_come_from_the_seed() {
        let rates = FaultRates {
            compute_crashes: 2,
            memory_crashes: 3,
            memory_down_ns: 10,
            ..FaultRates::default()
        };
        let a = Faults::draw(1, 1_000_000, 4, 3, rates);
        assert_eq!(a, Faults::draw(1, 1_000_000, 4, 3, rates));
        assert_ne!(a, Faults::draw(2, 1_000_000, 4, 3, rates));
        assert_eq!(a.compute_crashes.len(), 2);
        assert_ne!(
            a.compute_crashes[0].compute_node,
            a.compute_crashes[1].compute_node
        );
        assert_eq!(a.memory_crashes.len(), 3);
        assert!(a
            .memory_crashes
            .iter()
            .all(|c| c.node < 3 && c.at_ns < 1_000_000));
        // Some compute node always survives.
        assert_eq!(Faults::draw(1, 10, 1, 1, rates).compute_crashes.len(), 0);
    }
}
