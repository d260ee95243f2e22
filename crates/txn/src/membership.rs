//! Leases, membership and the online recovery service (FaRM's leases; FORD section 4.8 and
//! Motor section 4.2 detect a dead coordinator "with leases"; issue #23).
//!
//! **The membership area** is memory node 0's reserved page (`dtxn_store::layout`), copied on
//! every member of the control chain (below): a leader word (CAS only), then one lease word per coordinator, WRITten by that coordinator alone
//! (nobody CASes it), then one recovered word per coordinator (CAS only, on lines of their
//! own). A lease word holds an expiry on the run's clock, a done bit and an incarnation
//! ([`dtxn_fabric::Lease::word`]); the recovered word the last incarnation recovery settled.
//!
//! **Copies on the control chain** (issue #23, `docs/src/control-chain.md`, increment 3).
//! With the pool's control chain on nodes `0..k` ([`PoolMap::control_set`]), each lease word
//! and view acknowledgement has a copy at the same offset on every member: a renewal WRITEs
//! each copy in the batch it rides with (the endpoint leaves out members it saw down, and a
//! batch that failed only on renewals does not fail its caller), an acknowledgement is
//! written to each, and [`read_members`] takes the latest copy (greatest expiry, greatest
//! acknowledgement). Detection stays sound when a member dies: a renewal posted before the
//! holder's deadline lands on every live member, so the survivors hold it. The leader, view,
//! repaired and recovered words (increment 4) are the chain's CAS words
//! ([`crate::control`]): written at the head and down the chain, read at the tail, a member
//! behind its predecessor helped forward by whoever reads it; each carries a tag
//! ([`LeaderWord`], [`RecoveredWord`], the view's number) that every write raises. So node 0
//! may fail like any member (increment 7): the chain goes on without it, and nothing here
//! names it ([`PoolMap::holds_control_alone`] says whose loss is the pool's). The claim word
//! and the timestamp oracle are still node 0's alone (Motor, Scythe and CALVIN keep node 0
//! from failing: `Protocol::on_node0`).
//!
//! **Renewal and fencing** are the endpoint's ([`dtxn_fabric::Endpoint::hold_lease`]): every
//! post once a quarter of the lease has passed carries a renewal `expiry = now + lease`, and
//! a coordinator posts nothing at or after `expiry - guard` (its own clock), ever again: its
//! transaction in flight ends with [`AbortReason::LeaseExpired`](crate::AbortReason), is not
//! recorded (recovery decides its outcome, as for a crash), and the coordinator stops.
//!
//! **Detection.** Coordinator `i` is *dead* when a READ of its lease word **posted** at or
//! after the expiry it shows still shows it, and it is neither done nor recovered. The
//! argument, with `G` the guard and `F` the longest flight of an op (post to execution of
//! its last line; the only assumption leases add to the fabric contract):
//!
//! 1. `i` posts nothing at or after `E - G` (fencing), so every op of `i`, renewals
//!    included, has executed before `E - G + F <= E` when `G >= F`.
//! 2. A READ posted at `t >= E` executes after `t`, hence after every op of `i`: if it
//!    still shows expiry `E`, no renewal is coming, and `i` never acts again.
//! 3. Recovery's ops are posted after that READ completed, so they execute after every op
//!    of `i`: recovery sees `i`'s last state, and nothing of `i` lands on top of it.
//!
//! The flight bound `F` is the one assumption beyond the fabric contract (which promises no
//! times). On `sim` it is `SimConfig::flight_bound_ns` (one way, delays, and the adversary's
//! windows stacked over the ops ahead on a QP), the default guard twice it, and every
//! `--faults` run measures its longest flight and fails if it reached the guard.
//!
//! The clock is one for everybody: virtual time on `sim` (a coordinator's clock runs at most
//! its thread's CPU charge ahead, and its posts depart then, so the argument holds with
//! departure times). A thread stalled by the adversary is stalled *before* it resumes, so
//! the stall is on its clock when it checks its lease: stalls never fall between the check
//! and the post, and cost liveness, not safety. Liveness wants a live coordinator to renew
//! before `E - G` even after a stall `S`: renewals are due `lease/4` after the last one, so
//! `3 lease / 4 > G + S` ([`LeaseConfig::check`]).
//!
//! On a real host (`shm`, `ucx`) lease words are on the wall clock (`CLOCK_REALTIME`,
//! [`Endpoint::lease_now_ns`]), which the processes of a host share and hosts share within
//! a skew `e`; a holder fences itself on its own monotonic clock, `lease - guard` after the
//! renewal's clock reads. Two things join the flight in `F`: a preemption between the
//! clock read that passes the gate and the doorbell (on `shm` the doorbell executes the
//! ops), and the skew, which moves the reader's `t >= E` by up to `e` towards the holder's
//! last post: the guard must cover `F + P + e`. Each endpoint measures, from the gate's
//! clock read to the observed completion, an upper bound of `F + P` on every awaited
//! batch ([`Endpoint::max_flight_ns`]), which a run checks against `G - e`.
//!
//! **The recovery service.** Every live coordinator scans the membership area every
//! `lease/4` between its transactions (one READ). Finding a dead coordinator, it tries to
//! become the leader (a CAS of the leader word from 0, or from a leader whose own lease
//! expired); the leader runs [`crate::recovery::recover`] for every dead coordinator, CASes
//! its recovered word to the dead incarnation (not if something of it still waits its turn,
//! Scythe's tickets behind a coordinator not yet found dead: the next scan recovers it
//! again), and gives the leader word back. A leader that
//! dies half-way is recovered in turn by the next one, which runs the half-done recovery
//! again: `recover` is idempotent (the entry's status is written after its settling, the locks
//! released after the status, each step a function of what the replicas hold).
//!
//! **The liveness phase.** A coordinator done with its transactions marks its lease done and
//! keeps serving ([`Service::drain`]) until every other coordinator is done or recovered: a
//! coordinator that crashed late is recovered before the run ends.
//!
//! **Re-replication** ([`Service::with_rejoin`]; issue #23). A failed memory node that comes
//! back blank (a replacement under its id) is made a full replica again while transactions
//! go on, in two view changes:
//!
//! 1. *Join.* Each scan in an active view asks the failed nodes (one READ each, over a new
//!    connection: a replacement is a new region, and the old connection broke with the node,
//!    so a node that failed unnoticed and came back is never used unknowingly). One that
//!    answers is given the pool's catalog and superblock (`failover::format_joiner`) and the
//!    view CASed to one where it is *joining*: every commit writes it as one more backup, in
//!    the same batches as the others; nobody reads it, promotes it, or counts it as a
//!    replica (a table whose readable replicas all fail is lost).
//! 2. *Copy.* Once that view is active (every coordinator acknowledged it: no commit of an
//!    older view, which does not write the joiner, is in flight, and the dead of older views
//!    were recovered), the leader copies each table of the joiner from its primary, slot by
//!    slot under the slot's lock (`failover::copy_to_joiners`): a CAS of the primary's lock
//!    word from 0 to the leader's owner id and a READ in one batch (the atomic executes before
//!    the READ on its QP), the WRITE of the record to the joiner, awaited, then the unlock.
//!    A slot found locked is left for the next pass (the leader keeps the word across passes,
//!    and gives it back, keeping what is left, when a coordinator died: a dead holder's
//!    recovery needs it).
//! 3. *Full.* With nothing left, the leader CASes the view to one where the node is
//!    *rejoined*: a full replica, ranked after the live ones (so no primary moves), promoted
//!    like any backup later. Activation as for every view.
//!
//! Why no commit's WRITE to the joiner is overwritten by an older image: a commit writes the
//! joiner after it holds the record's lock and awaits those WRITEs before it unlocks. If it
//! unlocked before the copier's CAS, its WRITE to the joiner executed before the copier's
//! READ of the primary, which shows its install or a later one. If it locks after the
//! copier's unlock, the copier's WRITE had completed before the unlock was posted: the
//! commit's lands after it. Inserts and deletes are
//! commits on a slot (a free slot is copied under its lock word like a record; a tombstone is
//! a record). A chain link is set once, under the chain's insert lock, on every replica (the
//! joiner too, in a joining view), and never changes: the copier writes the links the primary
//! has set and leaves unset ones alone; overflow buckets claimed after the copy read the
//! counter are linked by joining-view commits. The overflow counter, the insert locks and the
//! chain words are the primary's alone; a rejoined node that becomes primary is repaired like
//! a promoted backup (`PoolMap::is_promoted`). Recovery in a joining view judges a commit by
//! the readable replicas (an older view's commit never wrote the joiner), rolls back onto the
//! joiner too (the image is the committed state), and on a roll forward gives the joiner the
//! primary's record under the dead's lock (the crash may have cut its WRITE there after the
//! copy passed). The copier's locks are not journaled: it marks its lock journal overflowed on
//! each primary before its first copy lock there, so its recovery scans for them.
//!
//! A protocol whose installs take no record lock (CALVIN's) is held off by its schedule
//! instead: the copy runs only while [`Protocol::installs_held`](crate::Protocol) says no
//! install can be in flight or start while the copier stays between its transactions, a
//! slice of `COPY_SLICE_CHUNKS` rounds at a time, the copier's own transactions (and so
//! everyone's) going on between slices.

use crate::control::{self, Chain, ControlError, Counts, Opts, Write};
use crate::failover;
use crate::recovery::{recover_within, Recovered};
use crate::registry::Protocol;
use dtxn_fabric::{Endpoint, FabricError, Lease, NodeSet};
use dtxn_store::layout::{
    LeaderWord, RecoveredWord, ACK_OFF, LEADER_OFF, LEASE_OFF, MAX_MEMBERS, RECOVERED_OFF,
    REPAIRED_OFF, VIEW_OFF,
};
use dtxn_store::{PoolMap, View};
use std::cell::Cell;
use std::rc::Rc;

/// A view acknowledgement that agrees to every view: its coordinator left the run (done, out
/// of its liveness phase) and posts nothing more.
pub const ACK_GONE: u64 = u64::MAX;

/// A run's lease terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    /// A renewal grants the lease for this long (ns of the run's clock).
    pub lease_ns: u64,
    /// A coordinator stops posting this long before its lease expires.
    pub guard_ns: u64,
}

impl LeaseConfig {
    /// Terms for a fabric whose ops fly at most `flight_ns` (a static bound) and whose
    /// threads stall at most `stall_ns`: a guard of twice the flight (a margin for queueing
    /// at a busy NIC, which the bound leaves out), and a lease long enough for a renewal to
    /// survive a stall, at least 1 ms. Every `--faults` run measures its longest flight
    /// against the guard.
    pub fn for_fabric(flight_ns: u64, stall_ns: u64) -> LeaseConfig {
        let guard_ns = 2 * flight_ns;
        let lease_ns = (4 * (guard_ns + stall_ns)).max(1_000_000);
        LeaseConfig { lease_ns, guard_ns }
    }

    /// Checks the terms against the fabric: the guard covers an op's flight (safety: a
    /// fenced coordinator's ops land before its lease expires), and a renewal due a quarter
    /// of the lease after the last one still comes before `expiry - guard` after a stall of
    /// `stall_ns` (liveness: a stalled but live coordinator keeps its lease). One line.
    pub fn check(&self, flight_ns: u64, stall_ns: u64) -> Result<(), String> {
        if self.guard_ns < flight_ns {
            return Err(format!(
                "lease guard {} ns is below the fabric's longest op flight {flight_ns} ns: a \
                 fenced coordinator's last WRITE could land after its recovery started",
                self.guard_ns
            ));
        }
        if self.lease_ns >= 1 << 47 {
            return Err(format!("lease {} ns is too long", self.lease_ns));
        }
        if 3 * self.lease_ns <= 4 * (self.guard_ns + stall_ns) {
            return Err(format!(
                "lease {} ns must exceed 4/3 x (guard {} ns + longest stall {stall_ns} ns): a \
                 coordinator stalled once would lose its lease",
                self.lease_ns, self.guard_ns
            ));
        }
        Ok(())
    }
}

/// One coordinator's record in the membership area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Member {
    pub expiry_ns: u64,
    pub done: bool,
    /// 0: the slot was never held.
    pub incarnation: u16,
    /// The last incarnation recovery settled, and its word ([`RecoveredWord`]).
    pub recovered: u16,
    pub recovered_word: u64,
    /// The newest view it works in ([`ACK_GONE`]: it left).
    pub ack: u64,
}

impl Member {
    /// Nothing to recover: never held, done, or recovered.
    pub fn settled(&self) -> bool {
        self.incarnation == 0 || self.done || self.recovered == self.incarnation
    }

    /// Dead by a READ posted at `posted_ns`: its lease had expired before the READ left.
    pub fn dead(&self, posted_ns: u64) -> bool {
        !self.settled() && posted_ns >= self.expiry_ns
    }

    /// Holds `view` back no longer, by a READ posted at `posted_ns`: never held, recovered,
    /// gone, working in `view` (or a later one) already, or done and expired. A done
    /// coordinator in its liveness phase must agree like a live one while it lives (it may be
    /// recovering someone in an older view); once its lease expired, it posts nothing more
    /// and its ops have landed (the fencing argument), and nobody recovers it (it was done).
    pub fn agrees(&self, view: View, posted_ns: u64) -> bool {
        self.incarnation == 0
            || self.recovered == self.incarnation
            || self.ack == ACK_GONE
            || self.ack >= u64::from(view.number)
            || (self.done && posted_ns >= self.expiry_ns)
    }
}

/// The membership area as one READ saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// When the READ was posted.
    pub posted_ns: u64,
    /// The leader word ([`LeaderWord`]: its owner is 0, or the lock-owner id of the recovery
    /// leader).
    pub leader: u64,
    /// The pool's view, and the newest view whose promoted primaries were repaired.
    pub view: View,
    pub repaired: View,
    pub members: Vec<Member>,
}

/// A view word's tag on the control chain: its number (each change adds one).
fn view_tag(w: u64) -> u64 {
    u64::from(View::parse(w).number)
}

/// The control chain over `copies` ([`PoolMap::control_set`]) but the members the endpoint
/// saw down, head first.
fn chain_of(ep: &Endpoint, copies: NodeSet) -> Result<Chain, FabricError> {
    let live: Vec<_> = copies.minus(ep.seen_down()).iter().collect();
    match copies.iter().last() {
        // Every member seen down: the control words are lost with the last of them.
        Some(last) if live.is_empty() => Err(FabricError::NodeDown(last)),
        _ => Chain::new(live).map_err(fabric),
    }
}

/// A control chain's error as the fabric's: every member down is the last member's failure
/// (the pool's control words are lost, as node 0's loss lost them before they had copies).
fn fabric(e: ControlError) -> FabricError {
    match e {
        ControlError::Fabric(e) => e,
        ControlError::AllDown(n) => FabricError::NodeDown(n),
        e => FabricError::Setup(e.to_string()),
    }
}

/// CASes the view word from `view` to `next` down the control chain over `copies`
/// ([`PoolMap::control_set`]), each member's CAS followed by a FLUSH of it in the same
/// batch (an atomic executes before later ops on its QP): in persistent-memory mode a pool
/// that loses power must come back in its last view, not in one where a node failed over
/// since is live again or a rejoined one is still joining. Everywhere else the FLUSH costs
/// its completion, once per view change. With one member, one batch: CAS and FLUSH.
pub async fn change_view(
    ep: &mut Endpoint,
    copies: NodeSet,
    view: View,
    next: View,
) -> Result<Write, FabricError> {
    change_view_counted(ep, copies, view, next, &mut Counts::default()).await
}

async fn change_view_counted(
    ep: &mut Endpoint,
    copies: NodeSet,
    view: View,
    next: View,
    counts: &mut Counts,
) -> Result<Write, FabricError> {
    let mut chain = chain_of(ep, copies)?;
    let word = control::Cas {
        off: VIEW_OFF,
        expect: view.word(),
        new: next.word(),
    };
    let opts = Opts {
        flush: true,
        one_writer: false,
    };
    let out = control::cas_many(ep, &mut chain, &[word], view_tag, opts, counts).await;
    Ok(out.map_err(fabric)?[0])
}

/// Reads the committed view on the control chain over `copies` ([`PoolMap::control_set`]).
pub async fn read_view(ep: &mut Endpoint, copies: NodeSet) -> Result<View, FabricError> {
    let w = read_word(ep, copies, VIEW_OFF, view_tag, &mut Counts::default()).await?;
    Ok(View::parse(w))
}

/// Reads the committed word at `off` on the control chain over `copies` (helping members
/// behind forward).
async fn read_word(
    ep: &mut Endpoint,
    copies: NodeSet,
    off: u64,
    tag: control::TagOf,
    counts: &mut Counts,
) -> Result<u64, FabricError> {
    let mut chain = chain_of(ep, copies)?;
    control::read(ep, &mut chain, off, tag, counts)
        .await
        .map_err(fabric)
}

/// Reads the leader, view and repaired words and the first `n` coordinators' records (one
/// round trip, unless a copy's node is found down or a chain word is helped). Every word
/// is read on each of its `copies` (the control chain's members, [`PoolMap::control_set`])
/// but those the endpoint saw down. A lease or acknowledgement word's latest copy counts:
/// the greatest expiry, the greatest acknowledgement; a copy never written (0) counts for
/// nothing (on a real host's clock a 0 word would read as an expiry far ahead). A CAS word
/// (leader, view, repaired, recovered: [`control`]'s register) is the tail's, the committed
/// one; where a member is behind its predecessor, the word is read again through
/// [`control::read`], which helps it forward. A copy's node found down is left out and the
/// READ posted again.
pub async fn read_members(
    ep: &mut Endpoint,
    n: u32,
    copies: NodeSet,
) -> Result<Members, FabricError> {
    read_members_counted(ep, n, copies, &mut Counts::default()).await
}

async fn read_members_counted(
    ep: &mut Endpoint,
    n: u32,
    copies: NodeSet,
    counts: &mut Counts,
) -> Result<Members, FabricError> {
    let n = n.min(MAX_MEMBERS) as usize;
    let mut helps = 0;
    loop {
        let live = copies.minus(ep.seen_down());
        let Some(head) = live.iter().next() else {
            // Every member down: the control words are lost.
            return Err(FabricError::NodeDown(copies.iter().last().unwrap_or(0)));
        };
        let others = live.minus(NodeSet::single(head));
        let posted_ns = ep.lease_now_ns();
        // The head's READs first (node 0's while it lives), in the order they had before
        // the words had copies.
        let line = ep.read(head, LEADER_OFF, (REPAIRED_OFF + 8 - LEADER_OFF) as usize);
        let mut leases = vec![ep.read(head, LEASE_OFF, 8 * n.max(1))];
        let recovered = ep.read(head, RECOVERED_OFF, 8 * n.max(1));
        let mut acks = vec![ep.read(head, ACK_OFF, 8 * n.max(1))];
        let (mut lines, mut recovereds) = (vec![line], vec![recovered]);
        for m in others.iter() {
            leases.push(ep.read(m, LEASE_OFF, 8 * n.max(1)));
            acks.push(ep.read(m, ACK_OFF, 8 * n.max(1)));
            lines.push(ep.read(m, LEADER_OFF, (REPAIRED_OFF + 8 - LEADER_OFF) as usize));
            recovereds.push(ep.read(m, RECOVERED_OFF, 8 * n.max(1)));
        }
        match ep.post().await {
            Err(FabricError::NodeDown(_)) if lost_a_copy(ep, live) => continue,
            r => r?,
        }
        // Each coordinator's lease and acknowledgement: the latest copy (read before any
        // help below posts: an op's results are gone once the next batch begins).
        let mut members: Vec<Member> = (0..n)
            .map(|i| {
                let (expiry_ns, done, incarnation) = leases
                    .iter()
                    .map(|&op| ep.word(op, 8 * i))
                    .filter(|&w| w != 0)
                    .map(|w| Lease::parse_near(w, posted_ns))
                    .max_by_key(|&(expiry, _, _)| expiry)
                    .unwrap_or_default();
                let ack = acks.iter().map(|&op| ep.word(op, 8 * i)).max();
                Member {
                    expiry_ns,
                    done,
                    incarnation,
                    ack: ack.expect("node 0's copy"),
                    ..Member::default()
                }
            })
            .collect();
        // The CAS words, as each member holds them (head first, then the others ascending,
        // the chain's order), by offset: the tail's is the committed one, at the
        // instant of the leases' READ too. Where a member is behind its predecessor (a write
        // under way, or one whose writer died half-way), the word is read again through
        // [`control::read`], which helps it forward, and the whole area READ again, so that
        // every field comes from one batch (a leader word read later than the leases could
        // name a coordinator that joined since and took it, as if it had expired).
        let chain_words = |at: u64, ops: &[dtxn_fabric::OpId], base: u64| -> Vec<u64> {
            ops.iter()
                .map(|&op| ep.word(op, (at - base) as usize))
                .collect()
        };
        let mut words: Vec<(u64, control::TagOf, Vec<u64>)> = vec![
            (
                LEADER_OFF,
                LeaderWord::tag,
                chain_words(LEADER_OFF, &lines, LEADER_OFF),
            ),
            (
                VIEW_OFF,
                view_tag,
                chain_words(VIEW_OFF, &lines, LEADER_OFF),
            ),
            (
                REPAIRED_OFF,
                view_tag,
                chain_words(REPAIRED_OFF, &lines, LEADER_OFF),
            ),
        ];
        for i in 0..n as u64 {
            let at = RECOVERED_OFF + 8 * i;
            let w = chain_words(at, &recovereds, RECOVERED_OFF);
            words.push((at, RecoveredWord::tag, w));
        }
        let behind = |(_, tag, held): &(u64, control::TagOf, Vec<u64>)| {
            held.windows(2).any(|p| tag(p[1]) < tag(p[0]))
        };
        if helps < MAX_HELPS && words.iter().any(behind) {
            helps += 1;
            for (off, tag, _) in words.into_iter().filter(|w| behind(w)) {
                read_word(ep, copies, off, tag, counts).await?;
            }
            continue;
        }
        let committed: Vec<u64> = words
            .iter()
            .map(|(_, _, held)| *held.last().expect("node 0's copy"))
            .collect();
        for (x, &w) in members.iter_mut().zip(&committed[3..]) {
            x.recovered_word = w;
            x.recovered = RecoveredWord::parse(w).incarnation;
        }
        return Ok(Members {
            posted_ns,
            leader: committed[0],
            view: View::parse(committed[1]),
            repaired: View::parse(committed[2]),
            members,
        });
    }
}

/// How many times [`read_members`] helps members behind and READs the area again before it
/// takes the tails' words as they are (committed all the same; writers that keep moving a
/// word could otherwise hold it for ever).
const MAX_HELPS: u32 = 4;

/// WRITEs `word` at `off` on each of `copies` but those the endpoint saw down (one round
/// trip; posted again without a copy whose node is found down).
async fn write_copies(
    ep: &mut Endpoint,
    copies: NodeSet,
    off: u64,
    word: u64,
) -> Result<(), FabricError> {
    loop {
        let live = copies.minus(ep.seen_down());
        for m in live.iter() {
            ep.write(m, off, &word.to_le_bytes());
        }
        match ep.post().await {
            Err(FabricError::NodeDown(_)) if lost_a_copy(ep, live) => continue,
            r => return r,
        }
    }
}

/// Whether a failed batch over `copies` lost some of them and left others, so that it is to
/// be posted again without the lost: the error names one node the batch failed on, and the
/// endpoint saw them all. (None left: the control words are lost, and the error is the
/// caller's; with one member, node 0's loss, as before the words had copies.)
fn lost_a_copy(ep: &Endpoint, copies: NodeSet) -> bool {
    let left = copies.minus(ep.seen_down());
    left != copies && !left.is_empty()
}

/// Marks coordinators `dead` recovered: CASes each one's recovered word in `m` to its
/// incarnation there, down the control chain over `copies` (one batch a member). Only the
/// recovery leader marks (or, after a run, the one process left). Each mark's outcome.
pub async fn mark_recovered(
    ep: &mut Endpoint,
    copies: NodeSet,
    m: &Members,
    dead: &[u32],
    counts: &mut Counts,
) -> Result<Vec<Write>, FabricError> {
    let writer = ep.id().index as u16 + 1;
    let words: Vec<_> = dead
        .iter()
        .map(|&i| {
            let x = m.members[i as usize];
            control::Cas {
                off: RECOVERED_OFF + 8 * u64::from(i),
                expect: x.recovered_word,
                new: RecoveredWord::parse(x.recovered_word)
                    .then(writer, x.incarnation)
                    .word(),
            }
        })
        .collect();
    let mut chain = chain_of(ep, copies)?;
    let opts = Opts::default();
    control::cas_many(ep, &mut chain, &words, RecoveredWord::tag, opts, counts)
        .await
        .map_err(fabric)
}

/// The lease of coordinator `index`'s incarnation `incarnation`, with a copy of its word on
/// each of `copies` ([`PoolMap::control_set`]).
pub fn lease_of(index: u32, cfg: LeaseConfig, incarnation: u16, copies: NodeSet) -> Lease {
    Lease {
        nodes: copies,
        addr: LEASE_OFF + 8 * u64::from(index),
        lease_ns: cfg.lease_ns,
        guard_ns: cfg.guard_ns,
        incarnation,
    }
}

/// Coordinator `ep` joins: takes its slot's next incarnation and holds its lease, with its
/// word's copies on the control chain's members `copies` ([`PoolMap::control_set`]), renewed
/// once, awaited, before this returns. Its slot's previous incarnation must be settled.
pub async fn join(
    ep: &mut Endpoint,
    cfg: LeaseConfig,
    copies: NodeSet,
) -> Result<u16, FabricError> {
    let index = ep.id().index;
    if index >= MAX_MEMBERS {
        return Err(FabricError::Setup(format!(
            "coordinator {index}: the membership area holds {MAX_MEMBERS} coordinators"
        )));
    }
    let m = read_members(ep, index + 1, copies).await?.members[index as usize];
    if !m.settled() {
        return Err(FabricError::Setup(format!(
            "coordinator {index}: its previous incarnation {} was never recovered",
            m.incarnation
        )));
    }
    let incarnation = Lease::next_incarnation(m.incarnation.max(m.recovered));
    ep.hold_lease(lease_of(index, cfg, incarnation, copies));
    ep.renew_lease().await?;
    Ok(incarnation)
}

/// What the recovery service did for one dead coordinator (times on the lease clock,
/// [`Endpoint::lease_now_ns`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryEvent {
    /// The dead coordinator, and its incarnation.
    pub coordinator: u32,
    pub incarnation: u16,
    /// The coordinator that recovered it.
    pub by: u32,
    /// Its lease's expiry.
    pub expired_ns: u64,
    /// When the READ that first found it dead was posted (this leader's, before it led).
    pub noticed_ns: u64,
    /// `recover`'s start and end.
    pub started_ns: u64,
    pub finished_ns: u64,
    pub outcome: Recovered,
    pub locks_released: u32,
}

/// What one coordinator saw of a view change (times on the run's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewEvent {
    pub view: View,
    pub coordinator: u32,
    /// When it adopted the view (stopped starting transactions in the old one), and when the
    /// view became active for it (every coordinator agreed, the promoted primaries repaired).
    pub adopted_ns: u64,
    pub active_ns: u64,
    /// Promoted tables it repaired (it led the repair), if any.
    pub repaired: u32,
}

/// One coordinator's share of the recovery service.
pub struct Service {
    protocol: Protocol,
    cfg: LeaseConfig,
    /// Coordinators in the run (the membership slots to scan).
    members: u32,
    next_scan_ns: u64,
    /// The map of the view this coordinator works in.
    map: Rc<PoolMap>,
    /// A transaction failed on a memory node: probe the nodes at the next tick.
    suspect: bool,
    /// What this coordinator recovered, in order.
    pub events: Vec<RecoveryEvent>,
    /// The view changes it saw, in order.
    pub views: Vec<ViewEvent>,
    /// Told of every recovery as soon as it is settled, before it is marked: a leader that
    /// crashes later has reported it all the same (the next leader may report it again).
    sink: Option<Sink>,
    view_sink: Option<ViewSink>,
    /// Failed memory nodes that come back are re-replicated ([`Service::with_rejoin`]).
    rejoin: bool,
    /// What the copy does (but in the negative controls, [`failover::CopyRules::SOUND`]).
    copy_rules: failover::CopyRules,
    /// The coordinator's commits write the joiners (false: the other negative control).
    write_joiners: bool,
    /// This coordinator's copy in progress: its view and what it has done.
    copy: Option<CopyState>,
    /// Its lease was done (drained) and is live again while it leads a copy: done again when
    /// it gives the leader word back.
    undone_for_copy: bool,
    /// The copies this coordinator completed, in order.
    pub joins: Vec<JoinEvent>,
    join_sink: Option<JoinSink>,
    /// Rejoin probes at most every `.1` ns of the endpoint's clock, the next one due at the
    /// shared cell's instant ([`Service::with_probe_limit`]); `None`: at every scan.
    probe_limit: Option<(Rc<Cell<u64>>, u64)>,
    /// What the control chain counted of this coordinator's reads and writes of its words.
    pub control: Counts,
}

/// Passes over what a copy found locked before its leader gives the word back between them.
const MAX_COPY_RETRIES: u32 = 64;

/// Rounds of the copy (16 KB each) per slice where the protocol copies in slices.
const COPY_SLICE_CHUNKS: u64 = 4;

/// A copy to joining memory nodes under way (see [`Service::with_rejoin`]).
#[derive(Debug, Clone)]
struct CopyState {
    view: View,
    started_ns: u64,
    copied: u64,
    passes: u32,
    left: Vec<failover::Slot>,
    /// The first pass, cut into slices (CALVIN's): where the next slice starts.
    resume: Option<(u32, u64)>,
}

/// A re-replication this coordinator completed (times on the run's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinEvent {
    /// The view in which the nodes were joining, and the one that made them full replicas.
    pub joining: View,
    pub joined: View,
    /// The coordinator that copied.
    pub by: u32,
    /// The copy's first pass started, its last ended (the joined view's CAS).
    pub copy_started_ns: u64,
    pub copy_finished_ns: u64,
    /// Slots copied, and passes (a pass retries what the one before found locked).
    pub copied: u64,
    pub passes: u32,
}

/// Where a [`Service`] reports the re-replications it completes.
pub type JoinSink = Box<dyn FnMut(&JoinEvent)>;

/// Where a [`Service`] reports its recoveries as they happen.
pub type Sink = Box<dyn FnMut(&RecoveryEvent)>;
/// Where a [`Service`] reports the view changes it sees.
pub type ViewSink = Box<dyn FnMut(&ViewEvent)>;

/// What one scan found.
struct Scan {
    /// Other coordinators neither done nor recovered (alive, or dead and not yet recovered).
    unsettled: u32,
    /// The earliest expiry among them.
    next_expiry_ns: u64,
}

impl Service {
    /// The service of a coordinator working in `map`'s view.
    pub fn new(protocol: Protocol, cfg: LeaseConfig, members: u32, map: Rc<PoolMap>) -> Service {
        Service {
            protocol,
            cfg,
            members,
            next_scan_ns: 0,
            map,
            suspect: false,
            events: Vec::new(),
            views: Vec::new(),
            sink: None,
            view_sink: None,
            rejoin: false,
            copy_rules: failover::CopyRules {
                journaled: protocol.journaled(),
                ..failover::CopyRules::SOUND
            },
            write_joiners: true,
            copy: None,
            undone_for_copy: false,
            joins: Vec::new(),
            join_sink: None,
            probe_limit: None,
            control: Counts::default(),
        }
    }

    /// Re-replicates failed memory nodes that come back (blank): it probes them at each
    /// scan, and a node that answers is formatted and joins the view; once that view is
    /// active the leader copies its tables to it, and it becomes a full replica (see the
    /// module doc). Every protocol with failover, with one-sided lock stages.
    pub fn with_rejoin(mut self, rejoin: bool) -> Service {
        self.rejoin = rejoin;
        self
    }

    /// Probes the failed nodes for a rejoin at most every `every_ns` of the endpoint's clock,
    /// counted in `next` (the instant the next probe is due), which the coordinators sharing
    /// a thread may share: on a real fabric each probe of a node still down is a blocking
    /// bootstrap ([`Endpoint::reconnect`]: up to a second on an unreachable host), which
    /// stalls every coroutine of the thread. Without it (sim) the nodes are probed at every
    /// scan.
    pub fn with_probe_limit(mut self, next: Rc<Cell<u64>>, every_ns: u64) -> Service {
        self.probe_limit = Some((next, every_ns));
        self
    }

    /// The negative control: the copy takes no lock (unsound; tests only).
    #[doc(hidden)]
    pub fn with_unlocked_copy(mut self) -> Service {
        self.copy_rules.lock = false;
        self
    }

    /// The Motor negative control: the copy leaves the attribute bars (the older versions'
    /// chunks) out (unsound; tests only).
    #[doc(hidden)]
    pub fn with_bars_uncopied(mut self) -> Service {
        self.copy_rules.bars = false;
        self
    }

    /// The persistent-memory negative control: the copy does not FLUSH the joiners
    /// (unsound; tests only).
    #[doc(hidden)]
    pub fn with_joiners_unflushed(mut self) -> Service {
        self.copy_rules.flush = false;
        self
    }

    /// The 2PL negative control: the copy locks every slot from 0, never from a share word
    /// whose shares are gone (unsound: such a slot is never copied; tests only).
    #[doc(hidden)]
    pub fn with_share_words_ignored(mut self) -> Service {
        self.copy_rules.shares = false;
        self
    }

    /// The other negative control: the maps this service hands its coordinator leave the
    /// joiners out, so its commits do not write them (unsound; tests only).
    #[doc(hidden)]
    pub fn with_joiners_unwritten(mut self) -> Service {
        self.write_joiners = false;
        self
    }

    /// Reports every completed re-replication to `sink` too.
    pub fn with_join_sink(mut self, sink: JoinSink) -> Service {
        self.join_sink = Some(sink);
        self
    }

    /// Reports every recovery to `sink` too, as soon as it is settled.
    pub fn with_sink(mut self, sink: Sink) -> Service {
        self.sink = Some(sink);
        self
    }

    /// Reports every view change to `sink` too, once active.
    pub fn with_view_sink(mut self, sink: ViewSink) -> Service {
        self.view_sink = Some(sink);
        self
    }

    /// The map of the view this coordinator works in.
    pub fn map(&self) -> &Rc<PoolMap> {
        &self.map
    }

    /// A transaction failed on a memory node (`AbortReason::ReplicaFailure`): the next tick
    /// probes the memory nodes, and changes the view if one is down.
    pub fn suspect(&mut self) {
        self.suspect = true;
    }

    /// The membership area, as [`read_members`] reads it, counting what the chain did.
    async fn read(&mut self, ep: &mut Endpoint) -> Result<Members, FabricError> {
        let copies = self.map.control_set();
        read_members_counted(ep, self.members, copies, &mut self.control).await
    }

    /// [`change_view`], counting what the chain did.
    async fn change_view(
        &mut self,
        ep: &mut Endpoint,
        view: View,
        next: View,
    ) -> Result<Write, FabricError> {
        let copies = self.map.control_set();
        change_view_counted(ep, copies, view, next, &mut self.control).await
    }

    fn period_ns(&self) -> u64 {
        (self.cfg.lease_ns / 4).max(1)
    }

    /// Between two transactions: scans if a scan is due (or a probe), recovers whom it finds
    /// dead if it becomes the leader, and adopts a new view. Returns the new view's map if
    /// the view changed: the coordinator works in it from its next transaction on.
    pub async fn tick(&mut self, ep: &mut Endpoint) -> Result<Option<Rc<PoolMap>>, FabricError> {
        if self.suspect || ep.now_ns() >= self.next_scan_ns {
            let before = self.map.view();
            self.scan(ep).await?;
            if self.map.view() != before {
                if !self.write_joiners {
                    return Ok(Some(Rc::new(self.map.without_joiners())));
                }
                return Ok(Some(self.map.clone()));
            }
        }
        Ok(None)
    }

    /// The liveness phase: marks this coordinator done and serves until every other one is
    /// done or recovered; probes the memory nodes once; then acknowledges every later view
    /// ([`ACK_GONE`]) and leaves.
    pub async fn drain(&mut self, ep: &mut Endpoint) -> Result<(), FabricError> {
        ep.lease_done();
        ep.renew_lease().await?;
        // Before leaving, every memory node is asked once: one that failed unnoticed (no
        // transaction touched it since) is failed over now, while coordinators remain to
        // agree, and not found by whoever bootstraps the pool next.
        let mut probed = false;
        loop {
            let s = self.scan(ep).await?;
            // A node joining is copied to before the run ends (no coordinator may be left
            // to do it for the next run).
            let settled = s.unsettled == 0 && !(self.rejoin && self.map.view().joining != 0);
            if settled && !probed {
                probed = true;
                self.suspect = true;
                continue;
            }
            if settled {
                let me = ep.id().index;
                let copies = self.map.control_set();
                return write_copies(ep, copies, ACK_OFF + 8 * u64::from(me), ACK_GONE).await;
            }
            // Until the next expiry, renewing our own lease on the way (a scan per period).
            // (An expiry already past is a dead coordinator a live leader is recovering.)
            let now = ep.lease_now_ns();
            let next = Some(s.next_expiry_ns).filter(|&e| e > now);
            let mut wait = next.map_or(u64::MAX, |e| e - now).min(self.period_ns());
            if self.protocol.copies_in_slices()
                && self
                    .copy
                    .as_ref()
                    .is_some_and(|c| c.view == self.map.view())
            {
                // A copy of ours in slices goes on sooner.
                wait = wait.min(self.period_ns() / 16);
            }
            ep.sleep(wait).await;
        }
    }

    async fn scan(&mut self, ep: &mut Endpoint) -> Result<Scan, FabricError> {
        self.next_scan_ns = ep.now_ns() + self.period_ns();
        let mut m = self.read(ep).await?;
        if self.probe(ep, m.view).await? {
            m = self.read(ep).await?;
        }
        while m.view != self.map.view() || self.unacknowledged(ep, &m) {
            m = self.adopt(ep, m.view).await?;
        }
        let active = m.view == self.map.view() && m.repaired.number == m.view.number;
        let scan = self.recover_dead(ep, m).await?;
        if self.rejoin && active {
            self.rejoin_step(ep).await?;
        }
        Ok(scan)
    }

    /// In an active view: copies to the joining nodes if there are any (the leader), else
    /// asks the failed nodes whether one is back, and if so formats it and changes the view
    /// to one where it joins.
    async fn rejoin_step(&mut self, ep: &mut Endpoint) -> Result<(), FabricError> {
        let view = self.map.view();
        if view.joining != 0 {
            return self.copy_step(ep).await;
        }
        if view.failed == 0 {
            return Ok(());
        }
        if let Some((next, every_ns)) = &self.probe_limit {
            let now = ep.now_ns();
            if now < next.get() {
                return Ok(());
            }
            next.set(now.saturating_add(*every_ns));
        }
        let back = match failover::probe_failed(ep, &self.map).await {
            Ok(b) => b,
            Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                self.suspect = true;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let Some(&n) = back.first() else {
            return Ok(());
        };
        // Formatted before the view names it, so that a bootstrap in the new view finds its
        // catalog. (A failed node is written by nobody else.)
        match failover::format_joiner(ep, &self.map, n).await {
            Ok(()) => {}
            Err(FabricError::NodeDown(_)) => return Ok(()),
            Err(e) => return Err(e),
        }
        let next = view.joining(n).expect("failed");
        // If another coordinator changed the view first, its view is the one adopted.
        self.change_view(ep, view, next).await?;
        Ok(())
    }

    /// The leader copies the joining nodes' tables (a pass over everything, then passes over
    /// what the last one found locked), and once nothing is left, changes the view to one
    /// where they are full replicas. Gives the leader word back when a coordinator died
    /// (recovery of a dead holder of what is left needs the word), keeping what it did.
    async fn copy_step(&mut self, ep: &mut Endpoint) -> Result<(), FabricError> {
        let m = self.read(ep).await?;
        let Some(mine) = self.lead(ep, &m).await? else {
            return Ok(());
        };
        let view = self.map.view();
        let m = self.read(ep).await?;
        if m.view != view || m.repaired.number != view.number {
            return self.give_back(ep, mine).await;
        }
        let mut state = match self.copy.take() {
            Some(c) if c.view == view => c,
            _ => CopyState {
                view,
                started_ns: ep.now_ns(),
                copied: 0,
                passes: 0,
                left: Vec::new(),
                resume: None,
            },
        };
        if state.passes == 0 && state.resume.is_none() {
            // Formatted again (the same bytes): the node may have failed and come back once
            // more since whoever changed the view formatted it.
            for n in view.joining_nodes() {
                match failover::format_joiner(ep, &self.map, n).await {
                    Ok(()) => {}
                    Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                        self.suspect = true;
                        return self.give_back(ep, mine).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let owner = u64::from(ep.id().index) + 1;
        // A drained coordinator is settled: nobody would recover it, and the copy locks it is
        // about to take (unjournaled) would stay set if it died holding them. Live again
        // before its first copy lock (the renewal saying so awaited), done again at the
        // give-back.
        if ep.lease_undone() {
            self.undone_for_copy = true;
            match ep.renew_lease().await {
                Ok(()) => {}
                Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                    self.suspect = true;
                    return self.give_back(ep, mine).await;
                }
                Err(e) => return Err(e),
            }
        }
        // Passes until nothing is left, holding the leader word (another leader would start
        // over: what is left is known to this coordinator only), unless a coordinator died
        // (it may hold what is left, and its recovery needs the word) or the view moved.
        for retry in 0.. {
            // Installs that take no record lock (CALVIN's) are held by the schedule instead,
            // for as long as this coordinator stays between its transactions: the copy waits
            // for that (its next scan) when they are not.
            let me = ep.id().index;
            let slices = self.protocol.copies_in_slices();
            if slices {
                let m = self.read(ep).await?;
                let others_settled = m
                    .members
                    .iter()
                    .enumerate()
                    .all(|(i, x)| i as u32 == me || x.settled());
                if !self
                    .protocol
                    .installs_held(ep, &self.map, me, self.members, others_settled)
                    .await?
                {
                    // Not now: again right after our next transaction, keeping the word
                    // (another leader would start over).
                    self.copy = Some(state);
                    self.next_scan_ns = ep.now_ns();
                    return Ok(());
                }
            }
            // What we owe the queues first (Scythe's tickets not served yet, paid between our
            // transactions): a pass keeps us from them for long, and every queue we hold a
            // ticket in would wait behind it meanwhile. Not all paid by a quarter scan: copy
            // at a later scan (after our next transaction, which pays them as it starts; or,
            // once we are done, after `retire` paid them).
            let deadline = ep.now_ns() + self.period_ns() / 4;
            match self
                .protocol
                .release_owed(ep, &self.map, me, deadline)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    self.copy = Some(state);
                    self.next_scan_ns = ep.now_ns();
                    return Ok(());
                }
                Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                    self.suspect = true;
                    return self.give_back(ep, mine).await;
                }
                Err(e) => return Err(e),
            }
            let only = (state.passes > 0).then(|| std::mem::take(&mut state.left));
            // Copied while the schedule holds every install, a slice is as long as the others
            // wait: a few rounds, then a transaction of ours (theirs go on), then the next.
            let slice = failover::CopySlice {
                from: state.resume,
                chunks: (slices && only.is_none()).then_some(COPY_SLICE_CHUNKS),
            };
            let pass = failover::copy_to_joiners(
                ep,
                &self.map,
                owner,
                only.as_deref(),
                self.copy_rules,
                slice,
            )
            .await;
            let pass = match pass {
                Ok(p) => p,
                Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                    self.suspect = true;
                    return self.give_back(ep, mine).await;
                }
                Err(e) => return Err(e),
            };
            state.copied += pass.copied;
            if only.is_none() {
                // The first pass, perhaps a slice of it: what it found locked adds up.
                state.left.extend(pass.left);
            } else {
                state.left = pass.left;
            }
            state.resume = pass.resume;
            if state.resume.is_some() {
                // Keeping the leader word (the rest is known to us alone), we scan again
                // right after our next transaction and copy the next slice.
                self.copy = Some(state);
                self.next_scan_ns = ep.now_ns();
                return Ok(());
            }
            state.passes += 1;
            if state.left.is_empty() {
                break;
            }
            if slices {
                // Not waiting here while the schedule is held: the next pass after our next
                // transaction.
                self.copy = Some(state);
                self.next_scan_ns = ep.now_ns();
                return Ok(());
            }
            // What is locked now is soon released (or its dead holder recovered).
            ep.sleep(self.period_ns() / 16).await;
            let m = self.read(ep).await?;
            let me = ep.id().index as usize;
            let dead = m
                .members
                .iter()
                .enumerate()
                .any(|(i, x)| i != me && x.dead(m.posted_ns));
            if dead || m.view != view || retry >= MAX_COPY_RETRIES {
                self.copy = Some(state);
                return self.give_back(ep, mine).await;
            }
        }
        let next = view.all_joined().expect("joining");
        let ours = match self.change_view(ep, view, next).await? {
            Write::Done => true,
            Write::Lost => false,
            // Only the leader makes this word (the joining view with its nodes rejoined; a
            // probe's write from the joining view makes another): ours if committed, or if
            // the committed view is a later one where the nodes are rejoined (nobody else
            // makes them so).
            Write::Unknown => {
                let copies = self.map.control_set();
                let w = read_word(ep, copies, VIEW_OFF, view_tag, &mut self.control).await?;
                let now = View::parse(w);
                w == next.word()
                    || (now.number > next.number
                        && view.joining_nodes().all(|n| now.is_rejoined(n)))
            }
        };
        if ours {
            let e = JoinEvent {
                joining: view,
                joined: next,
                by: ep.id().index,
                copy_started_ns: state.started_ns,
                copy_finished_ns: ep.now_ns(),
                copied: state.copied,
                passes: state.passes,
            };
            if let Some(sink) = &mut self.join_sink {
                sink(&e);
            }
            self.joins.push(e);
        }
        self.give_back(ep, mine).await
    }

    /// This coordinator bootstrapped into a changed view that it has not acknowledged (it
    /// started during a failover, or changed the view itself to bootstrap past a node found
    /// down): it adopts it like the others, waiting until it is active before it uses a
    /// promoted primary.
    fn unacknowledged(&self, ep: &Endpoint, m: &Members) -> bool {
        let me = ep.id().index as usize;
        m.view.number > 0
            && m.members
                .get(me)
                .is_some_and(|x| x.ack != u64::from(m.view.number))
    }

    /// If a transaction failed on a memory node: asks every live one, and if some are down,
    /// changes the view to one without them (a CAS of the view word: if another coordinator
    /// changed it first, its view is the one adopted). True if the view may have changed.
    async fn probe(&mut self, ep: &mut Endpoint, view: View) -> Result<bool, FabricError> {
        if !std::mem::take(&mut self.suspect) {
            return Ok(false);
        }
        let down = failover::probe(ep, &self.map).await?;
        if down.is_empty() || view != self.map.view() {
            return Ok(view != self.map.view());
        }
        let Some(next) = view.without(&down) else {
            return Ok(false);
        };
        if next.control_chain(self.map.control_replicas()).is_empty() {
            // Every member of the control chain down: the pool's control words are lost
            // (with one member, node 0's loss), and no view can say so.
            return Ok(false);
        }
        // If another coordinator changed it first, its view is the one adopted.
        self.change_view(ep, view, next).await?;
        Ok(true)
    }

    /// Adopts `view`: lets this coordinator's ops under the old view land, acknowledges the
    /// view, and waits until it is active: every other coordinator has acknowledged it (or
    /// was recovered, or left) and the promoted primaries are repaired. Until then nobody
    /// uses a promoted primary, so no op posted under an older view (a backup's WRITE from a
    /// commit there) lands on a primary that a transaction of the new view has read or
    /// locked. Returns the last membership READ: of the active view, or of a newer one.
    async fn adopt(&mut self, ep: &mut Endpoint, view: View) -> Result<Members, FabricError> {
        let me = ep.id().index;
        let adopted_ns = ep.now_ns();
        // Our ops posted under the old view (the last release, detached) land within an op's
        // flight, which the lease guard bounds: after it none of them is left in flight.
        let _ = ep.wait_background().await;
        ep.sleep(self.cfg.guard_ns).await;
        // A node that joins in this view is a replacement: connect to it as it is now (our
        // old connection broke with the node it replaces).
        let old = self.map.view();
        for n in view.joining_nodes().filter(|&n| !old.is_joining(n)) {
            ep.reconnect(n);
        }
        self.map = Rc::new(self.map.in_view(view));
        let copies = self.map.control_set();
        write_copies(ep, copies, ACK_OFF + 8 * u64::from(me), view.number.into()).await?;
        let mut repaired = 0;
        loop {
            let m = self.read(ep).await?;
            if m.view != view {
                return Ok(m);
            }
            let agreed = m
                .members
                .iter()
                .enumerate()
                .all(|(i, x)| i as u32 == me || x.agrees(view, m.posted_ns));
            if agreed && m.repaired.number == view.number {
                let e = ViewEvent {
                    view,
                    coordinator: me,
                    adopted_ns,
                    active_ns: ep.now_ns(),
                    repaired,
                };
                if let Some(sink) = &mut self.view_sink {
                    sink(&e);
                }
                self.views.push(e);
                return Ok(m);
            }
            if agreed {
                repaired += self.repair(ep, m, view).await?;
                // A repair that failed on another memory node (a second failure during the
                // view change) is retried only in a view without it: probe now, or the
                // repair fails on the same node forever.
                self.probe(ep, view).await?;
                continue;
            }
            // Somebody works in an older view still, or died in one: once every live one
            // agrees (nothing of an older view in flight but the dead's, which landed before
            // their leases expired), recover the dead (they agree once recovered); look again
            // a little later. (Recovery judges a promoted primary's records by what is on
            // them, and a live commit of an older view could still be writing there.)
            let live_behind = m.members.iter().enumerate().any(|(i, x)| {
                i as u32 != me && !x.agrees(view, m.posted_ns) && !x.dead(m.posted_ns)
            });
            if !live_behind {
                self.recover_dead(ep, m).await?;
            }
            // What we hold beside lock words and owe to queues (Scythe's tickets, paid
            // between transactions, which we start no more until the view is active): the
            // dead's may queue behind it, and the view waits for them to be recovered.
            // Ours only, between transactions, our last release landed (the guard above).
            let now = ep.now_ns();
            match self.protocol.release_owed(ep, &self.map, me, now).await {
                Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                    self.suspect = true
                }
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            if self.probe(ep, view).await? {
                continue;
            }
            ep.sleep(self.period_ns() / 4).await;
        }
    }

    /// Every coordinator works in `view` (or was recovered, or left): nothing of an older
    /// view is in flight. The leader repairs the promoted primaries and marks the view
    /// repaired. Returns the tables it repaired (0 if another leader did it).
    async fn repair(
        &mut self,
        ep: &mut Endpoint,
        m: Members,
        view: View,
    ) -> Result<u32, FabricError> {
        let Some(mine) = self.lead(ep, &m).await? else {
            ep.sleep(self.period_ns() / 4).await;
            return Ok(0);
        };
        let m = self.read(ep).await?;
        let mut tables = 0;
        if m.view == view && m.repaired.number != view.number {
            // Only what changed since the view repaired last (every promoted table after a
            // gap of views): a rejoin's two later views promote nothing new.
            let since = Some(m.repaired);
            match failover::repair_promoted(ep, &self.map, self.protocol, since).await {
                Ok(n) => tables = n,
                Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                    self.suspect = true;
                    self.give_back(ep, mine).await?;
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
            // Flushed as the view word (`change_view`); from the view repaired last, so the
            // tag may rise by more than one: the leader alone writes the word.
            let word = control::Cas {
                off: REPAIRED_OFF,
                expect: m.repaired.word(),
                new: view.word(),
            };
            let opts = Opts {
                flush: true,
                one_writer: true,
            };
            let mut chain = chain_of(ep, self.map.control_set())?;
            control::cas_many(ep, &mut chain, &[word], view_tag, opts, &mut self.control)
                .await
                .map_err(fabric)?;
        }
        self.give_back(ep, mine).await?;
        Ok(tables)
    }

    /// Takes the leader word: ours from a free word, or from a leader that died with it (its
    /// lease expired before our READ left: by the argument above it does nothing more). Our
    /// leader word, or `None` if a live leader holds it (or another took it first).
    async fn lead(&mut self, ep: &mut Endpoint, m: &Members) -> Result<Option<u64>, FabricError> {
        let mine = ep.id().index as u16 + 1;
        let from = LeaderWord::parse(m.leader);
        if from.owner != 0 && from.owner != mine {
            let expired = m
                .members
                .get(usize::from(from.owner) - 1)
                .is_none_or(|x| m.posted_ns >= x.expiry_ns);
            if !expired {
                return Ok(None); // a live leader is on it
            }
        }
        let new = from.then(mine).word();
        let mut chain = chain_of(ep, self.map.control_set())?;
        let counts = &mut self.control;
        let out = control::cas(
            ep,
            &mut chain,
            LEADER_OFF,
            m.leader,
            new,
            LeaderWord::tag,
            counts,
        );
        let ours = match out.await.map_err(fabric)? {
            Write::Done => true,
            Write::Lost => false,
            // A later word than ours stands past the head. While we live nobody writes from
            // ours (nobody takes a live leader's word), so ours did not commit: the committed
            // word, read to make sure, is not ours.
            Write::Unknown => {
                let copies = self.map.control_set();
                read_word(ep, copies, LEADER_OFF, LeaderWord::tag, counts).await? == new
            }
        };
        Ok(ours.then_some(new))
    }

    fn report(&mut self, e: RecoveryEvent) {
        if let Some(sink) = &mut self.sink {
            sink(&e);
        }
        self.events.push(e);
    }

    /// Gives our leader word `mine` back (to owner 0). Whatever the outcome: lost or
    /// overtaken, another took it from us (we were taken for dead).
    async fn give_back(&mut self, ep: &mut Endpoint, mine: u64) -> Result<(), FabricError> {
        if std::mem::take(&mut self.undone_for_copy) {
            // Holding no copy lock any more (the leader word goes after its pass).
            ep.lease_done();
        }
        let free = LeaderWord::parse(mine).then(0).word();
        let mut chain = chain_of(ep, self.map.control_set())?;
        let counts = &mut self.control;
        control::cas(
            ep,
            &mut chain,
            LEADER_OFF,
            mine,
            free,
            LeaderWord::tag,
            counts,
        )
        .await
        .map_err(fabric)?;
        Ok(())
    }

    /// Finds the dead coordinators in `m` and, if it becomes the leader, recovers them in
    /// this coordinator's view.
    async fn recover_dead(&mut self, ep: &mut Endpoint, m: Members) -> Result<Scan, FabricError> {
        let me = ep.id().index;
        let others = m
            .members
            .iter()
            .enumerate()
            .filter(|&(i, _)| i as u32 != me);
        let mut scan = Scan {
            unsettled: 0,
            next_expiry_ns: u64::MAX,
        };
        let mut dead = Vec::new();
        for (i, x) in others {
            if x.settled() {
                continue;
            }
            scan.unsettled += 1;
            scan.next_expiry_ns = scan.next_expiry_ns.min(x.expiry_ns);
            if x.dead(m.posted_ns) {
                dead.push(i as u32);
            }
        }
        if dead.is_empty() {
            return Ok(scan);
        }
        let Some(mine) = self.lead(ep, &m).await? else {
            return Ok(scan);
        };
        // Read again under the leader word: the first READ may predate a leader that
        // recovered (and marked) some of them and gave the word back since. Only a leader
        // marks a recovered word, so what this READ shows stays true while we lead. (It
        // may show a newer view: then we recover nobody, adopt it first, and come back.)
        let (first_dead, first_ns) = (dead, m.posted_ns);
        let m = self.read(ep).await?;
        let dead: Vec<u32> = (0..m.members.len() as u32)
            .filter(|&i| i != me && m.members[i as usize].dead(m.posted_ns))
            .collect();
        scan.unsettled = m
            .members
            .iter()
            .enumerate()
            .filter(|&(i, x)| i as u32 != me && !x.settled())
            .count() as u32;
        if dead.is_empty() || m.view != self.map.view() {
            self.give_back(ep, mine).await?;
            return Ok(scan);
        }
        // Every dead coordinator at once: their lock journals (or one scan of the tables)
        // release all their locks.
        let started_ns = ep.lease_now_ns();
        let map = self.map.clone();
        let in_views: Vec<(u32, bool)> = dead
            .iter()
            .map(|&i| (i, m.members[i as usize].ack < u64::from(map.view().number)))
            .collect();
        // What must wait for its turn (Scythe's tickets behind others) waits a scan period at
        // most: it may wait for a dead coordinator not yet found, which the next scan finds.
        let deadline = ep.now_ns().saturating_add(self.period_ns());
        let (mut early, mut released) = (Vec::new(), Vec::new());
        let r = recover_within(
            ep,
            &map,
            self.protocol,
            &in_views,
            deadline,
            &mut early,
            &mut released,
        )
        .await;
        // What the run is told of dead coordinator `i`'s recovery.
        let event = |i: u32, outcome, locks_released, finished_ns| {
            let x = m.members[i as usize];
            RecoveryEvent {
                coordinator: i,
                incarnation: x.incarnation,
                by: me,
                expired_ns: x.expiry_ns,
                noticed_ns: if first_dead.contains(&i) {
                    first_ns
                } else {
                    m.posted_ns
                },
                started_ns,
                finished_ns,
                outcome,
                locks_released,
            }
        };
        let settled = match r {
            Ok(s) => s,
            // A memory node failed under us: give the word back, probe and change the view,
            // and recover them again in it (recovery is idempotent). What was settled is
            // reported now: those entries may be closed on every live node already, and
            // the next recovery finds nothing pending (a roll forward reported by nobody
            // would be a commit the run never counts), with the locks it released (the next
            // recovery finds them free). Not marked recovered.
            Err(FabricError::NodeDown(n)) if !self.map.holds_control_alone(n) => {
                let finished_ns = ep.lease_now_ns();
                let outcomes = early
                    .into_iter()
                    .chain(std::iter::repeat(Recovered::Nothing));
                for ((&i, outcome), &locks) in dead.iter().zip(outcomes).zip(&released) {
                    if outcome != Recovered::Nothing || locks > 0 {
                        self.report(event(i, outcome, locks, finished_ns));
                    }
                }
                self.suspect = true;
                self.give_back(ep, mine).await?;
                return Ok(scan);
            }
            Err(e) => return Err(e),
        };
        let finished_ns = ep.lease_now_ns();
        // Those left waiting are not marked: recovered again at a later scan (idempotent),
        // each reported as soon as settled all the same (a roll forward joins the history).
        let done: Vec<u32> = dead
            .iter()
            .zip(&settled)
            .filter(|(_, s)| s.2)
            .map(|(&i, _)| i)
            .collect();
        for (&i, (outcome, locks_released, _)) in dead.iter().zip(settled) {
            self.report(event(i, outcome, locks_released, finished_ns));
        }
        let copies = self.map.control_set();
        // Only a leader writes them, and we are the leader: a mark lost (to a dead leader's,
        // carried on) or unknown leaves its coordinator to be recovered again at a later scan
        // (idempotent), which marks it then.
        mark_recovered(ep, copies, &m, &done, &mut self.control).await?;
        scan.unsettled -= done.len() as u32;
        self.give_back(ep, mine).await?;
        Ok(scan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_checked_against_the_fabric() {
        let ok = LeaseConfig {
            lease_ns: 1_000_000,
            guard_ns: 100_000,
        };
        assert!(ok.check(90_000, 50_000).is_ok());
        let e = ok.check(200_000, 0).unwrap_err();
        assert!(e.contains("flight"), "{e}");
        let e = ok.check(50_000, 700_000).unwrap_err();
        assert!(e.contains("stall"), "{e}");
        let d = LeaseConfig::for_fabric(30_000, 50_000);
        assert!(d.check(30_000, 50_000).is_ok(), "{d:?}");
    }

    #[test]
    fn a_member_is_dead_only_unsettled_and_expired() {
        let m = Member {
            expiry_ns: 100,
            done: false,
            incarnation: 2,
            recovered: 1,
            recovered_word: 1,
            ack: 0,
        };
        assert!(!m.dead(99));
        assert!(m.dead(100));
        assert!(!Member { done: true, ..m }.dead(200));
        assert!(!Member { recovered: 2, ..m }.dead(200));
        assert!(!Member::default().dead(200));
        let w = Lease::word(123_456, true, 7);
        assert_eq!(Lease::parse(w), (123_456, true, 7));
        assert_eq!(Lease::next_incarnation(0x7fff), 1);
    }

    #[test]
    fn a_member_agrees_to_a_view_once_it_cannot_act_in_an_older_one() {
        let v1 = View::default().without(&[1]).unwrap();
        let live = Member {
            expiry_ns: 100,
            done: false,
            incarnation: 1,
            recovered: 0,
            recovered_word: 0,
            ack: 0,
        };
        assert!(!live.agrees(v1, 50));
        assert!(!live.agrees(v1, 200), "dead but not yet recovered");
        assert!(Member { ack: 1, ..live }.agrees(v1, 50));
        assert!(Member {
            ack: ACK_GONE,
            ..live
        }
        .agrees(v1, 50));
        assert!(Member {
            recovered: 1,
            ..live
        }
        .agrees(v1, 50));
        assert!(Member::default().agrees(v1, 50));
        let done = Member { done: true, ..live };
        assert!(
            !done.agrees(v1, 50),
            "done, but may still be recovering someone"
        );
        assert!(
            done.agrees(v1, 100),
            "done and expired: it posts nothing more"
        );
    }
}
