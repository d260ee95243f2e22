//! FORD's critical-path round trips per transaction (its paper's Table / section 3.9), exact,
//! on the `ideal` profile with one coordinator.

use dtxn_fabric::sim::{Adversary, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Profile, Topology};
use dtxn_store::{Loader, Plan, PoolShape, TableSpec};
use dtxn_txn::{Access, Coordinator, FordOptions, TxKind, TxnConfig};

mod common;

const T: u32 = 1;

fn pool() -> Pool {
    pool_with(0, 1)
}

/// [`pool`], its table's records with `meta_words` metadata words and `copies` copies (a
/// protocol's).
fn pool_with(meta_words: u8, copies: u8) -> Pool {
    pool_on(meta_words, copies, Profile::ideal())
}

/// [`pool_with`] on `profile`.
fn pool_on(meta_words: u8, copies: u8, profile: Profile) -> Pool {
    pool_in(meta_words, copies, profile, false)
}

/// The pools' plan: table `T` of 100 keys on two memory nodes, two replicas.
fn plan(meta_words: u8, copies: u8) -> Plan {
    plan_logging(meta_words, copies, 4096)
}

/// [`plan`] with log slices of `slice_bytes`.
fn plan_logging(meta_words: u8, copies: u8, slice_bytes: u64) -> Plan {
    let shape = PoolShape {
        memory_nodes: 2,
        replicas: 2,
        log_slices: 4,
        log_slice_bytes: slice_bytes,
        region_bytes: None,
    };
    let spec = TableSpec::new(T, "t", 8, 100)
        .with_meta_words(meta_words)
        .with_copies(copies);
    Plan::new(&[spec], &shape).unwrap()
}

/// [`pool_on`], in persistent-memory mode or not.
fn pool_in(meta_words: u8, copies: u8, profile: Profile, persistent: bool) -> Pool {
    pool_of(plan(meta_words, copies), profile, persistent)
}

/// A pool laid out by `plan`, its table `T` loaded with keys 0..100.
fn pool_of(plan: Plan, profile: Profile, persistent: bool) -> Pool {
    let mut cfg = SimConfig::new(1, 2, plan.region_bytes);
    cfg.profile = profile;
    cfg.persistent = persistent;
    cfg.adversary = Adversary::off();
    let mut pool = Pool::Sim(SimPool::new(cfg).unwrap());
    // For stages run as RPCs.
    pool.set_rpc_handler(std::sync::Arc::new(dtxn_txn::MemoryNodeHandlers));
    plan.format_pool(&pool).unwrap();
    let mut l = Loader::new(plan.table(T).unwrap());
    for k in 0..100 {
        l.insert(&pool, k, &k.to_le_bytes()).unwrap();
    }
    pool
}

/// Runs `body` as the only coordinator of a fresh [`pool`] under `cfg`; returns its output.
fn with_coordinator<R: 'static, Fut: std::future::Future<Output = R> + 'static>(
    cfg: TxnConfig,
    body: impl Fn(Coordinator) -> Fut + 'static,
) -> R {
    let p = cfg.protocol;
    common::with_coordinator(pool_with(p.meta_words(), p.copies()), cfg, body)
}

/// (round trips, verbs) of each of a fixed list of transactions.
fn measure(ford: FordOptions) -> Vec<(&'static str, u64)> {
    measure_with(ford, false)
}

fn measure_with(ford: FordOptions, lv: bool) -> Vec<(&'static str, u64)> {
    measure_protocol(dtxn_txn::Protocol::Ford, ford, lv)
}

fn measure_protocol(
    protocol: dtxn_txn::Protocol,
    ford: FordOptions,
    lv: bool,
) -> Vec<(&'static str, u64)> {
    measure_config_lv(
        TxnConfig {
            protocol,
            ford,
            ..TxnConfig::default()
        },
        lv,
    )
}

fn measure_config(cfg: TxnConfig) -> Vec<(&'static str, u64)> {
    measure_config_lv(cfg, false)
}

fn measure_config_lv(cfg: TxnConfig, lv: bool) -> Vec<(&'static str, u64)> {
    with_coordinator(cfg, move |mut c| {
        async move {
            if lv {
                c.set_vcache(std::sync::Arc::new(dtxn_txn::Vcache::new(1 << 10)));
            }
            let mut out = Vec::new();
            // Cold: nothing cached yet.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, 1), Access::update(T, 2)])
                .await
                .unwrap();
            tx.update(T, 1, &7u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            out.push((
                "cold read-write",
                c.last_outcome().unwrap().fabric.round_trips,
            ));
            let mut tx = c.begin(TxKind::ReadWrite);
            let acc = [Access::update(T, 3), Access::read(T, 4)];
            tx.fetch(&acc).await.unwrap();
            tx.update(T, 3, &7u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            out.push((
                "cold read-write + read-only",
                c.last_outcome().unwrap().fabric.round_trips,
            ));
            // Warm: every address is cached now.
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, 1), Access::update(T, 2)])
                .await
                .unwrap();
            tx.update(T, 1, &8u64.to_le_bytes()).await.unwrap();
            tx.update(T, 2, &8u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            out.push(("read-write", c.last_outcome().unwrap().fabric.round_trips));
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&acc).await.unwrap();
            tx.update(T, 3, &8u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            out.push((
                "read-write + read-only",
                c.last_outcome().unwrap().fabric.round_trips,
            ));
            let mut tx = c.begin(TxKind::ReadOnly);
            tx.fetch(&[Access::read(T, 1), Access::read(T, 4)])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            out.push(("read-only", c.last_outcome().unwrap().fabric.round_trips));
            let mut tx = c.begin(TxKind::ReadOnly);
            tx.read(T, 4).await.unwrap();
            tx.commit().await.unwrap();
            out.push((
                "read-only, one item",
                c.last_outcome().unwrap().fabric.round_trips,
            ));
            out
        }
    })
}

#[test]
fn ford_round_trips_match_the_paper() {
    let rts = measure(FordOptions::default());
    let expect = [
        // Bucket READ, then lock + version check at commit, then the coalescent commit.
        ("cold read-write", 3),
        // FORD merges the cold lock with read-only validation (3 RTs); dtxn locks first, then
        // validates (4), because the merged round admits write skew.
        ("cold read-write + read-only", 4),
        // Hitchhiked CAS+READ, then the coalescent commit: FORD's headline 2.
        ("read-write", 2),
        // Plus validation of the read-only item: 3.
        ("read-write + read-only", 3),
        // READ, then validation: 2 (validated even with a single item).
        ("read-only", 2),
        ("read-only, one item", 2),
    ];
    assert_eq!(rts, expect);
}

#[test]
fn without_hitchhiking_read_write_items_cost_a_lock_round() {
    let rts = measure(FordOptions {
        hitchhiked_locking: false,
        ..FordOptions::default()
    });
    let warm: Vec<_> = rts[2..4].to_vec();
    assert_eq!(warm, [("read-write", 3), ("read-write + read-only", 4)]);
}

#[test]
fn localized_validation_saves_the_validation_round_trip_on_a_hit() {
    let rts = measure_with(FordOptions::default(), true);
    let warm: Vec<_> = rts[2..].to_vec();
    assert_eq!(
        warm,
        [
            ("read-write", 2),
            // FORD-LV's headline: the read-only item is validated locally.
            ("read-write + read-only", 2),
            // Key 1 is in the Vcache (its writer put it there), key 4 too (a miss filled it).
            ("read-only", 1),
            ("read-only, one item", 1),
        ]
    );
}

#[test]
fn localized_validation_needs_the_pool_alone() {
    use dtxn_txn::{attach, detach, AttachError};
    let mut pool = pool();
    let one = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = pool
        .run(one, None, |mut ep: Endpoint| async move {
            let mut out = Vec::new();
            let shared = attach(&mut ep, false).await.unwrap();
            out.push(attach(&mut ep, true).await.err());
            let shared2 = attach(&mut ep, false).await.unwrap();
            detach(&mut ep, shared).await.unwrap();
            detach(&mut ep, shared2).await.unwrap();
            let alone = attach(&mut ep, true).await.unwrap();
            out.push(attach(&mut ep, false).await.err());
            out.push(attach(&mut ep, true).await.err());
            detach(&mut ep, alone).await.unwrap();
            out.push(attach(&mut ep, true).await.err());
            out
        })
        .unwrap();
    let out = r.outputs[0].clone().unwrap();
    assert_eq!(
        out,
        vec![
            Some(AttachError::InUse(1)),
            Some(AttachError::HeldExclusively),
            Some(AttachError::HeldExclusively),
            None
        ]
    );
    assert!(AttachError::InUse(1)
        .to_string()
        .contains("needs the pool alone"));
}

#[test]
fn the_baselines_cost_what_fords_paper_says() {
    use dtxn_txn::Protocol;
    let farm = measure_protocol(Protocol::Farm, FordOptions::default(), false);
    assert_eq!(
        farm[2..],
        [
            ("read-write", 5),
            ("read-write + read-only", 5),
            ("read-only", 2),
            ("read-only, one item", 2),
        ]
    );
    let drtmh = measure_protocol(Protocol::Drtmh, FordOptions::default(), false);
    assert_eq!(
        drtmh[2..],
        [
            ("read-write", 4),
            ("read-write + read-only", 4),
            ("read-only", 2),
            ("read-only, one item", 2),
        ]
    );
    // FORD without coalescent commit pays FaRM's extra commit round.
    let separate = measure_with(
        FordOptions {
            coalescent_commit: false,
            ..FordOptions::default()
        },
        false,
    );
    assert_eq!(
        separate[2..4],
        [("read-write", 3), ("read-write + read-only", 4)]
    );
}

/// Round trips of a transaction inserting `keys`, batched or one at a time.
fn insert_round_trips(keys: &[u64], batched: bool) -> u64 {
    let keys = keys.to_vec();
    with_coordinator(TxnConfig::default(), move |mut c| {
        let keys = keys.clone();
        async move {
            let value = 9u64.to_le_bytes();
            let mut tx = c.begin(TxKind::ReadWrite);
            if batched {
                let rows: Vec<(u32, u64, &[u8])> =
                    keys.iter().map(|&k| (T, k, &value[..])).collect();
                tx.insert_many(&rows).await.unwrap();
            } else {
                for &k in &keys {
                    tx.insert(T, k, &value).await.unwrap();
                }
            }
            tx.commit().await.unwrap();
            c.last_outcome().unwrap().fabric.round_trips
        }
    })
}

#[test]
fn batched_inserts_cost_one_round_trip_for_the_whole_batch() {
    // Lock every chain + READ its home bucket (one round), lock the free slots + check them at
    // commit (one), the coalescent commit (one), however many rows: keys whose chains have no
    // overflow bucket.
    let plain = [1000, 1002, 1004, 1005];
    for k in plain {
        assert_eq!(insert_round_trips(&[k], true), 3);
    }
    assert_eq!(insert_round_trips(&plain, true), 3);
    // One at a time (`insert`), each insert is a round of its own.
    assert_eq!(insert_round_trips(&plain, false), 6);
    // A chain with an overflow bucket costs a round per hop (1001: one hop); a full chain a
    // new overflow bucket, claimed (FAA) and linked (WRITE) in two rounds (1003: 3 + 2). The
    // batch walks its chains together: 3 + 1 + 2.
    assert_eq!(insert_round_trips(&[1001], true), 4);
    assert_eq!(insert_round_trips(&[1003], true), 5);
    assert_eq!(insert_round_trips(&[1001, 1003], true), 6);
    assert_eq!(insert_round_trips(&[1001, 1003], false), 7);
}

#[test]
fn a_row_this_coordinator_inserted_is_updated_through_its_cached_address() {
    let rts = with_coordinator(TxnConfig::default(), |mut c| async move {
        let mut rts = Vec::new();
        for k in [1000u64, 1002] {
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.insert(T, k, &9u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
        }
        // 1000 was inserted by this coordinator; 50 was loaded (never cached here).
        for k in [1000u64, 50] {
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[Access::update(T, k)]).await.unwrap();
            tx.update(T, k, &10u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            rts.push(c.last_outcome().unwrap().fabric.round_trips);
        }
        rts
    });
    // Warm (lock + READ through the cached slot, commit) against cold (bucket READ first).
    assert_eq!(rts, vec![2, 3]);
}

/// RCC's protocols' critical-path round trips (the RCC digest's section 3.7), one-sided and
/// with every stage as RPCs (hybrid code 0): the same, since every stage is one round trip
/// to each memory node either way (but MVCC's read-only transactions: one RAISE request reads
/// and raises).
#[test]
fn rccs_protocols_cost_what_their_stage_lists_say() {
    use dtxn_txn::{HybridCode, Protocol, RccOptions};
    for code in [511, 0] {
        let rcc = RccOptions {
            hybrid: HybridCode::new(code).unwrap(),
        };
        let measure = |protocol| {
            let cfg = TxnConfig {
                protocol,
                rcc: rcc.clone(),
                ..TxnConfig::default()
            };
            measure_config(cfg)
        };
        for p in [Protocol::NoWait, Protocol::WaitDie] {
            assert_eq!(
                measure(p),
                [
                    // Bucket READ, then CAS + READ of the slot found, then the commit.
                    ("cold read-write", 3),
                    ("cold read-write + read-only", 3),
                    // Every item locked as it is read (a read share for the read-only one),
                    // then the coalescent commit; the release is off the critical path.
                    ("read-write", 2),
                    ("read-write + read-only", 2),
                    // Read shares, and nothing to validate.
                    ("read-only", 1),
                    ("read-only, one item", 1),
                ],
                "{} hybrid {code}",
                p.name()
            );
        }
        // SUNDIAL: FORD's fetch, lock and coalescent commit, with one renew round between
        // (every freeze and renewal in one batch: a CAS on the lease word, no READ first, since
        // the word came with the record's READ). Each read-write transaction here writes, so it
        // freezes (and renews the item it only reads). The read-only transactions' leases
        // cover their commit timestamps (the earlier writes renewed key 4 to 2, key 1's `wts`),
        // so they commit after their fetch alone.
        assert_eq!(
            measure(Protocol::Sundial),
            [
                ("cold read-write", 4),
                ("cold read-write + read-only", 4),
                ("read-write", 3),
                ("read-write + read-only", 3),
                ("read-only", 1),
                ("read-only, one item", 1),
            ],
            "sundial hybrid {code}"
        );
        // MVCC: FORD's fetch (read-write items locked as they are read), one raise + freeze
        // round (every rts word's CAS in one batch, the word having come with the record's
        // READ), the coalescent commit. Read-only transactions raise their records' rts to
        // their timestamp (a later timestamp each time here): fetch, raise. Its four version
        // slots change none of these: the older copies come with the fetch's READ (4x its
        // bytes) and the displaced version's WRITE goes in the commit's batch. A read-only
        // transaction older than a record's newest version reads an older slot and needs no
        // raise: 1 round trip (asserted in tests/mvcc.rs). With the fetch as RPCs (the READ
        // bit clear, code 0 here, RCC's 28), a read-only item's READ is one RAISE request that
        // raises the rts and READs after it (RCC's one-request RPC read): read-only
        // transactions whose records' addresses are cached take 1 round trip.
        let read_only = if code & 2 == 0 { 1 } else { 2 };
        assert_eq!(
            measure(Protocol::Mvcc),
            [
                ("cold read-write", 4),
                ("cold read-write + read-only", 4),
                ("read-write", 3),
                ("read-write + read-only", 3),
                ("read-only", read_only),
                ("read-only, one item", read_only),
            ],
            "mvcc hybrid {code}"
        );
        // OCC is DrTM+H's protocol: its round trips are DrTM+H's.
        assert_eq!(
            measure(Protocol::Occ)[2..],
            [
                ("read-write", 4),
                ("read-write + read-only", 4),
                ("read-only", 2),
                ("read-only, one item", 2),
            ],
            "occ hybrid {code}"
        );
    }
}

/// Scythe's round trips per transaction kind, in each mode, with empty queues (one
/// coordinator). OCC is DrTM+H's protocol: its round trips are DrTM+H's (execution, lock and
/// validate, backups, primaries). TOCC: the oracle's FAA, the tickets (one RPC round for every
/// record whose address is cached), CAS + READ of every item, reads included, and the
/// coalescent commit; no validation round. An item whose address is not cached takes no
/// ticket: its bucket READ, then its CAS + READ. Read-only transactions always run OCC.
#[test]
fn scythe_round_trips_in_occ_and_tocc() {
    use dtxn_txn::{Protocol, ScytheMode, ScytheOptions};
    let measure = |mode, takeout_lock| {
        measure_config(TxnConfig {
            protocol: Protocol::Scythe,
            scythe: ScytheOptions {
                takeout_lock,
                mode,
                ..Default::default()
            },
            ..TxnConfig::default()
        })
    };
    let drtmh = measure_protocol(Protocol::Drtmh, FordOptions::default(), false);
    assert_eq!(measure(ScytheMode::Occ, true), drtmh);
    assert_eq!(
        measure(ScytheMode::HotAware, true),
        drtmh,
        "no queue: OCC throughout"
    );
    assert_eq!(
        measure(ScytheMode::Tocc, true),
        [
            // Oracle, bucket READs, CAS + READs, commit.
            ("cold read-write", 4),
            ("cold read-write + read-only", 4),
            // Oracle, tickets, CAS + READs, commit.
            ("read-write", 4),
            ("read-write + read-only", 4),
            ("read-only", 2),
            ("read-only, one item", 2),
        ]
    );
    // The CAS-lock ablation: no ticket round.
    assert_eq!(
        measure(ScytheMode::Tocc, false)[2..4],
        [("read-write", 3), ("read-write + read-only", 3)]
    );
    // OCC's commit locks through the takeout lock (`occ_tickets`): the oracle and the tickets
    // of the written records before DrTM+H's lock round (their addresses cached by the
    // fetch, cold or not); read-only transactions lock nothing.
    let occ_tickets = measure_config(TxnConfig {
        protocol: Protocol::Scythe,
        scythe: ScytheOptions {
            mode: ScytheMode::Occ,
            occ_tickets: true,
            ..Default::default()
        },
        ..TxnConfig::default()
    });
    for (i, (&(kind, with), &(_, without))) in occ_tickets.iter().zip(drtmh.iter()).enumerate() {
        let extra = if i < 4 { 2 } else { 0 };
        assert_eq!(with, without + extra, "{kind}");
    }
}

/// A TOCC attempt that names one record twice in a batch takes one ticket for it: a second
/// would wait behind the first, which only the attempt itself releases (TPC-C's NewOrder may
/// order an item twice).
#[test]
fn scythe_tocc_takes_one_ticket_per_record() {
    use dtxn_txn::{Protocol, ScytheMode, ScytheOptions};
    let cfg = TxnConfig {
        protocol: Protocol::Scythe,
        scythe: ScytheOptions {
            mode: ScytheMode::Tocc,
            ..Default::default()
        },
        ..TxnConfig::default()
    };
    let rts = with_coordinator(cfg, |mut c| async move {
        let mut out = Vec::new();
        for _ in 0..2 {
            let mut tx = c.begin(TxKind::ReadWrite);
            tx.fetch(&[
                Access::update(T, 5),
                Access::read(T, 6),
                Access::update(T, 5),
            ])
            .await
            .unwrap();
            tx.update(T, 5, &9u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            out.push(c.last_outcome().unwrap().fabric.round_trips);
        }
        out
    });
    // Cold (bucket READs, no tickets), then warm (tickets): no wait either time.
    assert_eq!(rts, [4, 4]);
}

/// CALVIN's critical-path round trips, alone (the pool's other coordinators never joined, so
/// nobody to wait for): one-sided, the dispatch (batch WRITE, epoch word CAS) and the first
/// poll of the others' epoch words go in one doorbell batch, then the reads, then the install
/// (the done word is WRITTEN detached). The first transaction joins first (CAS + READs of
/// every epoch word, 1 RT); a cold item's bucket READ brings its record (a slot of it). As RPCs, the dispatch is waited for
/// before the poll (an RPC and a READ are not ordered): one round trip more per transaction,
/// and one more at the join.
#[test]
fn calvin_costs_dispatch_reads_and_install() {
    use dtxn_txn::{HybridCode, Protocol, RccOptions};
    // 383: only the dispatch as RPCs (CALVIN's bit 128), which costs the same round trip
    // more; 255: only the done word (bit 256, forwarding), posted detached: nothing more.
    for (code, extra) in [(511, 0), (0, 1), (383, 1), (255, 0)] {
        let cfg = TxnConfig {
            protocol: Protocol::Calvin,
            rcc: RccOptions {
                hybrid: HybridCode::new(code).unwrap(),
            },
            ..TxnConfig::default()
        };
        assert_eq!(
            measure_config(cfg),
            [
                // Join (the epoch words, then the closed-epoch word), dispatch + poll, bucket
                // READ (the record is a slot of it), install.
                ("cold read-write", 5 + 2 * extra),
                // Dispatch + poll, bucket READs, install.
                ("cold read-write + read-only", 3 + extra),
                // Dispatch + poll, READs, install.
                ("read-write", 3 + extra),
                ("read-write + read-only", 3 + extra),
                // Dispatch + poll, READs: nothing to install.
                ("read-only", 2 + extra),
                ("read-only, one item", 2 + extra),
            ],
            "calvin hybrid {code}"
        );
    }
}

/// The round-trip counter tells the truth: on `ideal` (a round trip is 1 us, nothing else
/// costs) every transaction's latency is its counted round trips, for each protocol that
/// keeps an undo log, with and without `flush`. (FORD's undo log posted in the background
/// after the fetch once made a read-write transaction wait 3 us at a count of 2: the log now
/// rides the commit's batch, and a wait on a background batch counts.)
#[test]
fn latency_on_ideal_is_the_counted_round_trips() {
    use dtxn_txn::Protocol;
    for p in [
        Protocol::Ford,
        Protocol::Farm,
        Protocol::Drtmh,
        Protocol::NoWait,
        Protocol::WaitDie,
        Protocol::Occ,
        Protocol::Sundial,
        Protocol::Mvcc,
    ] {
        for flush in [false, true] {
            let cfg = TxnConfig {
                protocol: p,
                flush,
                ..TxnConfig::default()
            };
            let rows = with_coordinator(cfg, two_writes_one_read);
            for (rts, ns) in rows {
                assert_eq!(
                    ns,
                    rts * 1000,
                    "{} (flush {flush}): {ns} ns for {rts} counted round trips",
                    p.name()
                );
            }
        }
    }
}

/// Three read-write transactions, each updating two keys and reading a third: each one's
/// counted round trips and latency.
async fn two_writes_one_read(mut c: Coordinator) -> Vec<(u64, u64)> {
    let mut rows = Vec::new();
    for round in 0..3u64 {
        let mut tx = c.begin(TxKind::ReadWrite);
        let acc = [
            Access::update(T, 1),
            Access::update(T, 2),
            Access::read(T, 3),
        ];
        tx.fetch(&acc).await.unwrap();
        tx.update(T, 1, &round.to_le_bytes()).await.unwrap();
        tx.update(T, 2, &round.to_le_bytes()).await.unwrap();
        tx.commit().await.unwrap();
        let o = c.last_outcome().unwrap();
        rows.push((o.fabric.round_trips, o.end_ns - o.start_ns));
    }
    rows
}

/// The profile's CPU price of a transaction's logic adds exactly to its latency on `ideal`:
/// once per transaction and once per item (two locked, one read), whatever the protocol.
#[test]
fn logic_cpu_adds_exactly_its_price_to_a_transaction() {
    use dtxn_txn::Protocol;
    let profile = Profile {
        cpu_per_txn_ns: 1000,
        cpu_per_item_ns: 100,
        ..Profile::ideal()
    };
    for p in [
        Protocol::Ford,
        Protocol::Farm,
        Protocol::Drtmh,
        Protocol::Occ,
    ] {
        let cfg = TxnConfig {
            protocol: p,
            ..TxnConfig::default()
        };
        let pool = pool_on(p.meta_words(), p.copies(), profile.clone());
        let rows = common::with_coordinator(pool, cfg, two_writes_one_read);
        for (rts, ns) in rows {
            assert_eq!(
                ns,
                rts * 1000 + 1000 + 3 * 100,
                "{}: {ns} ns for {rts} round trips",
                p.name()
            );
        }
    }
}

/// FORD's selective flush against its full flush (`ford.full_flush`, the baseline of FORD's
/// Figs. 19-20), in persistent-memory mode: a read-write transaction writing two records of a
/// table on two replicas. Selective: the log's FLUSH on each replica, then each backup's once
/// after its last commit WRITE, and the primary never. Full: a FLUSH after every WRITE, the
/// log's and each record's on each replica. The round trips stay the same; on a profile
/// whose FLUSH holds its QP (`pm_flush_ns`) the full flush's transaction takes longer by the
/// FLUSHes it queues on one QP.
#[test]
fn full_flush_flushes_after_every_write_selective_once_per_backup() {
    use dtxn_fabric::OpKind;
    let run_as = |protocol: dtxn_txn::Protocol, full: bool, profile: Profile| {
        let cfg = TxnConfig {
            protocol,
            flush: true,
            ford: FordOptions {
                full_flush: full,
                ..FordOptions::default()
            },
            ..TxnConfig::default()
        };
        cfg.validate().unwrap();
        let p = cfg.protocol;
        let pool = pool_in(p.meta_words(), p.copies(), profile, true);
        common::with_coordinator(pool, cfg, |mut c| async move {
            let mut out = Vec::new();
            for round in 0..2u64 {
                let mut tx = c.begin(TxKind::ReadWrite);
                tx.fetch(&[Access::update(T, 1), Access::update(T, 2)])
                    .await
                    .unwrap();
                tx.update(T, 1, &round.to_le_bytes()).await.unwrap();
                tx.update(T, 2, &round.to_le_bytes()).await.unwrap();
                tx.commit().await.unwrap();
                let o = c.last_outcome().unwrap();
                let f = &o.fabric;
                out.push((f.verb(OpKind::Flush), f.round_trips, o.end_ns - o.start_ns));
            }
            out
        })
    };
    let run = |full, profile| run_as(dtxn_txn::Protocol::Ford, full, profile);
    let slow = Profile {
        pm_flush_ns: 10_000,
        ..Profile::ideal()
    };
    // FaRM and DrTM+H install in two phases (the backups, then the primaries): the same
    // FLUSHes, in their own round trips (5 and 4).
    for (p, rts) in [
        (dtxn_txn::Protocol::Farm, 5),
        (dtxn_txn::Protocol::Drtmh, 4),
    ] {
        assert_eq!(
            run_as(p, false, Profile::ideal()),
            [(3, rts, rts * 1_000); 2]
        );
        assert_eq!(
            run_as(p, true, Profile::ideal()),
            [(6, rts, rts * 1_000); 2]
        );
    }
    // (FLUSH verbs, round trips, latency in ns) of two such transactions in a row.
    assert_eq!(run(false, Profile::ideal()), [(3, 3, 3_000); 2]);
    assert_eq!(run(true, Profile::ideal()), [(6, 3, 3_000); 2]);
    // (FLUSH verbs, latency.) The log's FLUSH (each node's QP) and the backup's: 10 us each,
    // one after the other.
    let no_rts = |v: Vec<(u64, u64, u64)>| v.iter().map(|r| (r.0, r.2)).collect::<Vec<_>>();
    assert_eq!(no_rts(run(false, slow.clone())), [(3, 23_000); 2]);
    // The commit's two FLUSHes queue on each replica's QP: 10 us more.
    assert_eq!(no_rts(run(true, slow)), [(6, 33_000); 2]);
}

/// The release leaves every backup's lock word as it is: its own commit's install keeps the
/// committer's id, invisible, and another commit's install planted on the backup of a key it
/// only reads keeps that committer's. A release clearing a backup's word travels on another
/// queue pair than the primary's unlock, so it could land on the next committer's install
/// and erase the word recovery on a promoted backup tells a dead coordinator's install by
/// (waitdie-hybrid under harsh failover: G1a). The next install overwrites it.
#[test]
fn the_release_leaves_every_backups_word_to_the_next_install() {
    let plan = plan(0, 1);
    let t = plan.table(T).unwrap().clone();
    let backup = t.backups()[0];
    let mut pool = pool();
    // A key's slot on the backup.
    let slot_of = |pool: &Pool, key: u64| {
        (0..t.bucket_count + t.overflow_buckets)
            .flat_map(|b| (0..t.slots_per_bucket).map(move |s| (b, s)))
            .map(|(b, s)| t.slot(t.bucket(b), s))
            .find(|&at| {
                let mut h = vec![0; t.copy_bytes()];
                pool.with_local(backup, |m| m.read(at, &mut h));
                let h = t.codec().header(&h);
                h.valid && h.key == key
            })
            .expect("the key on the backup")
    };
    let (read, written) = (slot_of(&pool, 4), slot_of(&pool, 3));
    let other = (1u64 << 63) | 77;
    pool.with_local(backup, |m| m.write_u64(read, other));
    let cfg = TxnConfig::default();
    common::with_coordinator_in(&mut pool, cfg, move |mut c| async move {
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.fetch(&[Access::update(T, 3), Access::read(T, 4)])
            .await
            .unwrap();
        tx.update(T, 3, &9u64.to_le_bytes()).await.unwrap();
        tx.commit().await.unwrap();
        // The release, detached, has landed once a later round trip to the backup has.
        c.endpoint().read(backup, 0, 8);
        c.endpoint().post().await.unwrap();
    });
    let owner = 1u64; // coordinator 0's
    assert_eq!(pool.with_local(backup, |m| m.read_u64(read)), other);
    assert_eq!(
        pool.with_local(backup, |m| m.read_u64(written)),
        owner | (1u64 << 63)
    );
}

/// An undo log that fills its coordinator's log slice exactly is written, and a transaction
/// whose log would not fit aborts with `LogFull` before writing any of it (past the slice
/// is the next coordinator's log).
#[test]
fn an_undo_log_fills_its_slice_exactly_and_never_more() {
    let copy = plan(0, 1).table(T).unwrap().copy_bytes();
    let mut one = Vec::new();
    dtxn_store::log::encode_item(T, 0, false, &vec![0; copy], &mut one);
    let head = dtxn_store::log::HEAD_BYTES;
    // Slices are whole lines: the fewest items whose log is whole lines.
    let k = (1..=16)
        .find(|k| (head + k * one.len()).is_multiple_of(64))
        .expect("a whole number of lines");
    let slice = (head + k * one.len()) as u64;
    let commit = |keys: u64| {
        let pool = pool_of(plan_logging(0, 1, slice), Profile::ideal(), false);
        common::with_coordinator(pool, TxnConfig::default(), move |mut c| async move {
            let mut tx = c.begin(TxKind::ReadWrite);
            let acc: Vec<_> = (0..keys).map(|k| Access::update(T, k)).collect();
            tx.fetch(&acc).await?;
            for k in 0..keys {
                tx.update(T, k, &k.to_le_bytes()).await?;
            }
            tx.commit().await
        })
        .map_err(|a| a.reason)
    };
    assert_eq!(commit(k as u64), Ok(()));
    assert_eq!(commit(k as u64 + 1), Err(dtxn_txn::AbortReason::LogFull));
}

/// A fetch that adds no item to log (only reads) writes no log: the same transaction costs
/// the same WRITEs whether it fetches its read-only item with its read-write one or after it.
#[test]
fn a_fetch_of_read_only_items_writes_no_log() {
    use dtxn_fabric::OpKind;
    let writes = |split: bool| {
        with_coordinator(TxnConfig::default(), move |mut c| async move {
            let mut tx = c.begin(TxKind::ReadWrite);
            if split {
                tx.fetch(&[Access::update(T, 3)]).await.unwrap();
                tx.fetch(&[Access::read(T, 4)]).await.unwrap();
            } else {
                tx.fetch(&[Access::update(T, 3), Access::read(T, 4)])
                    .await
                    .unwrap();
            }
            tx.update(T, 3, &9u64.to_le_bytes()).await.unwrap();
            tx.commit().await.unwrap();
            c.last_outcome().unwrap().fabric.verb(OpKind::Write)
        })
    };
    assert_eq!(writes(true), writes(false));
}

/// An undo log appended to (a second fetch of read-write items) holds every item on every
/// replica, whole (its checksum over the appended body); it flushes nothing without `flush`,
/// and with it each node once per log write (the selective flush: not after each WRITE).
#[test]
fn an_appended_undo_log_holds_every_item_on_every_replica() {
    for (flush, flushes) in [(false, 0), (true, 2 * 2 + 1)] {
        appended_undo_log(flush, flushes);
    }
}

fn appended_undo_log(flush: bool, want_flushes: u64) {
    use dtxn_fabric::OpKind;
    let plan = plan(0, 1);
    let mut pool = pool_in(0, 1, Profile::ideal(), false);
    let cfg = TxnConfig {
        flush,
        ..TxnConfig::default()
    };
    let flushes = common::with_coordinator_in(&mut pool, cfg, |mut c| async move {
        let mut tx = c.begin(TxKind::ReadWrite);
        tx.fetch(&[Access::update(T, 1)]).await.unwrap();
        tx.fetch(&[Access::update(T, 2), Access::update(T, 5)])
            .await
            .unwrap();
        for k in [1, 2, 5] {
            tx.update(T, k, &7u64.to_le_bytes()).await.unwrap();
        }
        tx.commit().await.unwrap();
        c.last_outcome().unwrap().fabric.verb(OpKind::Flush)
    });
    assert_eq!(flushes, want_flushes);
    // The only coordinator's slice is the first.
    let t = plan.table(T).unwrap();
    for &n in &t.replicas {
        let mut b = vec![0u8; plan.shape.log_slice_bytes as usize];
        pool.with_local(n, |m| m.read(plan.log_off, &mut b));
        let e = dtxn_store::log::LogEntry::decode(&b)
            .expect("whole")
            .expect("an entry");
        assert_eq!(e.items.len(), 3, "node {n}: {e:?}");
    }
}

/// DrTM+H's re-validation in the backups' round reads the header of each read-only item that
/// exists, and of nothing else: with one read-write and one read-only item, one READ more
/// than without it; with two read-write items, none. (Re-validating the read-write items too,
/// locked by us, passes and costs a READ each: `cargo mutants` found no test counting them.)
#[test]
fn drtmhs_revalidation_reads_the_read_only_items_alone() {
    use dtxn_fabric::OpKind;
    let reads = |skip_revalidation: bool| {
        let cfg = TxnConfig {
            protocol: dtxn_txn::Protocol::Drtmh,
            ford: FordOptions {
                skip_revalidation,
                ..FordOptions::default()
            },
            ..TxnConfig::default()
        };
        with_coordinator(cfg, |mut c| async move {
            let mut out = Vec::new();
            for acc in [
                [Access::update(T, 3), Access::read(T, 4)],
                [Access::update(T, 3), Access::update(T, 5)],
                [Access::update(T, 3), Access::read(T, 1000)],
            ] {
                // Twice: the second warm (every address cached).
                for round in 0..2u64 {
                    let mut tx = c.begin(TxKind::ReadWrite);
                    tx.fetch(&acc).await.unwrap();
                    tx.update(T, 3, &round.to_le_bytes()).await.unwrap();
                    tx.commit().await.unwrap();
                }
                out.push(c.last_outcome().unwrap().fabric.verb(OpKind::Read));
            }
            out
        })
    };
    let (with, without) = (reads(false), reads(true));
    let extra: Vec<u64> = with.iter().zip(&without).map(|(w, o)| w - o).collect();
    // Read-only item 4: one header; two read-write items: none; an absent key: none.
    assert_eq!(extra, [1, 0, 0], "with {with:?}, without {without:?}");
}
