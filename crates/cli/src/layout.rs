//! `dtxn layout`: what a workload's tables need in a pool of a given shape, per table and per
//! memory node, from the store's sizing (`Plan`), without building the pool.

use crate::bench::{self, WorkloadArgs};
use anyhow::{anyhow, bail, Result};
use dtxn_store::{Plan, PoolShape};
use dtxn_txn::Protocol;
use serde::Serialize;
use std::process::ExitCode;

#[derive(Debug, Clone, clap::Args)]
pub struct LayoutArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// The protocol whose layout to show: a multi-version one (motor) lays tables out as
    /// CVTs, and the output compares them with the single-version layout.
    #[arg(long, default_value = "ford", value_parser = clap::builder::PossibleValuesParser::new(Protocol::NAMES))]
    pub protocol: String,
    /// motor: versions per record (default per workload).
    #[arg(long)]
    pub vnum: Option<u8>,
    /// Memory nodes.
    #[arg(long, default_value_t = 2)]
    pub memory_nodes: u16,
    /// Copies of every table (primary + backups).
    #[arg(long, default_value_t = 2)]
    pub replicas: usize,
    /// Coordinators that log (one log slice each, on every memory node).
    #[arg(long, default_value_t = 64)]
    pub coordinators: u32,
    /// Undo-log slice per coordinator, in bytes (default: what the workload needs).
    #[arg(long, value_parser = crate::units::parse_size, allow_hyphen_values = true)]
    pub log_slice_bytes: Option<u64>,
    /// Region size of each memory node, to check that the tables fit (e.g. 4G).
    #[arg(long, value_parser = crate::units::parse_size, allow_hyphen_values = true)]
    pub node_memory: Option<u64>,
    /// Transactions a run will attempt (TPC-C sizes its growing tables for them).
    #[arg(long, default_value_t = 1_000_000)]
    pub txns: u64,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct TableRow {
    id: u32,
    name: String,
    value_bytes: u32,
    /// The protocol's metadata words per record, and their byte offsets in the record (line
    /// 0, after the header; the value follows them).
    meta_words: u8,
    meta_word_offsets: Vec<usize>,
    record_bytes: u32,
    slot_bytes: u64,
    buckets: u64,
    overflow_buckets: u64,
    slots_per_bucket: u32,
    slots: u64,
    bytes_per_replica: u64,
    /// Memory nodes holding it, primary first.
    nodes: Vec<u16>,
    /// Multi-version tables: versions per record, attribute-bar lines per record, and the
    /// bytes the same table takes single-version (FORD's layout).
    #[serde(skip_serializing_if = "Option::is_none")]
    vnum: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bar_lines: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    single_version_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct NodeRow {
    node: u16,
    tables: u64,
    table_bytes: u64,
    log_bytes: u64,
    /// Everything the node needs (header, catalog, logs, tables, alignment).
    need_bytes: u64,
    region_bytes: u64,
}

#[derive(Debug, Serialize)]
struct Layout {
    workload: String,
    protocol: String,
    workload_options: serde_json::Value,
    memory_nodes: u16,
    replicas: usize,
    log_slices: u32,
    log_slice_bytes: u64,
    tables: Vec<TableRow>,
    nodes: Vec<NodeRow>,
    /// Multi-version layouts: the tables' bytes per copy against the single-version layout's.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_single_version: Option<Footprint>,
}

#[derive(Debug, Serialize)]
struct Footprint {
    table_bytes: u64,
    single_version_table_bytes: u64,
    ratio: f64,
}

pub fn run(a: LayoutArgs) -> Result<ExitCode> {
    if a.coordinators == 0 {
        bail!("--coordinators must be at least 1");
    }
    bench::at_most("--txns", a.txns, bench::MAX_TXNS)?;
    bench::at_most("--memory-nodes", u64::from(a.memory_nodes), 256)?;
    bench::at_most(
        "--coordinators",
        u64::from(a.coordinators),
        bench::MAX_COORDINATORS,
    )?;
    bench::check_log_slice(a.log_slice_bytes)?;
    let w = bench::choose(&a.workload, a.txns)?;
    if a.memory_nodes == 0 {
        bail!("--memory-nodes must be at least 1");
    }
    if a.replicas == 0 || a.replicas > usize::from(a.memory_nodes) {
        bail!(
            "--replicas must be 1 to --memory-nodes ({}), got {}",
            a.memory_nodes,
            a.replicas
        );
    }
    let shape = PoolShape {
        memory_nodes: a.memory_nodes,
        replicas: a.replicas,
        log_slices: a.coordinators,
        log_slice_bytes: a.log_slice_bytes.unwrap_or(w.log_slice_bytes()),
        region_bytes: a.node_memory,
    };
    let protocol = Protocol::from_name(&a.protocol).ok_or_else(|| {
        anyhow!(
            "unknown protocol '{}' (valid: {})",
            a.protocol,
            Protocol::NAMES.join(", ")
        )
    })?;
    if a.vnum.is_some() && !protocol.multi_version() {
        bail!("--vnum is for multi-version protocols (motor)");
    }
    let plan = Plan::new(&w.tables(protocol, a.vnum), &shape).map_err(|e| anyhow!("{e}"))?;
    // The single-version layout of the same tables, to compare footprints.
    let single = if protocol.multi_version() {
        let mut s = shape.clone();
        s.region_bytes = None;
        Some(Plan::new(&w.tables(Protocol::Ford, None), &s).map_err(|e| anyhow!("{e}"))?)
    } else {
        None
    };
    let l = layout(&a, &w, &plan, single.as_ref());
    if a.json {
        println!("{}", serde_json::to_string_pretty(&l)?);
    } else {
        print!("{}", table(&l));
    }
    Ok(ExitCode::SUCCESS)
}

fn layout(a: &LayoutArgs, w: &bench::Chosen, plan: &Plan, single: Option<&Plan>) -> Layout {
    let slice = plan.shape.log_slice_bytes.div_ceil(64) * 64;
    let log_bytes = u64::from(plan.shape.log_slices) * slice;
    let tables = plan
        .tables
        .iter()
        .map(|t| TableRow {
            id: t.id,
            name: t.name.clone(),
            value_bytes: t.value_size,
            meta_words: t.meta_words,
            meta_word_offsets: {
                let c = t.codec();
                (0..c.meta_words()).map(|i| c.meta_word_off(i)).collect()
            },
            record_bytes: t.record_bytes,
            slot_bytes: t.slot_stride,
            buckets: t.bucket_count,
            overflow_buckets: t.overflow_buckets,
            slots_per_bucket: t.slots_per_bucket,
            slots: (t.bucket_count + t.overflow_buckets) * u64::from(t.slots_per_bucket),
            bytes_per_replica: t.bytes(),
            nodes: t.replicas.clone(),
            vnum: t.mv.as_ref().map(|m| m.vnum),
            bar_lines: t.mv.as_ref().map(|m| m.bar_lines),
            single_version_bytes: single.and_then(|p| p.table(t.id)).map(|s| s.bytes()),
        })
        .collect::<Vec<TableRow>>();
    let vs_single_version = single.map(|p| {
        let table_bytes: u64 = tables.iter().map(|t| t.bytes_per_replica).sum();
        let single_version_table_bytes: u64 = p.tables.iter().map(|t| t.bytes()).sum();
        Footprint {
            table_bytes,
            single_version_table_bytes,
            ratio: table_bytes as f64 / single_version_table_bytes.max(1) as f64,
        }
    });
    let nodes = (0..plan.shape.memory_nodes)
        .map(|n| {
            let on: Vec<_> = plan
                .tables
                .iter()
                .filter(|t| t.replicas.contains(&n))
                .collect();
            NodeRow {
                node: n,
                tables: on.len() as u64,
                table_bytes: on.iter().map(|t| t.bytes()).sum(),
                log_bytes,
                need_bytes: plan.node_need[n as usize],
                region_bytes: plan.region_bytes,
            }
        })
        .collect();
    Layout {
        workload: a.workload.workload.clone(),
        protocol: a.protocol.clone(),
        vs_single_version,
        workload_options: w.options_json(),
        memory_nodes: plan.shape.memory_nodes,
        replicas: plan.shape.replicas,
        log_slices: plan.shape.log_slices,
        log_slice_bytes: plan.shape.log_slice_bytes,
        tables,
        nodes,
    }
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / f64::from(1 << 20))
}

fn table(l: &Layout) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}) for {} on {} memory nodes, {} replicas; {} log slices of {} bytes",
        l.workload,
        l.workload_options,
        l.protocol,
        l.memory_nodes,
        l.replicas,
        l.log_slices,
        l.log_slice_bytes
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<20} {:>3} {:>6} {:>4} {:>7} {:>6} {:>10} {:>9} {:>11} {:>10}  nodes",
        "table",
        "id",
        "value",
        "meta",
        "record",
        "slot",
        "buckets",
        "overflow",
        "slots",
        "MiB/copy"
    );
    for t in &l.tables {
        let nodes: Vec<String> = t.nodes.iter().map(u16::to_string).collect();
        let _ = writeln!(
            s,
            "{:<20} {:>3} {:>6} {:>4} {:>7} {:>6} {:>10} {:>9} {:>11} {:>10}  {}",
            t.name,
            t.id,
            t.value_bytes,
            t.meta_words,
            t.record_bytes,
            t.slot_bytes,
            t.buckets,
            t.overflow_buckets,
            t.slots,
            mib(t.bytes_per_replica),
            nodes.join(",")
        );
        if let (Some(&first), Some(&last)) =
            (t.meta_word_offsets.first(), t.meta_word_offsets.last())
        {
            let _ = writeln!(
                s,
                "{:<20}     {} metadata words of 8 bytes at record bytes {first}..{} (line 0, \
                 after the header); value from byte {}",
                "",
                t.meta_words,
                last + 8,
                last + 8
            );
        }
        if let (Some(v), Some(b), Some(sv)) = (t.vnum, t.bar_lines, t.single_version_bytes) {
            let _ = writeln!(
                s,
                "{:<20}     {v} versions, {b}-line attribute bar: {:.2}x the single-version {} MiB",
                "",
                t.bytes_per_replica as f64 / sv.max(1) as f64,
                mib(sv)
            );
        }
    }
    if let Some(f) = &l.vs_single_version {
        let _ = writeln!(
            s,
            "\ntables: {} MiB per copy, {:.2}x the single-version layout's {} MiB",
            mib(f.table_bytes),
            f.ratio,
            mib(f.single_version_table_bytes)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<6} {:>7} {:>12} {:>10} {:>12} {:>12}",
        "node", "tables", "tables MiB", "logs MiB", "needs MiB", "region MiB"
    );
    for n in &l.nodes {
        let _ = writeln!(
            s,
            "{:<6} {:>7} {:>12} {:>10} {:>12} {:>12}",
            n.node,
            n.tables,
            mib(n.table_bytes),
            mib(n.log_bytes),
            mib(n.need_bytes),
            mib(n.region_bytes)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use dtxn_store::TableSpec;

    /// A protocol's metadata words show as a column and a line giving their bytes.
    #[test]
    fn tables_show_their_meta_words_and_bytes() {
        let specs = [
            TableSpec::new(1, "bare", 312, 100),
            TableSpec::new(2, "leased", 312, 100).with_meta_words(2),
        ];
        let plan = Plan::new(&specs, &PoolShape::default()).unwrap();
        let row = |t: &dtxn_store::TableInfo| TableRow {
            id: t.id,
            name: t.name.clone(),
            value_bytes: t.value_size,
            meta_words: t.meta_words,
            meta_word_offsets: (0..usize::from(t.meta_words))
                .map(|i| t.codec().meta_word_off(i))
                .collect(),
            record_bytes: t.record_bytes,
            slot_bytes: t.slot_stride,
            buckets: t.bucket_count,
            overflow_buckets: t.overflow_buckets,
            slots_per_bucket: t.slots_per_bucket,
            slots: t.slots(),
            bytes_per_replica: t.bytes(),
            nodes: t.replicas.clone(),
            vnum: None,
            bar_lines: None,
            single_version_bytes: None,
        };
        let l = Layout {
            workload: "test".into(),
            protocol: "test".into(),
            workload_options: serde_json::json!({}),
            memory_nodes: 2,
            replicas: 2,
            log_slices: 1,
            log_slice_bytes: 4096,
            tables: plan.tables.iter().map(row).collect(),
            nodes: Vec::new(),
            vs_single_version: None,
        };
        let out = table(&l);
        let lines: Vec<&str> = out.lines().collect();
        let header = lines.iter().position(|l| l.starts_with("table ")).unwrap();
        assert!(lines[header].contains(" meta "), "{out}");
        let bare: Vec<&str> = lines[header + 1].split_whitespace().collect();
        assert_eq!(&bare[..5], ["bare", "1", "312", "0", "384"], "{out}");
        let leased: Vec<&str> = lines[header + 2].split_whitespace().collect();
        assert_eq!(&leased[..5], ["leased", "2", "312", "2", "448"], "{out}");
        assert!(
            lines[header + 3].contains(
                "2 metadata words of 8 bytes at record bytes 32..48 (line 0, after the \
                 header); value from byte 48"
            ),
            "{out}"
        );
        let json = serde_json::to_value(&l.tables[1]).unwrap();
        assert_eq!(json["meta_words"], 2);
        assert_eq!(json["meta_word_offsets"], serde_json::json!([32, 40]));
    }
}
