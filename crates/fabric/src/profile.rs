//! Hardware profiles for the `sim` backend: what a verb costs, in virtual time.

use serde::{Deserialize, Serialize};

/// The cost model of a simulated cluster. Every field has a unit suffix; zero means "free".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Name shown in reports.
    pub name: String,
    /// One-way network latency between a compute node and a memory node (half a round trip).
    pub one_way_ns: u64,
    /// Link bandwidth, for the transfer time of payloads (0 = infinite).
    pub link_gbps: f64,
    /// Ops per second one memory node's NIC executes, in millions (0 = unlimited).
    pub nic_mops: f64,
    /// Service time of one atomic per NIC atomic-table slot (`addr mod 4096`): atomics that hit
    /// the same slot serialize at this interval (paper G10: about 2.5 M ops/s, i.e. 400 ns).
    pub atomic_slot_ns: u64,
    /// Persistent-memory write bandwidth of a memory node (0 = DRAM speed), used in
    /// persistent-memory mode.
    pub pm_write_gbps: f64,
    /// Persistent-memory mode (a profile with `pm_write_gbps` above 0; otherwise ignored):
    /// how long a FLUSH holds its QP at the memory node before it answers (the NIC pushes the
    /// QP's earlier WRITEs to the media first: a PCIe read behind them, as a READ-after-WRITE
    /// does); every later op on that QP answers after it.
    #[serde(default)]
    pub pm_flush_ns: u64,
    /// Compute-side CPU cost of posting one verb.
    pub cpu_per_verb_ns: u64,
    /// Compute-side CPU cost of each resumption of a coordinator (one transaction step).
    pub cpu_per_step_ns: u64,
    /// Memory-node CPU cost of serving one RPC request (dispatch, the handler's own work).
    pub rpc_cpu_ns: u64,
    /// Memory-node CPU cost per KiB of an RPC's request plus response (copying, parsing).
    #[serde(default)]
    pub rpc_cpu_per_kib_ns: u64,
    /// Cores per memory node serving RPC messages (0 = unlimited): a message waits for a free
    /// core, which serves its requests back to back.
    #[serde(default)]
    pub mn_cores: u32,
    /// Memory-node CPU cost of one RPC message, on top of its requests' (finding it in the
    /// receive ring, its header, posting the response): what packing requests into one
    /// message saves (RRPC's message batching). 0 in the presets, whose `rpc_cpu_ns` is all
    /// per request.
    #[serde(default)]
    pub rpc_msg_cpu_ns: u64,
    /// Ops per second one compute node's NIC posts, in millions (0 = unlimited): every
    /// one-sided op and RPC message its coordinators post leaves through it, one at a time.
    #[serde(default)]
    pub cn_nic_mops: f64,
    /// Link bandwidth of one compute node's NIC (0 = infinite): an op holds the NIC for the
    /// longer of its request's and its response's transfer (the two directions share one
    /// timeline: a simplification, pessimistic for a mix of large READs and WRITEs).
    #[serde(default)]
    pub cn_link_gbps: f64,
    /// Compute-side CPU cost of a transaction's own logic, once per attempt (beginning it,
    /// the workload's code between its fetches, finishing it), on its thread.
    #[serde(default)]
    pub cpu_per_txn_ns: u64,
    /// Compute-side CPU cost per item a transaction touches (read, locked or inserted: its
    /// read/write-set entry, copying its record in and out), on its thread.
    #[serde(default)]
    pub cpu_per_item_ns: u64,
}

impl Profile {
    /// The built-in profiles, by name.
    pub const PRESETS: [&'static str; 5] = [
        "cx5-100g",
        "cx5-100g-pm",
        "cx5-100g-papers",
        "cx5-100g-papers-pm",
        "ideal",
    ];

    /// ConnectX-5 100 Gb/s, the FORD and Motor testbeds: round trip about 2 us.
    pub fn cx5_100g() -> Profile {
        Profile {
            name: "cx5-100g".into(),
            one_way_ns: 1000,
            link_gbps: 100.0,
            nic_mops: 60.0,
            atomic_slot_ns: 400,
            pm_write_gbps: 0.0,
            pm_flush_ns: 0,
            cpu_per_verb_ns: 60,
            cpu_per_step_ns: 300,
            // Disaggregated memory nodes have a few weak cores at most (FORD and Motor assume
            // near zero compute; RCC's and Scythe's RPC paths run on 1-2 cores per node): 2
            // cores. A small RPC costs about half a microsecond of CPU per request (FaSST and
            // eRPC report a few hundred ns of dispatch per request, plus the handler), and
            // copying and parsing the payload about 100 ns per KiB (~10 GB/s memcpy).
            rpc_cpu_ns: 500,
            rpc_cpu_per_kib_ns: 100,
            mn_cores: 2,
            rpc_msg_cpu_ns: 0,
            cn_nic_mops: 0.0,
            cn_link_gbps: 0.0,
            cpu_per_txn_ns: 0,
            cpu_per_item_ns: 0,
        }
    }

    /// `cx5-100g` with the compute side of the papers' testbeds: their CPU per verb and per
    /// transaction, and a compute-node NIC (what `dtxn reproduce` runs on).
    ///
    /// Calibrated against FORD's coroutine experiment (FORD, ACM TOS 2023, Fig. 22 and
    /// section 6.4): with 20 threads, FORD's throughput rises 2.2x on SmallBank and 3.4x on
    /// TATP from one coordinator per thread until the CPU saturates at 4-7 per thread. With
    /// warm address caches dtxn's sim gives 2.4x and 3.7x, saturating at 4-7, at 300 ns of
    /// CPU per verb posted (post, poll, copy: SmallBank's 12 verbs against TATP's 5 set the
    /// two rises apart), 300 ns per coroutine resumption and 800 ns per transaction of its own
    /// logic. The papers state no op rate of their NICs: the compute node's ConnectX-5 is
    /// taken to be the memory nodes' (60 Mops, 100 Gb/s). The round trip stays 2 us (FORD
    /// cites 3-8 us for RDMA in general, section 4.9, and measures none).
    pub fn cx5_100g_papers() -> Profile {
        Profile {
            name: "cx5-100g-papers".into(),
            cpu_per_verb_ns: 300,
            cpu_per_step_ns: 300,
            cpu_per_txn_ns: 800,
            cpu_per_item_ns: 0,
            cn_nic_mops: 60.0,
            cn_link_gbps: 100.0,
            ..Profile::cx5_100g()
        }
    }

    /// `cx5-100g` with Optane persistent memory on the memory nodes (FORD's set-up): 13 GB/s
    /// of PM writes per node (FORD section 1: 12.9 GB/s), and a FLUSH (FORD's
    /// READ-after-WRITE) that holds its QP 2 us. The papers measure no flush: 2 us is fitted
    /// to FORD's flush experiment (ACM TOS 2023, Fig. 19: the selective flush +28.7% over the
    /// full flush, one coordinator; `cx5-100g-papers-pm` gives 1.29 on 4 writes), and then
    /// gives its Fig. 20's p50 too (-22.5%: 0.77 against 0.775). At 1 us: 1.17; 0.5 us: 1.12.
    pub fn cx5_100g_pm() -> Profile {
        Profile {
            name: "cx5-100g-pm".into(),
            pm_write_gbps: 13.0,
            pm_flush_ns: 2000,
            ..Profile::cx5_100g()
        }
    }

    /// `cx5-100g-papers` on persistent memory (`cx5-100g-pm`'s PM): FORD's flush ablation.
    pub fn cx5_100g_papers_pm() -> Profile {
        let pm = Profile::cx5_100g_pm();
        Profile {
            name: "cx5-100g-papers-pm".into(),
            pm_write_gbps: pm.pm_write_gbps,
            pm_flush_ns: pm.pm_flush_ns,
            ..Profile::cx5_100g_papers()
        }
    }

    /// Every round trip costs 1 us and nothing else costs anything: pure round-trip counting.
    pub fn ideal() -> Profile {
        Profile {
            name: "ideal".into(),
            one_way_ns: 500,
            link_gbps: 0.0,
            nic_mops: 0.0,
            atomic_slot_ns: 0,
            pm_write_gbps: 0.0,
            pm_flush_ns: 0,
            cpu_per_verb_ns: 0,
            cpu_per_step_ns: 0,
            // Pure round-trip counting: RPCs cost their round trip and nothing else.
            rpc_cpu_ns: 0,
            rpc_cpu_per_kib_ns: 0,
            mn_cores: 0,
            rpc_msg_cpu_ns: 0,
            cn_nic_mops: 0.0,
            cn_link_gbps: 0.0,
            cpu_per_txn_ns: 0,
            cpu_per_item_ns: 0,
        }
    }

    pub fn preset(name: &str) -> Option<Profile> {
        match name {
            "cx5-100g" => Some(Profile::cx5_100g()),
            "cx5-100g-pm" => Some(Profile::cx5_100g_pm()),
            "cx5-100g-papers" => Some(Profile::cx5_100g_papers()),
            "cx5-100g-papers-pm" => Some(Profile::cx5_100g_papers_pm()),
            "ideal" => Some(Profile::ideal()),
            _ => None,
        }
    }

    /// A preset name, or the path of a TOML file holding a profile.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        if let Some(p) = Profile::preset(name_or_path) {
            return Ok(p);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| ProfileError::Read {
            path: name_or_path.into(),
            presets: Profile::PRESETS.join(", "),
            err: e.to_string(),
        })?;
        Profile::from_toml(&text).map_err(|err| ProfileError::Parse {
            path: name_or_path.into(),
            err,
        })
    }

    pub fn from_toml(text: &str) -> Result<Profile, String> {
        let p: Profile = toml::from_str(text).map_err(|e| e.message().to_string())?;
        p.validate()?;
        Ok(p)
    }

    /// This profile with some fields replaced: `FIELD=VALUE,...`, each value as TOML writes it
    /// (`link_gbps=0,mn_cores=10`); named after the replacements, so that a report shows them.
    /// A field that does not exist, or a value of the wrong type, is refused with the fields'
    /// names.
    pub fn with_fields(&self, spec: &str) -> Result<Profile, String> {
        let fields = || {
            let mut names: Vec<String> = match toml::Value::try_from(self) {
                Ok(toml::Value::Table(t)) => t.keys().filter(|k| *k != "name").cloned().collect(),
                _ => Vec::new(),
            };
            names.sort();
            names.join(", ")
        };
        let Ok(toml::Value::Table(mut table)) = toml::Value::try_from(self) else {
            return Err("the profile does not serialize as a table".into());
        };
        let mut seen: Vec<&str> = Vec::new();
        for kv in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = kv.split_once('=') else {
                return Err(format!("`{kv}`: expected FIELD=VALUE"));
            };
            let key = key.trim();
            if key == "name" || !table.contains_key(key) {
                return Err(format!(
                    "`{key}` is not a profile field (fields: {})",
                    fields()
                ));
            }
            if seen.contains(&key) {
                return Err(format!("`{key}` is given twice"));
            }
            seen.push(key);
            let value = toml::from_str::<toml::Table>(&format!("v = {}", value.trim()))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .ok_or_else(|| format!("`{kv}`: the value is not a number"))?;
            table.insert(key.to_string(), value);
        }
        if seen.is_empty() {
            return Err(format!("no FIELD=VALUE given (fields: {})", fields()));
        }
        table.insert(
            "name".into(),
            toml::Value::String(format!("{} with {}", self.name, spec.trim())),
        );
        let p: Profile = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| format!("`{}`: {}", spec.trim(), e.message()))?;
        p.validate()?;
        Ok(p)
    }

    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("link_gbps", self.link_gbps),
            ("nic_mops", self.nic_mops),
            ("pm_write_gbps", self.pm_write_gbps),
            ("cn_nic_mops", self.cn_nic_mops),
            ("cn_link_gbps", self.cn_link_gbps),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{name} must be a non-negative number, not {v}"));
            }
        }
        Ok(())
    }

    /// Nanoseconds to move `bytes` over the link.
    pub(crate) fn transfer_ns(&self, bytes: u64) -> u64 {
        per_byte_ns(self.link_gbps, bytes)
    }

    /// Nanoseconds a memory node's NIC is busy with one op of `bytes` payload.
    pub(crate) fn nic_service_ns(&self, bytes: u64) -> u64 {
        let op = if self.nic_mops > 0.0 {
            (1000.0 / self.nic_mops) as u64
        } else {
            0
        };
        op.max(self.transfer_ns(bytes))
    }

    /// Nanoseconds a compute node's NIC is busy posting one op whose request carries `out`
    /// bytes and whose response `inb` (0 when the profile has no compute NIC).
    pub(crate) fn cn_nic_service_ns(&self, out: u64, inb: u64) -> u64 {
        let op = if self.cn_nic_mops > 0.0 {
            (1000.0 / self.cn_nic_mops) as u64
        } else {
            0
        };
        op.max(per_byte_ns(self.cn_link_gbps, out.max(inb)))
    }

    /// Whether compute nodes have a NIC that costs anything.
    pub(crate) fn has_cn_nic(&self) -> bool {
        self.cn_nic_mops > 0.0 || self.cn_link_gbps > 0.0
    }

    /// Memory-node CPU time to serve one RPC request whose request and response carry `bytes`.
    pub(crate) fn rpc_service_ns(&self, bytes: u64) -> u64 {
        self.rpc_cpu_ns + bytes * self.rpc_cpu_per_kib_ns / 1024
    }

    pub(crate) fn pm_write_ns(&self, bytes: u64) -> u64 {
        per_byte_ns(self.pm_write_gbps, bytes)
    }
}

fn per_byte_ns(gbps: f64, bytes: u64) -> u64 {
    if gbps > 0.0 {
        (bytes as f64 * 8.0 / gbps) as u64
    } else {
        0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile '{path}' is neither a preset ({presets}) nor a readable file: {err}")]
    Read {
        path: String,
        presets: String,
        err: String,
    },
    #[error("profile file '{path}' does not parse: {err}")]
    Parse { path: String, err: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_round_trip_through_toml() {
        for name in Profile::PRESETS {
            let p = Profile::preset(name).unwrap();
            let text = toml::to_string(&p).unwrap();
            assert_eq!(Profile::from_toml(&text).unwrap(), p);
        }
    }

    #[test]
    fn fields_are_replaced_by_name_and_bad_ones_refused() {
        let base = Profile::cx5_100g_papers();
        let p = base
            .with_fields("link_gbps=0, cn_link_gbps=0,mn_cores=10")
            .unwrap();
        assert_eq!((p.link_gbps, p.cn_link_gbps, p.mn_cores), (0.0, 0.0, 10));
        assert_eq!(p.nic_mops, base.nic_mops);
        assert_eq!(
            p.name,
            "cx5-100g-papers with link_gbps=0, cn_link_gbps=0,mn_cores=10"
        );
        // A float where the field is one, and an integer where a float is asked.
        assert_eq!(base.with_fields("nic_mops=12.5").unwrap().nic_mops, 12.5);
        let e = base.with_fields("link_gbs=0").unwrap_err();
        assert!(
            e.contains("`link_gbs` is not a profile field") && e.contains("link_gbps"),
            "{e}"
        );
        assert!(base.with_fields("name=x").is_err());
        assert!(base.with_fields("mn_cores=1.5").is_err());
        assert!(base
            .with_fields("mn_cores")
            .unwrap_err()
            .contains("FIELD=VALUE"));
        assert!(base
            .with_fields("mn_cores=ten")
            .unwrap_err()
            .contains("not a number"));
        assert!(base
            .with_fields("link_gbps=-1")
            .unwrap_err()
            .contains("non-negative"));
        assert!(base.with_fields(" , ").is_err());
        let e = base.with_fields("mn_cores=1,mn_cores=2").unwrap_err();
        assert!(e.contains("`mn_cores` is given twice"), "{e}");
    }

    #[test]
    fn cx5_round_trip_is_about_two_microseconds() {
        let p = Profile::cx5_100g();
        assert_eq!(2 * p.one_way_ns, 2000);
        // 2.5 M atomics per second on one slot.
        assert_eq!(p.atomic_slot_ns, 400);
    }

    #[test]
    fn profiles_from_before_memory_node_cores_still_load() {
        let mut t = toml::to_string(&Profile::cx5_100g()).unwrap();
        t = t
            .lines()
            .filter(|l| !l.starts_with("mn_cores") && !l.starts_with("rpc_cpu_per_kib_ns"))
            .collect::<Vec<_>>()
            .join("\n");
        let p = Profile::from_toml(&t).unwrap();
        assert_eq!((p.mn_cores, p.rpc_cpu_per_kib_ns), (0, 0));
        assert_eq!(p.rpc_cpu_ns, 500);
    }

    #[test]
    fn the_papers_profile_is_cx5_with_a_priced_compute_side() {
        let p = Profile::cx5_100g_papers();
        assert_eq!(
            Profile {
                name: "cx5-100g".into(),
                cpu_per_verb_ns: 60,
                cpu_per_txn_ns: 0,
                cn_nic_mops: 0.0,
                cn_link_gbps: 0.0,
                ..p.clone()
            },
            Profile::cx5_100g()
        );
        assert!(p.has_cn_nic());
        assert_eq!((p.cpu_per_verb_ns, p.cpu_per_txn_ns), (300, 800));
    }

    #[test]
    fn profiles_from_before_compute_nics_and_logic_cpu_load_as_free() {
        let t = toml::to_string(&Profile::ideal()).unwrap();
        let t = t
            .lines()
            .filter(|l| {
                !l.starts_with("cn_")
                    && !l.starts_with("cpu_per_txn")
                    && !l.starts_with("cpu_per_item")
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(Profile::from_toml(&t).unwrap(), Profile::ideal());
        let mut p = Profile::ideal();
        p.cn_nic_mops = -1.0;
        let e = Profile::from_toml(&toml::to_string(&p).unwrap()).unwrap_err();
        assert!(e.contains("cn_nic_mops"), "{e}");
        let p = Profile {
            cn_nic_mops: 100.0,
            cn_link_gbps: 80.0,
            ..Profile::ideal()
        };
        // 10 ns per op, or the larger direction's bytes at 10 bytes per ns.
        assert_eq!(p.cn_nic_service_ns(16, 8), 10);
        assert_eq!(p.cn_nic_service_ns(0, 1000), 100);
        assert!(!Profile::ideal().has_cn_nic());
    }

    #[test]
    fn bad_profiles_are_rejected_with_a_reason() {
        let e = Profile::from_toml("name = 3").unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
        let mut p = Profile::ideal();
        p.link_gbps = -1.0;
        let e = Profile::from_toml(&toml::to_string(&p).unwrap()).unwrap_err();
        assert!(e.contains("link_gbps"), "{e}");
        let e = Profile::load("/nonexistent/profile.toml").unwrap_err();
        assert!(e.to_string().contains("neither a preset"), "{e}");
    }
}
