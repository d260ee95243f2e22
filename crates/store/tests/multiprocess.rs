//! Bootstrap across processes on `shm`: a memory-node process creates the regions (files),
//! formats and loads them, and exits; a compute process it never talked to attaches to the
//! files and learns the pool with one-sided READs only.

use dtxn_fabric::shm::{ShmConfig, ShmPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use dtxn_store::remote::lookup;
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, TableSpec};
use std::process::Command;

const DIR_VAR: &str = "DTXN_TEST_MEMNODE_DIR";

fn plan() -> Plan {
    let shape = PoolShape {
        memory_nodes: 3,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    Plan::new(
        &[
            TableSpec::new(1, "accounts", 8, 300),
            TableSpec::new(2, "orders", 200, 100),
        ],
        &shape,
    )
    .unwrap()
}

fn value(table: u32, key: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (key as usize + i + table as usize) as u8)
        .collect()
}

/// The memory-node side, run in a child process by the test below (ignored when run alone).
#[test]
#[ignore = "run as a child process by bootstrap_from_a_pool_another_process_created"]
fn memnode_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let plan = plan();
    let cfg = ShmConfig {
        node_sizes: vec![plan.region_bytes; 3],
        dir: Some(dir.into()),
        delay_ns: 0,
    };
    let pool = Pool::Shm(ShmPool::create(cfg).unwrap());
    plan.format_pool(&pool).unwrap();
    for t in &plan.tables {
        let mut l = Loader::new(t);
        for key in 0..t.bucket_count {
            l.insert(&pool, key, &value(t.id, key, t.value_size as usize))
                .unwrap();
        }
    }
}

#[test]
fn bootstrap_from_a_pool_another_process_created() {
    let dir = std::env::temp_dir().join(format!("dtxn-mp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "memnode_child",
            "--test-threads",
            "1",
        ])
        .env(DIR_VAR, &dir)
        .status()
        .unwrap();
    assert!(status.success(), "the memory-node process failed");
    let mut pool = Pool::Shm(ShmPool::open(&dir, 0).unwrap());
    let one = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = pool
        .run(one, None, |mut ep: Endpoint| async move {
            let map = PoolMap::bootstrap(&mut ep).await.unwrap();
            let mut found = 0;
            for t in map.tables() {
                let mut v = vec![0u8; t.value_size as usize];
                for key in 0..t.bucket_count {
                    for &n in &t.replicas {
                        let f = lookup(&mut ep, t, n, key, &mut v).await.unwrap();
                        assert!(f.is_some(), "table {} key {key} on node {n}", t.id);
                        assert_eq!(v, value(t.id, key, v.len()));
                        found += 1;
                    }
                }
            }
            (map, found)
        })
        .unwrap();
    let (map, found) = r.outputs.into_iter().next().unwrap().unwrap();
    let plan = plan();
    assert_eq!(map.tables().cloned().collect::<Vec<_>>(), plan.tables);
    assert!(found > 100);
    std::fs::remove_dir_all(&dir).unwrap();
}
