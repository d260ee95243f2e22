//! The control chain (`dtxn_txn::control`) on the adversarial simulator: eight coordinators on
//! two compute nodes read a word replicated on three memory nodes and write it forward, while
//! members fail for good (the head, the tail, or two of three) and a compute node crashes
//! with writes half-way down the chain. Every write names its writer and the word it was
//! written over, so the committed history is the path from the final committed word back to
//! 0; then: every `Done` write is on it and every `Lost` one is not, every read returned a
//! word on it, and no read returned an older word than one already read or written (`Done`)
//! before it started (linearizable).

use dtxn_fabric::sim::{Adversary, ComputeCrash, MemoryCrash, SimConfig, SimPool};
use dtxn_fabric::{Endpoint, Topology};
use dtxn_txn::control::{self, Chain, Counts, Write};
use rand::Rng;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

const OFF: u64 = 64;
const NODES: u16 = 3;
const ROUNDS: u32 = 30;

fn tag(w: u64) -> u64 {
    w >> 32
}

/// A write's word: its tag, its writer, its count.
fn word(tag: u64, coord: u32, seq: u32) -> u64 {
    (tag << 32) | (u64::from(coord) << 16) | u64::from(seq & 0xffff)
}

#[derive(Debug, Clone)]
enum Event {
    Read { start: u64, end: u64, word: u64 },
    Attempt { expect: u64, new: u64 },
    Outcome { new: u64, end: u64, write: Write },
}

#[derive(Default)]
struct Tally {
    counts: Counts,
    done: u64,
    lost: u64,
    unknown: u64,
    crashed_writes_committed: u64,
}

/// One seed's run: which members fail when, and whether a compute node crashes.
fn run(seed: u64, tally: &mut Tally) {
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut cfg = SimConfig::new(seed, NODES as usize, 4096);
    if seed % 2 == 1 {
        cfg.adversary = Adversary::harsh(20_000);
    }
    // Which members fail for good: the head, the tail, a middle one, or the head and then the
    // middle one (node 2 alone left).
    let fail: &[u16] = match seed % 4 {
        0 => &[0],
        1 => &[2],
        2 => &[0, 1],
        _ => &[1],
    };
    for &node in fail {
        cfg.faults.memory_crashes.push(MemoryCrash {
            at_ns: rng.random_range(20_000..400_000),
            node,
            down_ns: u64::MAX / 4,
        });
    }
    if !seed.is_multiple_of(3) {
        cfg.faults.compute_crashes.push(ComputeCrash {
            at_ns: rng.random_range(20_000..400_000),
            compute_node: 1,
        });
    }
    let mut sim = SimPool::new(cfg).unwrap();
    let log: Rc<RefCell<Vec<(u32, Event)>>> = Rc::default();
    let topo = Topology {
        compute_nodes: 2,
        threads: 2,
        coroutines: 2,
    };
    let r = sim
        .run(topo, None, |mut ep: Endpoint| {
            let log = log.clone();
            async move {
                let me = ep.id().index;
                let mut chain = Chain::new((0..NODES).collect()).unwrap();
                let mut counts = Counts::default();
                let mut seq = 0;
                for _ in 0..ROUNDS {
                    let start = ep.now_ns();
                    let c = control::read(&mut ep, &mut chain, OFF, tag, &mut counts)
                        .await
                        .unwrap();
                    let end = ep.now_ns();
                    log.borrow_mut().push((
                        me,
                        Event::Read {
                            start,
                            end,
                            word: c,
                        },
                    ));
                    seq += 1;
                    let new = word(tag(c) + 1, me, seq);
                    log.borrow_mut()
                        .push((me, Event::Attempt { expect: c, new }));
                    let write = control::cas(&mut ep, &mut chain, OFF, c, new, tag, &mut counts)
                        .await
                        .unwrap();
                    let end = ep.now_ns();
                    log.borrow_mut()
                        .push((me, Event::Outcome { new, end, write }));
                    let pause = ep.rng().random_range(0..3_000);
                    ep.sleep(pause).await;
                }
                counts
            }
        })
        .unwrap();
    for c in r.outputs.iter().flatten() {
        tally.counts.helped += c.helped;
        tally.counts.dropped += c.dropped;
        tally.counts.reread += c.reread;
    }
    // The committed word: the tail's, the last member still up.
    let tail = (0..NODES).rev().find(|n| !fail.contains(n)).unwrap();
    let last = sim.with_local(tail, |m| m.read_u64(OFF));
    let log = log.borrow();
    let mut parent = HashMap::new();
    for (_, e) in log.iter() {
        if let Event::Attempt { expect, new } = e {
            assert!(
                parent.insert(*new, *expect).is_none(),
                "seed {seed}: a word made twice"
            );
        }
    }
    // The committed history: from the last committed word back to 0.
    let mut committed = HashSet::from([0u64]);
    let mut w = last;
    while w != 0 {
        assert!(committed.insert(w), "seed {seed}: a cycle");
        let p = *parent
            .get(&w)
            .unwrap_or_else(|| panic!("seed {seed}: {w:#x} was never written"));
        assert_eq!(tag(p) + 1, tag(w));
        w = p;
    }
    let outcomes: HashMap<u64, Write> = log
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Outcome { new, write, .. } => Some((*new, *write)),
            _ => None,
        })
        .collect();
    for (&new, &write) in &outcomes {
        match write {
            Write::Done => {
                tally.done += 1;
                assert!(
                    committed.contains(&new),
                    "seed {seed}: a Done write {new:#x} was lost"
                );
            }
            Write::Lost => {
                tally.lost += 1;
                assert!(
                    !committed.contains(&new),
                    "seed {seed}: a Lost write {new:#x} committed"
                );
            }
            Write::Unknown => tally.unknown += 1,
        }
    }
    tally.crashed_writes_committed += parent
        .keys()
        .filter(|w| committed.contains(w) && !outcomes.contains_key(w))
        .count() as u64;
    // Linearizable: no read returns an older word than one a read or a Done write that ended
    // before it started had (the one log of real-time intervals on the sim's clock).
    let mut ended: Vec<(u64, u64)> = Vec::new(); // (end, tag)
    for (_, e) in log.iter() {
        match e {
            Event::Read { end, word, .. } => ended.push((*end, tag(*word))),
            Event::Outcome {
                new,
                end,
                write: Write::Done,
            } => ended.push((*end, tag(*new))),
            _ => {}
        }
    }
    ended.sort_unstable();
    for (me, e) in log.iter() {
        if let Event::Read { start, word, .. } = e {
            assert!(
                committed.contains(word),
                "seed {seed}: coordinator {me} read {word:#x}, never committed"
            );
            let before = ended.partition_point(|&(end, _)| end < *start);
            let newest = ended[..before].iter().map(|&(_, t)| t).max().unwrap_or(0);
            assert!(
                tag(*word) >= newest,
                "seed {seed}: coordinator {me} read tag {} at {start} ns, after tag {newest} ended",
                tag(*word)
            );
        }
    }
}

#[test]
fn the_control_chain_keeps_one_history_through_member_and_writer_failures() {
    let mut tally = Tally::default();
    for seed in 0..40 {
        run(seed, &mut tally);
    }
    // The runs reached what the chain is for (else the assertions above prove little).
    assert!(tally.done > 1_000, "{}", tally.done);
    assert!(tally.lost > 100, "{}", tally.lost);
    assert!(tally.counts.dropped > 40, "{:?}", tally.counts);
    assert!(tally.counts.helped > 0, "{:?}", tally.counts);
    assert!(tally.crashed_writes_committed > 0);
    eprintln!(
        "done {} lost {} unknown {} crashed writes committed {} {:?}",
        tally.done, tally.lost, tally.unknown, tally.crashed_writes_committed, tally.counts
    );
}

/// A coordinator's script: what it did, in words.
type Script = fn(Endpoint) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<String>>>>;

/// The scripted runs below: one coordinator per script (scripts[i] on coordinator i, on
/// compute node 0), on an ideal fabric (an op executes 500 ns after its post, completes 500 ns
/// later) with no adversary; the members hold `words` (node, word) first, and memory node 0
/// fails for good at `node0_dies_at` ns. Returns each script's output and every member's word
/// at the end (`None`: down).
fn scripted(
    words: &[(u16, u64)],
    node0_dies_at: u64,
    scripts: Vec<Script>,
) -> (Vec<Vec<String>>, Vec<Option<u64>>) {
    let mut cfg = ideal(NODES);
    cfg.faults.memory_crashes.push(MemoryCrash {
        at_ns: node0_dies_at,
        node: 0,
        down_ns: u64::MAX / 4,
    });
    let mut sim = SimPool::new(cfg).unwrap();
    for &(n, w) in words {
        sim.with_local(n, |m| m.write(OFF, &w.to_le_bytes()));
    }
    let topo = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: scripts.len() as u32,
    };
    let scripts = Rc::new(scripts);
    let r = sim
        .run(topo, None, |ep: Endpoint| {
            let scripts = scripts.clone();
            async move { scripts[ep.id().index as usize](ep).await }
        })
        .unwrap();
    let outs = r.outputs.into_iter().map(Option::unwrap).collect();
    let now: Vec<Option<u64>> = (0..NODES)
        .map(|n| (n != 0).then(|| sim.with_local(n, |m| m.read_u64(OFF))))
        .collect();
    (outs, now)
}

/// `nodes` memory nodes on an ideal fabric, no adversary: the scripts' timings hold exactly.
fn ideal(nodes: u16) -> SimConfig {
    let mut cfg = SimConfig::new(1, nodes as usize, 4096);
    cfg.profile = dtxn_fabric::Profile::ideal();
    cfg.adversary = Adversary::off();
    cfg
}

/// Writer 1's word (tag 1), writer 2's (tag 1), writer 3's (tag 2, over writer 1's).
const W1: u64 = (1 << 32) | (1 << 16) | 1;
const W2: u64 = (1 << 32) | (2 << 16) | 1;
const W3: u64 = (2 << 32) | (3 << 16) | 1;

async fn write(ep: &mut Endpoint, chain: &mut Chain, expect: u64, new: u64) -> String {
    let mut counts = Counts::default();
    match control::cas(ep, chain, OFF, expect, new, tag, &mut counts).await {
        Ok(w) => format!("{w:?}"),
        Err(e) => format!("{e}"),
    }
}

async fn read_at(ep: &mut Endpoint, chain: &mut Chain) -> String {
    let mut counts = Counts::default();
    match control::read(ep, chain, OFF, tag, &mut counts).await {
        Ok(w) => format!("{w:#x}"),
        Err(e) => format!("{e}"),
    }
}

/// Writer 1, whose head CAS of W1 over 0 landed on node 0 (the scripts put it there), goes on
/// with its write at `AT` ns.
fn writer_1_at<const AT: u64>(
    mut ep: Endpoint,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<String>>>> {
    Box::pin(async move {
        ep.sleep(AT).await;
        vec![write(&mut ep, &mut all(), 0, W1).await]
    })
}

fn all() -> Chain {
    Chain::new((0..NODES).collect()).unwrap()
}

/// A writer that crashed after its head CAS left its word on the head alone: a read carries
/// it down the chain, and answers with it (committed once it is at the tail).
#[test]
fn a_read_carries_a_crashed_writers_word_to_the_tail() {
    let (outs, now) = scripted(
        &[(0, W1)],
        u64::MAX / 2,
        vec![|mut ep| Box::pin(async move { vec![read_at(&mut ep, &mut all()).await] })],
    );
    assert_eq!(outs, [[format!("{W1:#x}")]]);
    assert_eq!(now, [None, Some(W1), Some(W1)]);
}

/// A write whose head died with its word: at the next head, another write from the same word
/// won (it is `Lost`); or a read had carried it on before the head died (it is `Done`: found
/// at the next head, it is ours); or a read carried it on and a later write followed (it may
/// or may not have committed first: `Unknown`, never `Lost`).
#[test]
fn a_write_whose_head_died_learns_its_fate_at_the_next_head() {
    // Node 0 holds W1 (writer 1's head CAS landed) and dies at 1 us; at 2 us writer 2, which
    // found node 0 down, writes W2 from 0 at node 1; at 5 us writer 1 goes on.
    let (outs, now) = scripted(
        &[(0, W1)],
        1_000,
        vec![writer_1_at::<5_000>, |mut ep| {
            Box::pin(async move {
                ep.sleep(2_000).await;
                let mut chain = all();
                let r = read_at(&mut ep, &mut chain).await;
                vec![r, write(&mut ep, &mut chain, 0, W2).await]
            })
        }],
    );
    assert_eq!(
        outs,
        [vec!["Lost".to_string()], vec!["0x0".into(), "Done".into()]]
    );
    assert_eq!(now, [None, Some(W2), Some(W2)]);
    // A read at 0.5 us carried W1 to the tail before node 0 died: writer 1 finds it, Done.
    let (outs, now) = scripted(
        &[(0, W1)],
        1_000,
        vec![writer_1_at::<5_000>, |mut ep| {
            Box::pin(async move { vec![read_at(&mut ep, &mut all()).await] })
        }],
    );
    assert_eq!(outs[0], ["Done"]);
    assert_eq!(now, [None, Some(W1), Some(W1)]);
    // The same, then writer 3 writes W3 over W1 (at 5 us), and writer 1 goes on at 10 us: it
    // cannot tell W3's history from one where W1 died with the head (see the next test):
    // Unknown.
    let (outs, now) = scripted(
        &[(0, W1)],
        1_000,
        vec![writer_1_at::<10_000>, |mut ep| {
            Box::pin(async move {
                let mut chain = all();
                let r = read_at(&mut ep, &mut chain).await;
                ep.sleep(2_000).await;
                vec![r, write(&mut ep, &mut chain, W1, W3).await]
            })
        }],
    );
    assert_eq!(outs[0], ["Unknown"]);
    assert_eq!(outs[1], [format!("{W1:#x}"), "Done".into()]);
    assert_eq!(now, [None, Some(W3), Some(W3)]);
}

/// A write that took the head, then found a later word further down: `Done` while that head is
/// up (every later write went through it, from ours), `Unknown` once it is down (a later head
/// may have taken writes that never saw ours). Here nodes 1 and 2 hold W3 from the start, as
/// if node 0 had died and later heads had moved on; node 0 answers writer 1's head CAS (it
/// executes at 0.5 us) and dies at `dies` ns; the probe of the head executes at 2.5 us.
#[test]
fn a_write_past_the_head_is_done_only_while_the_head_that_took_it_is_up() {
    for (dies, expect) in [(u64::MAX / 2, "Done"), (1_200, "Unknown")] {
        let (outs, _) = scripted(
            &[(1, W3), (2, W3)],
            dies,
            vec![|mut ep| Box::pin(async move { vec![write(&mut ep, &mut all(), 0, W1).await] })],
        );
        assert_eq!(outs, [[expect]], "node 0 dying at {dies} ns");
    }
}

/// A write whose batches carry its coordinator's lease renewals (a copy on every member):
/// the head dies after taking ours, so the renewal riding with the CAS to node 1 fails on
/// node 0. That batch did all the write asked (the endpoint masks a failure that hit
/// renewals alone), and the write goes on to the tail: `Done`, every live member holding
/// ours. The next steps drop node 0 before posting to it (a read in one round trip, a write
/// in two).
#[test]
fn a_write_goes_on_past_a_renewal_that_failed_on_a_member() {
    let (outs, now) = scripted(
        &[],
        1_200,
        vec![|mut ep| {
            Box::pin(async move {
                ep.hold_lease(dtxn_fabric::Lease {
                    nodes: dtxn_fabric::NodeSet::first(NODES),
                    addr: 128,
                    lease_ns: 3_000,
                    guard_ns: 100,
                    incarnation: 1,
                });
                let mut chain = all();
                let w = write(&mut ep, &mut chain, 0, W1).await;
                let after_write = format!("{:?}", chain.members());
                // A second chain, as stale as the first was: each step drops node 0 first.
                let mut again = chain.clone();
                let rts = ep.stats().round_trips;
                let r = read_at(&mut ep, &mut chain).await;
                let rts = ep.stats().round_trips - rts;
                let read = format!("{:?} in {rts}", chain.members());
                let rts = ep.stats().round_trips;
                let w3 = write(&mut ep, &mut again, W1, W3).await;
                let rts = ep.stats().round_trips - rts;
                let w3 = format!("{w3} {:?} in {rts}", again.members());
                vec![w, after_write, r, read, w3]
            })
        }],
    );
    assert_eq!(
        outs,
        [[
            "Done".to_string(),
            "[0, 1, 2]".into(),
            format!("{W1:#x}"),
            "[1, 2] in 1".into(),
            "Done [1, 2] in 2".into()
        ]]
    );
    assert_eq!(now, [None, Some(W3), Some(W3)]);
}

/// A write refuses a new word whose tag is not its expected word's plus one.
#[test]
fn a_write_must_raise_the_tag_by_one() {
    let (outs, now) = scripted(
        &[],
        u64::MAX / 2,
        vec![|mut ep| Box::pin(async move { vec![write(&mut ep, &mut all(), 0, W3).await] })],
    );
    assert!(
        outs[0][0].contains("raise its word's tag by one"),
        "{outs:?}"
    );
    assert_eq!(now, [None, Some(0), Some(0)]);
}

/// Four members, a lease with a copy on each (its renewals ride in the chain's batches), and
/// members 1 and 2 dying together at each instant of a write's first microseconds in turn: a
/// batch that fails may fail on a member before the one it was for, and the write goes on
/// from the first member that does not hold its word yet. A `Done` write is on every live
/// member. (Before, the write went on past the member after the one it had posted to, and
/// returned `Done` with the tail never written.)
#[test]
fn a_write_done_is_on_every_live_member_whichever_members_die_together() {
    const MEMBERS: u16 = 4;
    let mut done = 0;
    for at in (0..6_000).step_by(25) {
        let mut cfg = ideal(MEMBERS);
        for node in [1, 2] {
            cfg.faults.memory_crashes.push(MemoryCrash {
                at_ns: at,
                node,
                down_ns: u64::MAX / 4,
            });
        }
        let mut sim = SimPool::new(cfg).unwrap();
        let topo = Topology {
            compute_nodes: 1,
            threads: 1,
            coroutines: 1,
        };
        let r = sim
            .run(topo, None, |mut ep: Endpoint| async move {
                ep.hold_lease(dtxn_fabric::Lease {
                    nodes: dtxn_fabric::NodeSet::first(MEMBERS),
                    addr: 128,
                    lease_ns: 3_000,
                    guard_ns: 100,
                    incarnation: 1,
                });
                let mut chain = Chain::new((0..MEMBERS).collect()).unwrap();
                let mut counts = Counts::default();
                let w = control::cas(&mut ep, &mut chain, OFF, 0, W1, tag, &mut counts).await;
                (w, chain.members().to_vec())
            })
            .unwrap();
        let (w, members) = r.outputs[0].clone().unwrap();
        if w == Ok(Write::Done) {
            done += 1;
            // (Nodes 1 and 2 read back blank once they died, whenever that was.)
            for n in [0, 3] {
                let now = sim.with_local(n, |m| m.read_u64(OFF));
                assert_eq!(
                    now, W1,
                    "crash at {at} ns: done, but member {n} holds {now:#x}"
                );
            }
            assert_eq!(members.last(), Some(&3), "crash at {at} ns");
        }
    }
    assert!(done > 200, "{done} writes done");
}

/// Several words in one write (`cas_many`, one batch a member): each has its own outcome (one
/// expected at the head goes down the chain, one whose head held another word is `Lost` and
/// goes no further), and a tag that rises by more than one is refused unless the words have
/// one writer at a time.
#[test]
fn words_written_together_each_have_their_outcome() {
    const OFF2: u64 = OFF + 8;
    let cfg = ideal(NODES);
    let mut sim = SimPool::new(cfg).unwrap();
    // Writer 2 won the second word at the head and crashed there.
    sim.with_local(0, |m| m.write(OFF2, &W2.to_le_bytes()));
    let topo = Topology {
        compute_nodes: 1,
        threads: 1,
        coroutines: 1,
    };
    let r = sim
        .run(topo, None, |mut ep: Endpoint| async move {
            let mut chain = all();
            let mut counts = Counts::default();
            let words = [
                control::Cas {
                    off: OFF,
                    expect: 0,
                    new: W1,
                },
                control::Cas {
                    off: OFF2,
                    expect: 0,
                    new: W1,
                },
            ];
            let opts = control::Opts::default();
            let both = control::cas_many(&mut ep, &mut chain, &words, tag, opts, &mut counts)
                .await
                .unwrap();
            let round_trips = ep.stats().round_trips;
            // W1 to W3 skips no tag; 0 to W3 skips one.
            let jump = [control::Cas {
                off: OFF,
                expect: W1,
                new: W3 + (1 << 32),
            }];
            let refused =
                control::cas_many(&mut ep, &mut chain, &jump, tag, opts, &mut counts).await;
            let one_writer = control::Opts {
                one_writer: true,
                ..opts
            };
            let jumped =
                control::cas_many(&mut ep, &mut chain, &jump, tag, one_writer, &mut counts).await;
            (both, round_trips, refused, jumped)
        })
        .unwrap();
    let (both, round_trips, refused, jumped) = r.outputs[0].clone().unwrap();
    assert_eq!(both, [Write::Done, Write::Lost]);
    assert_eq!(round_trips, u64::from(NODES), "one batch a member");
    assert_eq!(
        refused,
        Err(control::ControlError::BadTag {
            expect_tag: 1,
            new_tag: 3
        })
    );
    assert_eq!(jumped, Ok(vec![Write::Done]));
    for n in 0..NODES {
        let (first, second) = sim.with_local(n, |m| (m.read_u64(OFF), m.read_u64(OFF2)));
        assert_eq!(first, W3 + (1 << 32), "member {n}");
        assert_eq!(second, if n == 0 { W2 } else { 0 }, "member {n}");
    }
}
