//! `dtxn reproduce sync`: the one-sided-sync paper's measurements on the sim. Its torn-read
//! probe (`dtxn probe`, adversarial sim) and its raw-atomics experiment (section 6.2: CAS
//! throughput on one word and on words at several strides), the latter measured here in
//! process, since `dtxn bench` runs transactions, not bare verbs.

use super::{Claim, Row};
use crate::probe::{run_probe, ProbeCounts, ProbeParams, Scheme};
use anyhow::Result;
use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};

/// The probe as `dtxn probe` runs it by default: 4 records, 2 readers, 1 writer.
const RECORDS: usize = 4;

fn sim_pool(seed: u64, profile: &str, size: u64) -> Result<Pool> {
    let mut cfg = SimConfig::new(seed, 1, size);
    cfg.profile = Profile::load(profile)?;
    Ok(Pool::Sim(SimPool::new(cfg)?))
}

fn probe(seed: u64, scheme: Scheme, size: usize, reads: u64) -> Result<ProbeCounts> {
    let area = ((size as u64).div_ceil(64) * 64 * RECORDS as u64).div_ceil(4096) * 4096;
    let mut pool = sim_pool(seed, "cx5-100g", area)?;
    run_probe(
        &mut pool,
        &ProbeParams {
            base: 0,
            compute_node: 0,
            scheme,
            record_size: size,
            records: RECORDS,
            readers: 2,
            writers: 1,
            reads_per_reader: reads,
            duration_ns: None,
        },
    )
}

/// Every worker CASes its word (`index * stride`: one word for stride 0) one op at a time, as
/// the paper's workers do, for `ns` of virtual time; the rate in millions of ops per second.
fn cas_mops(seed: u64, workers: u32, stride: u64, ns: u64) -> Result<f64> {
    let mut pool = sim_pool(seed, "cx5-100g", (u64::from(workers) * stride).max(4096))?;
    // The paper's testbed A: 4 compute nodes, 1 storage node.
    let topo = Topology {
        compute_nodes: 4,
        threads: workers.div_ceil(4),
        coroutines: 1,
    };
    let report = pool.run(topo, None, |mut ep: Endpoint| async move {
        let addr = u64::from(ep.id().index) * stride;
        let mut ops = 0u64;
        while ep.now_ns() < ns {
            ep.cas(0, addr, 0, 0);
            ep.post().await?;
            // Only ops completed inside the window: a queue of 128 on one word drains for
            // 50 us past it.
            if ep.now_ns() <= ns {
                ops += 1;
            }
        }
        anyhow::Ok(ops)
    })?;
    let mut ops = 0;
    for o in report.outputs.into_iter().flatten() {
        ops += o?;
    }
    Ok(ops as f64 / ns as f64 * 1e3)
}

pub(super) fn measure(quick: bool, seed: u64, progress: bool) -> Result<Vec<Row>> {
    let reads: u64 = if quick { 2_000 } else { 20_000 };
    let atomics_ns: u64 = if quick { 100_000 } else { 1_000_000 };
    let say = |what: &str| {
        if progress {
            eprintln!("{what}");
        }
    };
    let probe_cmd = |size: usize| {
        format!("`dtxn probe --backend sim --profile cx5-100g --record-size {size} --reads {reads} --seed {seed}`")
    };
    let mut rows = Vec::new();
    let detail = |c: &ProbeCounts| {
        format!(
            "{} reads, {} accepted, {} torn detected, {} torn accepted",
            c.reads, c.accepted, c.torn_detected, c.torn_undetected
        )
    };
    let broken = [Scheme::Bookend, Scheme::SingleRead, Scheme::MarkInPlace];
    let correct = [Scheme::TwoRead, Scheme::PerLine, Scheme::Lock];
    say("probe: 256-byte records");
    for s in broken {
        let c = probe(seed, s, 256, reads)?;
        rows.push(Row {
            what: format!("{}, 256 B: torn reads accepted", s.name()),
            paper: Claim::Some,
            source: "sync section 6.4: torn reads above 128 B; broken scheme",
            ours: c.torn_undetected as f64,
            runs: None,
            seeds: Vec::new(),
            why: None,
            detail: detail(&c),
            how: vec![probe_cmd(256)],
        });
    }
    for (size, schemes, what, source) in [
        (
            256,
            &correct[..],
            "two-read, per-line, lock, 256 B: torn reads accepted",
            "sync S6, S8, S1: correct schemes",
        ),
        (
            128,
            &broken[..],
            "bookend, single-read, mark-in-place, 128 B: torn reads accepted",
            "sync section 6.4: none undetectable at 128 B",
        ),
        (
            64,
            &broken[..],
            "bookend, single-read, mark-in-place, 64 B: torn reads accepted",
            "sync: a cache line is read atomically",
        ),
    ] {
        say(&format!("probe: {size}-byte records"));
        let mut sum = ProbeCounts::default();
        for &s in schemes {
            let c = probe(seed, s, size, reads)?;
            sum.reads += c.reads;
            sum.accepted += c.accepted;
            sum.torn_detected += c.torn_detected;
            sum.torn_undetected += c.torn_undetected;
        }
        rows.push(Row {
            what: what.to_string(),
            paper: Claim::Zero,
            source,
            ours: sum.torn_undetected as f64,
            runs: None,
            seeds: Vec::new(),
            why: None,
            detail: detail(&sum),
            how: vec![probe_cmd(size)],
        });
    }
    for (what, workers, stride, paper, source) in [
        (
            "contended CAS (one word), 8 workers, Mops",
            8,
            0,
            2.32,
            "sync section 6.2: ~2.32 M ops/s",
        ),
        (
            "contended CAS (one word), 128 workers, Mops",
            128,
            0,
            2.32,
            "sync section 6.2: scales only to ~8 workers",
        ),
        (
            "CAS at 64 B stride, 128 workers, Mops",
            128,
            64,
            51.2,
            "sync section 6.2: ~51.2 M ops/s",
        ),
        (
            "CAS at 256 B stride, 128 workers, Mops",
            128,
            256,
            40.0,
            "sync section 6.2: ~40 M ops/s",
        ),
        (
            "CAS at 512 B stride, 64 workers, Mops",
            64,
            512,
            20.0,
            "sync section 6.2: ~20 M ops/s",
        ),
        (
            "CAS at 4 KiB stride, 128 workers, Mops",
            128,
            4096,
            2.32,
            "sync section 6.2: as one contended word",
        ),
    ] {
        say(what);
        let mops = cas_mops(seed, workers, stride, atomics_ns)?;
        rows.push(Row {
            what: what.to_string(),
            paper: Claim::Ratio(paper),
            source,
            ours: mops,
            runs: None,
            seeds: Vec::new(),
            why: None,
            detail: format!(
                "{workers} workers on 4 compute nodes, one CAS at a time each, {} us of virtual time, sim cx5-100g",
                atomics_ns / 1000
            ),
            how: vec![format!(
                "`dtxn reproduce sync{} --seed {seed}` (in process: no dtxn command posts bare CASes)",
                if quick { " --quick" } else { "" }
            )],
        });
    }
    Ok(rows)
}
