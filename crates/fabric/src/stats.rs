//! Exact, hardware-independent op accounting.

use crate::verbs::OpKind;
use std::ops::{AddAssign, Sub};

/// What a coordinator (or one transaction, as a difference of two snapshots) sent over the fabric.
///
/// `round_trips` counts the batches a coordinator waited for: the critical path. Detached batches
/// (posted and not awaited, e.g. a background lock release) count their verbs and bytes but no
/// round trip.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub round_trips: u64,
    pub batches: u64,
    /// Verbs by [`OpKind`] (indexed by `kind as usize`).
    pub verbs: [u64; 6],
    /// Payload bytes sent: WRITE data, atomic operands, RPC requests.
    pub bytes_out: u64,
    /// Payload bytes received: READ data, atomic old values, RPC responses (these counted when
    /// an awaited batch completes: detached and background batches' responses are not read).
    pub bytes_in: u64,
    /// Wall time the backend spent in `submit` for these batches, in ns: on `shm`, which
    /// executes a batch's verbs inside `submit`, the time spent executing them. Measured only
    /// when [`Endpoint::time_fabric`](crate::Endpoint::time_fabric) is on (two clock reads
    /// per batch), else 0. Not exact, unlike the counts above.
    #[serde(default)]
    pub fabric_ns: u64,
    /// RPC messages sent: after packing, one per (batch, memory node) with RPC ops (the
    /// request count is `verbs[Rpc]`). Counted when the batch is posted, like the verbs.
    #[serde(default)]
    pub rpc_messages: u64,
    /// Memory-node CPU time spent serving this coordinator's RPCs, in ns: virtual service
    /// time on `sim` (exact), measured handler wall time on `shm` and `ucx`. Returned with
    /// the responses, so counted when an awaited batch completes (not for detached or
    /// background batches, whose responses nobody reads).
    #[serde(default)]
    pub mn_cpu_ns: u64,
}

impl Stats {
    pub fn verbs_total(&self) -> u64 {
        self.verbs.iter().sum()
    }

    pub fn verb(&self, kind: OpKind) -> u64 {
        self.verbs[kind as usize]
    }

    pub fn bytes(&self) -> u64 {
        self.bytes_out + self.bytes_in
    }
}

impl AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.round_trips += o.round_trips;
        self.batches += o.batches;
        for (a, b) in self.verbs.iter_mut().zip(o.verbs) {
            *a += b;
        }
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.fabric_ns += o.fabric_ns;
        self.rpc_messages += o.rpc_messages;
        self.mn_cpu_ns += o.mn_cpu_ns;
    }
}

impl Sub for Stats {
    type Output = Stats;
    fn sub(self, o: Stats) -> Stats {
        let mut verbs = self.verbs;
        for (a, b) in verbs.iter_mut().zip(o.verbs) {
            *a -= b;
        }
        Stats {
            round_trips: self.round_trips - o.round_trips,
            batches: self.batches - o.batches,
            verbs,
            bytes_out: self.bytes_out - o.bytes_out,
            bytes_in: self.bytes_in - o.bytes_in,
            fabric_ns: self.fabric_ns - o.fabric_ns,
            rpc_messages: self.rpc_messages - o.rpc_messages,
            mn_cpu_ns: self.mn_cpu_ns - o.mn_cpu_ns,
        }
    }
}
