//! Persistent memory (`--set flush=true`): after a run, every memory node loses power; each
//! backup must still hold every committed record exactly as the primary held it before the
//! loss (a lost primary is rebuilt from its backups, FORD section 4.7). The sim drops a random
//! half of the lines no FLUSH of the writer's own QP persisted, so a protocol that forgets a
//! FLUSH loses records here.

use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::{Plan, PoolMap, PoolShape};
use dtxn_txn::{Coordinator, Protocol, TxnConfig};
use dtxn_workloads::{rng::mix, scan_replica, scan_table, smallbank, WlRng, Workload};
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Runs SmallBank on a persistent-memory sim pool, cuts the power, and returns, per table
/// replica, the records (key -> version, value) a backup lost or holds differently from the
/// primary, as `table/node: key` strings.
fn lost_after_power_loss(txn: TxnConfig, seed: u64) -> Vec<String> {
    let w = smallbank::SmallBank::new(smallbank::Options {
        accounts: 200,
        hot: 20,
        ..smallbank::Options::default()
    })
    .unwrap();
    let topo = Topology {
        compute_nodes: 2,
        threads: 2,
        coroutines: 2,
    };
    let shape = PoolShape {
        memory_nodes: 3,
        replicas: 2,
        log_slices: topo.coordinators(),
        log_slice_bytes: w.log_slice_bytes(),
        region_bytes: None,
    };
    let plan = Plan::new(&w.tables_for(txn.protocol, None), &shape).unwrap();
    let mut cfg = SimConfig::new(seed, 3, plan.region_bytes);
    cfg.profile = Profile::cx5_100g();
    cfg.persistent = true;
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    if txn.protocol.needs_handlers(&txn) {
        pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    }
    plan.format_pool(&pool).unwrap();
    w.load(&pool, &plan, seed).unwrap();
    let txn = Rc::new(txn);
    let shared = Rc::new(w.clone());
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    let r = sim
        .run(topo, None, |ep: Endpoint| {
            let (txn, w) = (txn.clone(), shared.clone());
            async move {
                let mut ep = ep;
                let index = ep.id().index;
                let map = Rc::new(PoolMap::bootstrap(&mut ep).await.unwrap());
                let mut c = Coordinator::new(ep, map, txn);
                let mut rng = WlRng::seed_from_u64(mix(seed, u64::from(index)));
                let mut tally = w.tally(false);
                let mut committed = 0u32;
                for _ in 0..40 {
                    committed += u32::from(w.run_one(&mut c, &mut rng, &mut tally).await.1.is_ok());
                }
                c.retire().await;
                committed
            }
        })
        .unwrap();
    let committed: u32 = r.outputs.into_iter().map(|o| o.expect("no crash")).sum();
    assert!(
        committed > 100,
        "{}: {committed} committed",
        txn.protocol.name()
    );
    let tables = plan.tables.clone();
    // No coordinator runs: what each primary holds is the committed state.
    let before: Vec<BTreeMap<u64, (u64, Vec<u8>)>> = tables
        .iter()
        .map(|t| {
            scan_table(&pool, t)
                .into_iter()
                .map(|r| (r.key, (r.version, r.value)))
                .collect()
        })
        .collect();
    let Pool::Sim(sim) = &mut pool else {
        unreachable!()
    };
    sim.power_loss();
    let mut lost = Vec::new();
    for (t, want) in tables.iter().zip(&before) {
        for &n in t.backups() {
            let have: BTreeMap<u64, (u64, Vec<u8>)> = scan_replica(&pool, t, n)
                .into_iter()
                .map(|r| (r.key, (r.version, r.value)))
                .collect();
            for (k, v) in want {
                if have.get(k) != Some(v) {
                    lost.push(format!("{}/{n}: {k}", t.id));
                }
            }
        }
    }
    lost
}

#[test]
fn with_flush_every_protocols_backups_survive_a_power_loss() {
    let mut failed = Vec::new();
    for name in Protocol::NAMES {
        let protocol = Protocol::from_name(name).unwrap();
        for seed in 0..2 {
            let txn = TxnConfig {
                protocol,
                flush: true,
                ..TxnConfig::default()
            };
            let lost = lost_after_power_loss(txn, seed);
            if !lost.is_empty() {
                failed.push(format!(
                    "{name}, seed {seed}: {} records lost or changed on backups, e.g. {:?}",
                    lost.len(),
                    &lost[..lost.len().min(3)]
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn without_flush_a_power_loss_loses_committed_records() {
    let txn = TxnConfig {
        protocol: Protocol::Ford,
        flush: false,
        ..TxnConfig::default()
    };
    assert!(!lost_after_power_loss(txn, 1).is_empty());
}
