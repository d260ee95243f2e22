//! Leases, membership and the online recovery service (FaRM's leases; FORD section 4.8 and
//! Motor section 4.2 detect a dead coordinator "with leases"; issue #23).
//!
//! **The membership area** is memory node 0's reserved page (`dtxn_store::layout`): a leader
//! word (CAS only), then one lease word per coordinator, WRITten by that coordinator alone
//! (nobody CASes it), then one recovered word per coordinator (CAS only, on lines of their
//! own). A lease word holds an expiry on the run's clock, a done bit and an incarnation
//! ([`dtxn_fabric::Lease::word`]); the recovered word the last incarnation recovery settled.
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
//! its recovered word to the dead incarnation, and gives the leader word back. A leader that
//! dies half-way is recovered in turn by the next one, which runs the half-done recovery
//! again: `recover` is idempotent (the entry's status is written after its settling, the locks
//! released after the status, each step a function of what the replicas hold).
//!
//! **The liveness phase.** A coordinator done with its transactions marks its lease done and
//! keeps serving ([`Service::drain`]) until every other coordinator is done or recovered: a
//! coordinator that crashed late is recovered before the run ends.

use crate::recovery::{recover_all, Recovered};
use crate::registry::Protocol;
use dtxn_fabric::{Endpoint, FabricError, Lease};
use dtxn_store::layout::{LEADER_OFF, LEASE_OFF, MAX_MEMBERS, RECOVERED_OFF};
use dtxn_store::PoolMap;

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
    /// The last incarnation recovery settled.
    pub recovered: u16,
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
}

/// The membership area as one READ saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// When the READ was posted.
    pub posted_ns: u64,
    /// 0, or the lock-owner id of the recovery leader.
    pub leader: u64,
    pub members: Vec<Member>,
}

/// Reads the leader word and the first `n` coordinators' records (one round trip).
pub async fn read_members(ep: &mut Endpoint, n: u32) -> Result<Members, FabricError> {
    let n = n.min(MAX_MEMBERS) as usize;
    let posted_ns = ep.lease_now_ns();
    let leader = ep.read(0, LEADER_OFF, 8);
    let leases = ep.read(0, LEASE_OFF, 8 * n.max(1));
    let recovered = ep.read(0, RECOVERED_OFF, 8 * n.max(1));
    ep.post().await?;
    let members = (0..n)
        .map(|i| {
            let (expiry_ns, done, incarnation) =
                Lease::parse_near(ep.word(leases, 8 * i), posted_ns);
            Member {
                expiry_ns,
                done,
                incarnation,
                recovered: ep.word(recovered, 8 * i) as u16,
            }
        })
        .collect();
    Ok(Members {
        posted_ns,
        leader: ep.word(leader, 0),
        members,
    })
}

/// The lease of coordinator `index`'s incarnation `incarnation`.
pub fn lease_of(index: u32, cfg: LeaseConfig, incarnation: u16) -> Lease {
    Lease {
        node: 0,
        addr: LEASE_OFF + 8 * u64::from(index),
        lease_ns: cfg.lease_ns,
        guard_ns: cfg.guard_ns,
        incarnation,
    }
}

/// Coordinator `ep` joins: takes its slot's next incarnation and holds its lease (renewed
/// once, awaited, before this returns). Its slot's previous incarnation must be settled.
pub async fn join(ep: &mut Endpoint, cfg: LeaseConfig) -> Result<u16, FabricError> {
    let index = ep.id().index;
    if index >= MAX_MEMBERS {
        return Err(FabricError::Setup(format!(
            "coordinator {index}: the membership area holds {MAX_MEMBERS} coordinators"
        )));
    }
    let m = read_members(ep, index + 1).await?.members[index as usize];
    if !m.settled() {
        return Err(FabricError::Setup(format!(
            "coordinator {index}: its previous incarnation {} was never recovered",
            m.incarnation
        )));
    }
    let incarnation = Lease::next_incarnation(m.incarnation.max(m.recovered));
    ep.hold_lease(lease_of(index, cfg, incarnation));
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

/// One coordinator's share of the recovery service.
pub struct Service {
    protocol: Protocol,
    cfg: LeaseConfig,
    /// Coordinators in the run (the membership slots to scan).
    members: u32,
    next_scan_ns: u64,
    /// What this coordinator recovered, in order.
    pub events: Vec<RecoveryEvent>,
    /// Told of every recovery as soon as it is settled, before it is marked: a leader that
    /// crashes later has reported it all the same (the next leader may report it again).
    sink: Option<Sink>,
}

/// Where a [`Service`] reports its recoveries as they happen.
pub type Sink = Box<dyn FnMut(&RecoveryEvent)>;

/// What one scan found.
struct Scan {
    /// Other coordinators neither done nor recovered (alive, or dead and not yet recovered).
    unsettled: u32,
    /// The earliest expiry among them.
    next_expiry_ns: u64,
}

impl Service {
    pub fn new(protocol: Protocol, cfg: LeaseConfig, members: u32) -> Service {
        Service {
            protocol,
            cfg,
            members,
            next_scan_ns: 0,
            events: Vec::new(),
            sink: None,
        }
    }

    /// Reports every recovery to `sink` too, as soon as it is settled.
    pub fn with_sink(mut self, sink: Sink) -> Service {
        self.sink = Some(sink);
        self
    }

    fn period_ns(&self) -> u64 {
        (self.cfg.lease_ns / 4).max(1)
    }

    /// Between two transactions: scans if a scan is due, and recovers whom it finds dead
    /// if it becomes the leader.
    pub async fn tick(&mut self, ep: &mut Endpoint, map: &PoolMap) -> Result<(), FabricError> {
        if ep.now_ns() >= self.next_scan_ns {
            self.scan(ep, map).await?;
        }
        Ok(())
    }

    /// The liveness phase: marks this coordinator done and serves until every other one is
    /// done or recovered.
    pub async fn drain(&mut self, ep: &mut Endpoint, map: &PoolMap) -> Result<(), FabricError> {
        ep.lease_done();
        ep.renew_lease().await?;
        loop {
            let s = self.scan(ep, map).await?;
            if s.unsettled == 0 {
                return Ok(());
            }
            // Until the next expiry, renewing our own lease on the way (a scan per period).
            // (An expiry already past is a dead coordinator a live leader is recovering.)
            let now = ep.lease_now_ns();
            let next = Some(s.next_expiry_ns).filter(|&e| e > now);
            let wait = next.map_or(u64::MAX, |e| e - now).min(self.period_ns());
            ep.sleep(wait).await;
        }
    }

    async fn scan(&mut self, ep: &mut Endpoint, map: &PoolMap) -> Result<Scan, FabricError> {
        let me = ep.id().index;
        self.next_scan_ns = ep.now_ns() + self.period_ns();
        let m = read_members(ep, self.members).await?;
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
        // The leader word: ours from 0, or from a leader that died with it (its lease
        // expired before our READ left: by the argument above it does nothing more).
        let mine = u64::from(me) + 1;
        let from = match m.leader {
            0 => 0,
            l if l == mine => l,
            l => {
                let expired = m
                    .members
                    .get(l as usize - 1)
                    .is_none_or(|x| m.posted_ns >= x.expiry_ns);
                if !expired {
                    return Ok(scan); // a live leader is on it
                }
                l
            }
        };
        let c = ep.cas(0, LEADER_OFF, from, mine);
        ep.post().await?;
        if !ep.cas_ok(c) {
            return Ok(scan);
        }
        // Read again under the leader word: the first READ may predate a leader that
        // recovered (and marked) some of them and gave the word back since. Only a leader
        // marks a recovered word, so what this READ shows stays true while we lead.
        let (first_dead, first_ns) = (dead, m.posted_ns);
        let m = read_members(ep, self.members).await?;
        let dead: Vec<u32> = (0..m.members.len() as u32)
            .filter(|&i| i != me && m.members[i as usize].dead(m.posted_ns))
            .collect();
        scan.unsettled = m
            .members
            .iter()
            .enumerate()
            .filter(|&(i, x)| i as u32 != me && !x.settled())
            .count() as u32;
        if dead.is_empty() {
            ep.cas(0, LEADER_OFF, mine, 0);
            ep.post().await?;
            return Ok(scan);
        }
        // Every dead coordinator at once: one scan of the tables releases all their locks.
        let started_ns = ep.lease_now_ns();
        let settled = recover_all(ep, map, self.protocol, &dead).await?;
        let finished_ns = ep.lease_now_ns();
        for (&i, (outcome, locks_released)) in dead.iter().zip(settled) {
            let x = m.members[i as usize];
            let noticed_ns = if first_dead.contains(&i) {
                first_ns
            } else {
                m.posted_ns
            };
            let e = RecoveryEvent {
                coordinator: i,
                incarnation: x.incarnation,
                by: me,
                expired_ns: x.expiry_ns,
                noticed_ns,
                started_ns,
                finished_ns,
                outcome,
                locks_released,
            };
            if let Some(sink) = &mut self.sink {
                sink(&e);
            }
            self.events.push(e);
        }
        let marks: Vec<_> = dead
            .iter()
            .map(|&i| {
                let x = m.members[i as usize];
                let at = RECOVERED_OFF + 8 * u64::from(i);
                ep.cas(0, at, u64::from(x.recovered), u64::from(x.incarnation))
            })
            .collect();
        ep.post().await?;
        // Only a leader writes them, and we are the leader: a failed CAS is a bug.
        debug_assert!(
            marks.iter().all(|&c| ep.cas_ok(c)),
            "a recovered word moved"
        );
        scan.unsettled -= dead.len() as u32;
        ep.cas(0, LEADER_OFF, mine, 0);
        ep.post().await?;
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
}
