//! A pool end to end on the simulated fabric: plan, format, load, bootstrap with READs only,
//! look every key up on every replica.

use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, NodeSet, Pool, Topology};
use dtxn_store::layout::Superblock;
use dtxn_store::remote::lookup;
use dtxn_store::{Loader, Plan, PoolMap, PoolShape, StoreError, TableSpec};

fn one() -> Topology {
    Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    }
}

fn value_of(table: u32, key: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (key as usize * 31 + i * 7 + table as usize) as u8)
        .collect()
}

fn specs() -> Vec<TableSpec> {
    let mut small = TableSpec::new(3, "chained", 100, 40);
    // Few buckets, so most keys overflow into chains.
    small.load_factor = 1.0;
    small.slots_per_bucket = 1;
    small.overflow_fraction = 20.0;
    vec![
        TableSpec::new(1, "savings", 8, 500),
        TableSpec::new(2, "customer", 664, 200),
        small,
    ]
}

fn build(seed: u64, nodes: u16, replicas: usize) -> (Pool, Plan) {
    let shape = PoolShape {
        memory_nodes: nodes,
        replicas,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let mut specs = specs();
    specs[2].rows = 10; // 10 buckets of one slot for 120 keys: chains of about 12
    let plan = Plan::new(&specs, &shape).unwrap();
    let pool =
        Pool::Sim(SimPool::new(SimConfig::new(seed, nodes as usize, plan.region_bytes)).unwrap());
    plan.format_pool(&pool).unwrap();
    for t in &plan.tables {
        let mut loader = Loader::new(t);
        let keys = if t.id == 3 { 120 } else { t.bucket_count * 2 };
        for key in 0..keys {
            let v = value_of(t.id, key * 3, t.value_size as usize);
            loader.insert(&pool, key * 3, &v).unwrap();
        }
    }
    (pool, plan)
}

#[test]
fn bootstrap_learns_the_plan_and_every_key_is_found_on_every_replica() {
    for (seed, nodes, replicas) in [(1, 3, 2), (2, 2, 2), (3, 1, 1), (4, 3, 3)] {
        let (mut pool, plan) = build(seed, nodes, replicas);
        let r = pool
            .run(one(), None, |mut ep: Endpoint| async move {
                let map = PoolMap::bootstrap(&mut ep).await?;
                let mut found = 0u64;
                for t in map.tables() {
                    let keys = if t.id == 3 { 120 } else { t.bucket_count * 2 };
                    let mut v = vec![0u8; t.value_size as usize];
                    for &node in &t.replicas {
                        for key in 0..keys {
                            let f = lookup(&mut ep, t, node, key * 3, &mut v).await.unwrap();
                            let f =
                                f.unwrap_or_else(|| panic!("table {} key {} lost", t.id, key * 3));
                            assert_eq!(f.header.version, 0);
                            assert_eq!(v, value_of(t.id, key * 3, v.len()));
                            // Keys that were never loaded are absent.
                            assert_eq!(
                                lookup(&mut ep, t, node, key * 3 + 1, &mut v).await.unwrap(),
                                None
                            );
                            found += 1;
                        }
                    }
                }
                Ok::<_, StoreError>((map, found))
            })
            .unwrap();
        let (map, found) = r.outputs.into_iter().next().unwrap().unwrap().unwrap();
        assert_eq!(map.tables().cloned().collect::<Vec<_>>(), plan.tables);
        assert!(found > 0);
        // Bootstrap cost exactly two round trips.
        assert!(r.stats[0].round_trips >= 2);
    }
}

#[test]
fn overflow_chains_are_used_and_identical_on_replicas() {
    let (pool, plan) = build(7, 2, 2);
    let t = plan.table(3).unwrap();
    let used = |n| pool.with_local(n, |m| m.read_u64(t.overflow_counter()));
    assert!(used(0) > 50, "{}", used(0));
    assert_eq!(used(0), used(1));
    let dump = |n| {
        let mut b = vec![0u8; t.bytes() as usize];
        pool.with_local(n, |m| m.read(t.table_off, &mut b));
        b
    };
    assert!(dump(0) == dump(1), "replicas differ byte for byte");
}

#[test]
fn duplicate_keys_and_wrong_sizes_are_refused() {
    let (pool, plan) = build(1, 1, 1);
    let t = plan.table(1).unwrap();
    let mut l = Loader::new(t);
    let e = l.insert(&pool, 0, &[0; 8]).unwrap_err();
    assert_eq!(e.to_string(), "table 1: key 0 is already loaded");
    let e = l.insert(&pool, 1, &[0; 9]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "table 1: value of 9 bytes, the table's records hold 8"
    );
    let small = plan.table(3).unwrap();
    let mut l = Loader::new(small);
    let mut full = None;
    for key in 1000..2000 {
        if let Err(e) = l.insert(&pool, key, &[0; 100]) {
            full = Some(e);
            break;
        }
    }
    assert!(
        matches!(full, Some(StoreError::OverflowFull { table: 3, .. })),
        "{full:?}"
    );
}

fn bootstrap_error(pool: &mut Pool) -> String {
    let r = pool
        .run(one(), None, |mut ep: Endpoint| async move {
            PoolMap::bootstrap(&mut ep).await.map(|_| ())
        })
        .unwrap();
    r.outputs
        .into_iter()
        .next()
        .unwrap()
        .unwrap()
        .unwrap_err()
        .to_string()
}

#[test]
fn strangers_and_corruption_are_clear_errors() {
    let mut blank = Pool::Sim(SimPool::new(SimConfig::new(1, 2, 1 << 16)).unwrap());
    assert_eq!(
        bootstrap_error(&mut blank),
        "memory node 0 has no dtxn pool (bad magic 0x0000000000000000)"
    );
    // The layout version is checked before the checksum: a v1 pool read by v3 says so.
    let (mut old, _) = build(1, 3, 2);
    old.with_local(2, |m| m.write(8, &1u32.to_le_bytes()));
    assert_eq!(
        bootstrap_error(&mut old),
        "memory node 2 has layout v1, this binary reads v5"
    );
    let (mut bad, _) = build(1, 3, 2);
    bad.with_local(1, |m| {
        let b = m.read_u64(dtxn_store::layout::CATALOG_OFF + 40);
        m.write_u64(dtxn_store::layout::CATALOG_OFF + 40, b ^ 1);
    });
    assert_eq!(
        bootstrap_error(&mut bad),
        "memory node 1: catalog checksum mismatch (corrupt or half-written layout)"
    );
}

#[test]
fn memory_nodes_that_disagree_are_refused() {
    // Two replicas of table 1 that describe it differently (a pool assembled from two
    // layouts): bootstrap names the table and the nodes.
    let (mut pool, plan) = build(2, 2, 2);
    let t = plan.table(1).unwrap();
    let backup = t.replicas[1];
    let mut entries = plan.catalog_of(backup);
    let i = entries.iter().position(|e| e.table == 1).unwrap();
    entries[i].bucket_count += 1;
    let mut cat = vec![0u8; entries.len() * dtxn_store::layout::ENTRY_BYTES];
    for (e, b) in entries
        .iter()
        .zip(cat.chunks_mut(dtxn_store::layout::ENTRY_BYTES))
    {
        e.encode(b);
    }
    pool.with_local(backup, |m| {
        m.write(dtxn_store::layout::CATALOG_OFF, &cat);
        let mut sb = [0u8; 64];
        m.read(0, &mut sb);
        let mut s = dtxn_store::layout::Superblock::decode(backup, &sb).unwrap();
        s.catalog_crc = crc(&cat);
        m.write(0, &s.encode());
    });
    let e = bootstrap_error(&mut pool);
    assert!(
        e.starts_with("the memory nodes disagree about table 1: memory node "),
        "{e}"
    );
}

fn crc(b: &[u8]) -> u32 {
    // The catalog checksum is CRC-32 (IEEE), as crc32fast computes it.
    let mut c = !0u32;
    for &x in b {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[test]
fn an_unknown_table_is_an_error_not_a_panic() {
    let (mut pool, _) = build(1, 1, 1);
    let r = pool
        .run(one(), None, |mut ep: Endpoint| async move {
            let map = PoolMap::bootstrap(&mut ep).await.unwrap();
            map.table(42).map(|_| ()).unwrap_err().to_string()
        })
        .unwrap();
    assert_eq!(
        r.outputs[0].as_deref(),
        Some("table 42 is not in the catalog")
    );
}

/// A pool formatted with metadata words: bootstrap reads them back from the catalog, loaded
/// records hold their values after the words (which start at 0), and a lookup decodes them.
#[test]
fn a_pool_formatted_with_meta_words_reads_them_back() {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    };
    let specs: Vec<TableSpec> = (0..=4u8)
        .map(|m| TableSpec::new(u32::from(m) + 1, &format!("meta{m}"), 312, 50).with_meta_words(m))
        .collect();
    let plan = Plan::new(&specs, &shape).unwrap();
    let mut pool = Pool::Sim(SimPool::new(SimConfig::new(5, 2, plan.region_bytes)).unwrap());
    plan.format_pool(&pool).unwrap();
    for t in &plan.tables {
        let mut loader = Loader::new(t);
        for key in 0..40 {
            let off = loader
                .insert(&pool, key, &value_of(t.id, key, t.value_size as usize))
                .unwrap();
            let codec = t.codec();
            let mut rec = vec![0u8; t.record_bytes as usize];
            pool.with_local(t.primary(), |m| m.read(off, &mut rec));
            for i in 0..codec.meta_words() {
                assert_eq!(codec.meta_word(&rec, i), 0);
            }
        }
    }
    let r = pool
        .run(one(), None, |mut ep: Endpoint| async move {
            let map = PoolMap::bootstrap(&mut ep).await?;
            for t in map.tables() {
                let mut v = vec![0u8; t.value_size as usize];
                for &node in &t.replicas {
                    for key in 0..40 {
                        let f = lookup(&mut ep, t, node, key, &mut v).await.unwrap();
                        assert!(f.is_some(), "table {} key {key}", t.id);
                        assert_eq!(v, value_of(t.id, key, v.len()));
                    }
                }
            }
            Ok::<_, StoreError>(map)
        })
        .unwrap();
    let map = r.outputs.into_iter().next().unwrap().unwrap().unwrap();
    let words: Vec<u8> = map.tables().map(|t| t.meta_words).collect();
    assert_eq!(words, [0, 1, 2, 3, 4]);
    assert_eq!(map.tables().cloned().collect::<Vec<_>>(), plan.tables);
}

/// What a re-replication copier WRITEs to a blank memory node to make it joinable
/// (`PoolMap::format_image`) is byte for byte the catalog and superblock `Plan::format` gave it,
/// but for one thing: a blank node is no seeded member of the control chain (node 0 was).
#[test]
fn a_blank_nodes_format_image_is_what_the_plan_formatted() {
    for (seed, nodes, replicas) in [(1, 3, 2), (4, 3, 3)] {
        let (mut pool, _) = build(seed, nodes, replicas);
        let sizes = pool.node_sizes();
        let r = pool
            .run(one(), None, |mut ep: Endpoint| async move {
                PoolMap::bootstrap(&mut ep).await.unwrap()
            })
            .unwrap();
        let map = r.outputs.into_iter().next().unwrap().unwrap();
        for node in 0..nodes {
            let image = map.format_image(node, sizes[node as usize]);
            assert_eq!(image.len(), 2, "the catalog, then the superblock");
            assert_eq!(image[1].0, 0, "the superblock last");
            for (at, bytes) in image {
                let mut held = vec![0u8; bytes.len()];
                pool.with_local(node, |m| m.read(at, &mut held));
                if at == 0 {
                    let formatted = Superblock::decode(node, &held).unwrap();
                    let given = Superblock::decode(node, &bytes).unwrap();
                    assert_eq!(formatted.control_member, node == 0);
                    assert!(!given.control_member, "node {node}");
                    held = Superblock {
                        control_member: false,
                        ..formatted
                    }
                    .encode()
                    .to_vec();
                }
                assert_eq!(held, bytes, "node {node} at {at}");
            }
        }
    }
}

/// A pool formatted with a control chain of 2 (issue #23): nodes 0 and 1 get the membership
/// area zeroed and say they are seeded members, node 2 neither; a map's chain is the members
/// it can read, in a view's order; and a chain longer than the pool, or of none, is refused.
/// Three memory nodes, two replicas a table, small log slices.
fn three_nodes() -> PoolShape {
    PoolShape {
        memory_nodes: 3,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: 4096,
        region_bytes: None,
    }
}

#[test]
fn a_control_chain_is_formatted_on_its_members_and_read_in_the_view() {
    let shape = three_nodes();
    let plan = Plan::new(&specs(), &shape).unwrap();
    for k in [0, 4] {
        assert_eq!(
            plan.clone().with_control_replicas(k).unwrap_err().to_string(),
            format!("a control chain of {k} memory nodes: it needs 1 to 3 (the pool has 3 memory nodes)")
        );
    }
    let plan = plan.with_control_replicas(2).unwrap();
    let mut pool = Pool::Sim(SimPool::new(SimConfig::new(1, 3, plan.region_bytes)).unwrap());
    // What a node held before: the membership area is garbage until format zeroes it.
    let area = dtxn_store::layout::LEADER_OFF..dtxn_store::layout::MEMBERSHIP_END;
    for n in 0..3 {
        pool.with_local(n, |m| {
            m.write(area.start, &vec![0xAB; (area.end - area.start) as usize])
        });
    }
    plan.format_pool(&pool).unwrap();
    for n in 0..3 {
        let mut b = vec![0u8; (area.end - area.start) as usize];
        pool.with_local(n, |m| m.read(area.start, &mut b));
        assert_eq!(b.iter().all(|&x| x == 0), n < 2, "memory node {n}");
    }
    let r = pool
        .run(one(), None, |mut ep: Endpoint| async move {
            PoolMap::bootstrap(&mut ep).await.unwrap()
        })
        .unwrap();
    let map = r.outputs.into_iter().next().unwrap().unwrap();
    assert_eq!(map.control_replicas(), 2);
    let members: Vec<bool> = map.nodes.iter().map(|sb| sb.control_member).collect();
    assert_eq!(members, [true, true, false]);
    assert_eq!(map.control_chain(), [0, 1]);
    let without_0 = map.view().without(&[0]).unwrap();
    assert_eq!(map.in_view(without_0).control_chain(), [1]);
    let without_1 = map.view().without(&[1]).unwrap();
    assert_eq!(map.in_view(without_1).control_chain(), [0]);
    // Node 1 back as a blank replacement, joining and then rejoined: a data replica again,
    // no control member (its control words were never re-seeded).
    let joining = without_1.joining(1).unwrap();
    assert_eq!(map.in_view(joining).control_chain(), [0]);
    let rejoined = joining.joined(1).unwrap();
    assert!(rejoined.is_rejoined(1));
    assert_eq!(map.in_view(rejoined).control_chain(), [0]);
    assert_eq!(map.in_view(rejoined).control_set(), NodeSet::single(0));
}

/// With a control chain of two members, bootstrap reads the view at the chain's tail (node 1):
/// a view word at the head alone (node 0) is a write not yet committed. With node 0 down, the
/// tail's view must have failed it (else node 0's `NodeDown`, as for any node the view holds
/// live); with one member, node 0's loss is the pool's.
#[test]
fn bootstrap_reads_the_view_at_the_chains_tail_and_past_a_dead_head() {
    use dtxn_fabric::sim::MemoryCrash;
    use dtxn_store::layout::VIEW_OFF;
    use dtxn_store::View;
    let shape = three_nodes();
    let without_2 = View::default().without(&[2]).unwrap();
    let without_0 = View::default().without(&[0]).unwrap();
    let without_0_2 = without_0.without(&[2]).unwrap();
    let rejoined_0 = without_0_2.joining(0).unwrap().joined(0).unwrap();
    let down = |n: u16| Err(format!("memory node {n} is down"));
    // (k, nodes dead, node 0 a member, the head's view word (node 0's), the others') -> the
    // view bootstrap learns.
    let cases = [
        (
            2,
            vec![],
            true,
            without_2,
            View::default(),
            Ok(View::default()),
        ),
        (2, vec![], true, without_2, without_2, Ok(without_2)),
        (2, vec![0], true, View::default(), without_0, Ok(without_0)),
        (2, vec![0], true, View::default(), View::default(), down(0)),
        (1, vec![0], true, View::default(), View::default(), down(0)),
        // Node 0 down and another (the batch may name either).
        (
            3,
            vec![0, 2],
            true,
            View::default(),
            without_0_2,
            Ok(without_0_2),
        ),
        // Node 0 back as a blank data replica (no member; its view word blank), node 2 down.
        (
            3,
            vec![2],
            false,
            View::default(),
            rejoined_0,
            Ok(rejoined_0),
        ),
        // With one member: node 2 down and failed in node 0's view; or held live there.
        (1, vec![2], true, without_2, View::default(), Ok(without_2)),
        (1, vec![2], true, View::default(), View::default(), down(2)),
    ];
    for (i, (k, dead, member, head, tail, want)) in cases.into_iter().enumerate() {
        let plan = Plan::new(&specs(), &shape)
            .unwrap()
            .with_control_replicas(k)
            .unwrap();
        let mut cfg = SimConfig::new(1, 3, plan.region_bytes);
        for node in dead {
            cfg.faults.memory_crashes.push(MemoryCrash {
                at_ns: 0,
                node,
                down_ns: MemoryCrash::FOREVER,
            });
        }
        let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
        plan.format_pool(&pool).unwrap();
        pool.with_local(0, |m| m.write(VIEW_OFF, &head.word().to_le_bytes()));
        for n in 1..3 {
            pool.with_local(n, |m| m.write(VIEW_OFF, &tail.word().to_le_bytes()));
        }
        if !member {
            pool.with_local(0, |m| {
                let mut b = [0u8; dtxn_store::layout::SUPERBLOCK_BYTES];
                m.read(0, &mut b);
                let sb = dtxn_store::layout::Superblock::decode(0, &b).unwrap();
                let blank = dtxn_store::layout::Superblock {
                    control_member: false,
                    ..sb
                };
                m.write(0, &blank.encode());
            });
        }
        let r = pool
            .run(one(), None, |mut ep: Endpoint| async move {
                PoolMap::bootstrap(&mut ep)
                    .await
                    .map(|m| {
                        (
                            m.view(),
                            m.nodes.iter().map(|sb| sb.node).collect::<Vec<_>>(),
                        )
                    })
                    .map_err(|e| e.to_string())
            })
            .unwrap();
        let got = r.outputs.into_iter().next().unwrap().unwrap();
        assert_eq!(
            got.as_ref().map(|g| g.0),
            want.as_ref().copied(),
            "case {i}"
        );
        if let Ok((view, nodes)) = got {
            let live: Vec<u16> = (0..3).filter(|&n| !view.is_failed(n)).collect();
            assert_eq!(nodes, live, "case {i}");
        }
    }
}
