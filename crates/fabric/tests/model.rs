//! Model-based test: one coordinator that waits for each batch sees exactly what a plain
//! memory model predicts, on every backend and under the adversary (which may reorder only what
//! the contract leaves unordered, and nothing here is left unordered).

use dtxn_fabric::shm::{ShmConfig, ShmPool};
use dtxn_fabric::sim::{SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Pool, Topology};
use proptest::prelude::*;

const SLOTS: u64 = 16;
const SLOT: u64 = 128;

#[derive(Debug, Clone)]
enum Step {
    Read {
        slot: u64,
        off: u64,
        len: u64,
    },
    Write {
        slot: u64,
        off: u64,
        byte: u8,
        len: u64,
    },
    Cas {
        slot: u64,
        expect_current: bool,
        new: u64,
    },
    Faa {
        slot: u64,
        add: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..SLOTS, 0..SLOT, 1..SLOT).prop_map(|(slot, off, len)| Step::Read {
            slot,
            off,
            len: len.min(SLOT - off).max(1),
        }),
        (0..SLOTS, 0..SLOT, any::<u8>(), 1..SLOT).prop_map(|(slot, off, byte, len)| {
            Step::Write {
                slot,
                off,
                byte,
                len: len.min(SLOT - off).max(1),
            }
        }),
        (0..SLOTS, any::<bool>(), any::<u64>()).prop_map(|(slot, expect_current, new)| {
            Step::Cas {
                slot,
                expect_current,
                new,
            }
        }),
        (0..SLOTS, any::<u64>()).prop_map(|(slot, add)| Step::Faa { slot, add }),
    ]
}

/// Batches of steps on distinct slots (ops of one batch on one location are not ordered).
fn batches() -> impl Strategy<Value = Vec<Vec<Step>>> {
    prop::collection::vec(prop::collection::vec(step(), 1..5), 1..30).prop_map(|bs| {
        bs.into_iter()
            .map(|b| {
                let mut seen = Vec::new();
                b.into_iter()
                    .filter(|s| {
                        let slot = match s {
                            Step::Read { slot, .. }
                            | Step::Write { slot, .. }
                            | Step::Cas { slot, .. }
                            | Step::Faa { slot, .. } => *slot,
                        };
                        let fresh = !seen.contains(&slot);
                        seen.push(slot);
                        fresh
                    })
                    .collect()
            })
            .collect()
    })
}

fn word(m: &[u8], a: u64) -> u64 {
    u64::from_le_bytes(m[a as usize..a as usize + 8].try_into().unwrap())
}

/// Runs the batches on `pool` and checks every result against the model.
fn check(pool: &mut Pool, batches: Vec<Vec<Step>>) -> Result<(), TestCaseError> {
    let topo = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = pool
        .run(topo, None, move |mut ep: Endpoint| {
            let batches = batches.clone();
            async move {
                let mut model = vec![0u8; (SLOTS * SLOT) as usize];
                for b in batches {
                    let mut ids = Vec::new();
                    for s in &b {
                        ids.push(match *s {
                            Step::Read { slot, off, len } => {
                                ep.read(0, slot * SLOT + off, len as usize)
                            }
                            Step::Write {
                                slot,
                                off,
                                byte,
                                len,
                            } => ep.write(0, slot * SLOT + off, &vec![byte; len as usize]),
                            Step::Cas {
                                slot,
                                expect_current,
                                new,
                            } => {
                                let cur = word(&model, slot * SLOT);
                                let expect = if expect_current { cur } else { cur ^ 1 };
                                ep.cas(0, slot * SLOT, expect, new)
                            }
                            Step::Faa { slot, add } => ep.faa(0, slot * SLOT, add),
                        });
                    }
                    ep.post().await.unwrap();
                    for (s, id) in b.iter().zip(ids) {
                        match *s {
                            Step::Read { slot, off, len } => {
                                let a = (slot * SLOT + off) as usize;
                                if ep.bytes(id) != &model[a..a + len as usize] {
                                    return Err(format!("read {s:?} differs from the model"));
                                }
                            }
                            Step::Write {
                                slot,
                                off,
                                byte,
                                len,
                            } => {
                                let a = (slot * SLOT + off) as usize;
                                model[a..a + len as usize].fill(byte);
                            }
                            Step::Cas {
                                slot,
                                expect_current,
                                new,
                            } => {
                                let a = slot * SLOT;
                                let cur = word(&model, a);
                                if ep.old(id) != cur || ep.cas_ok(id) != expect_current {
                                    return Err(format!("{s:?}: old {}", ep.old(id)));
                                }
                                if expect_current {
                                    model[a as usize..a as usize + 8]
                                        .copy_from_slice(&new.to_le_bytes());
                                }
                            }
                            Step::Faa { slot, add } => {
                                let a = slot * SLOT;
                                let cur = word(&model, a);
                                if ep.old(id) != cur {
                                    return Err(format!("{s:?}: old {}", ep.old(id)));
                                }
                                model[a as usize..a as usize + 8]
                                    .copy_from_slice(&cur.wrapping_add(add).to_le_bytes());
                            }
                        }
                    }
                }
                Ok(model)
            }
        })
        .unwrap();
    let model = r.outputs[0].clone().unwrap();
    let model = model.map_err(TestCaseError::fail)?;
    let mut mem = vec![0u8; model.len()];
    pool.with_local(0, |m| m.read(0, &mut mem));
    prop_assert_eq!(mem, model);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn sim_matches_the_model(seed in any::<u64>(), b in batches()) {
        let mut pool = Pool::Sim(SimPool::new(SimConfig::new(seed, 1, SLOTS * SLOT)).unwrap());
        check(&mut pool, b)?;
    }

    #[test]
    fn shm_matches_the_model(b in batches()) {
        let cfg = ShmConfig { node_sizes: vec![SLOTS * SLOT], dir: None, delay_ns: 0 };
        let mut pool = Pool::Shm(ShmPool::create(cfg).unwrap());
        check(&mut pool, b)?;
    }
}
