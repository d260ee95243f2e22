//! RCC's CALVIN (`--protocol calvin`; Thomson et al., SIGMOD'12, as RCC re-implemented it,
//! section 3.6 of the RCC digest): transactions are grouped into **epochs**; every coordinator
//! is a sequencer that dispatches its transaction's key set into the epoch's buffers; once an
//! epoch closes every coordinator knows the same global order, (epoch, coordinator index),
//! and a transaction runs after every earlier one it conflicts with, so concurrency control
//! never aborts it (deterministic scheduling: no locks, no deadlock, no validation).
//!
//! Fitting CALVIN to an interactive API: CALVIN needs the read/write set before execution. Here
//! **the first fetch (or insert) declares it**: every key a transaction names there is in its
//! batch; in a read-write transaction every declared key is scheduled exclusively (a key read
//! first may be fetched again for update), in a read-only one shared. A later fetch or insert
//! of a key not declared is CALVIN's **OLLP** (optimistic lock location prediction), done
//! within the attempt: the transaction gives up its place (publishes done: it has written
//! nothing yet, its writes are buffered), dispatches its whole key set again in its
//! coordinator's next epoch, and once scheduled there validates that everything it read is
//! unchanged (else it aborts, `validation`: the prediction was stale). TATP's transactions
//! that find a subscriber through its secondary index take two epochs so; TPC-C's NewOrder
//! (items, then the order's keys) takes several.
//!
//! Phases, with their verbs and critical-path round trips (addresses cached):
//!
//! 1. **Dispatch + epoch synchronization** (1 RT, plus a round per poll). The key set
//!    (table, key, exclusive) is WRITTEN one-sided into the coordinator's own batch buffer
//!    for the epoch (two buffers, by the epoch's parity: a coordinator can be at most one
//!    epoch ahead of any reader), then its **epoch word** is CASed to the epoch; in the same
//!    doorbell batch the epoch words of the others (and the batches of those ordered before
//!    it) are READ. The CAS executes before the READs on the QP (G6), which is what lets a
//!    coordinator join a running system (see [`join`]). An epoch is closed for us once every
//!    member's epoch word has reached it. The first to see that CASes a **closed-epoch
//!    word** forward to e (from what it last read there); the others meanwhile poll that one
//!    word, with back-off (the coroutine yields), not every laggard's (every 8th poll reads
//!    the laggards anyway: a closer's CAS fails if the word moved since). A batch carries its
//!    epoch in every cache line (a READ is atomic only per line, and the batch's WRITE may be
//!    applied after the CAS): a torn batch is read again.
//! 2. **Deterministic scheduling** (local, plus a round per poll of a conflicting
//!    predecessor): each coordinator compares its key set with the batches ordered before it
//!    in the epoch, and waits until each conflicting one has published **done** (a word it
//!    WRITES when its transaction ends, committed or not). Transactions of earlier epochs are
//!    all over: a coordinator runs one transaction at a time, and dispatches the next epoch
//!    only after its transaction of this one ended.
//! 3. **Reads** (1 RT per batch of reads): plain READs; nothing can change under them.
//! 4. **Install** (1 RT): every replica of every written record, its lock word free, in one
//!    batch (inserts: their chains' and slots' locks given back in the same batch, after the
//!    records on each QP, G4). Then **done** is WRITTEN (detached): its successors may go.
//!
//! So, alone (nobody to wait for), a read-write transaction costs 3 RTs (dispatch, read,
//! install) and a read-only one 2; with others, the epoch synchronization adds a round per
//! poll, and it is what bounds throughput (RCC's finding): every coordinator runs one
//! transaction per epoch, and an epoch closes only when its slowest member has dispatched.
//!
//! **Value forwarding has no place here.** RCC's CALVIN is shared-nothing: a record is read
//! by the node that owns it, which forwards it to the transaction's other active
//! participants. dtxn's memory nodes are passive and every coordinator reaches every record
//! with one-sided READs, so the coordinator that runs a transaction reads its records itself
//! once scheduled; the **done** word replaces the forwarding's notification (its value is
//! the memory itself, which the predecessor's install has updated before its done).
//!
//! Where the words live: the top half of each coordinator's log slice (a layout every compute
//! node knows: the slices are in the superblock); the undo log (inserts only) keeps the rest.
//! Per coordinator: a line with its epoch word (CAS only) and its done word (WRITE only), on
//! memory node 0 (every epoch word must be on one QP for the join's ordering; coordinator 0's
//! line holds the closed-epoch word too, CAS only), then two batch buffers (16 KB slices: 63
//! lines, 189 keys per batch), on memory node `index mod nodes`, which spreads the batches'
//! READs (the bulk of the bytes) over the memory nodes.
//!
//! Membership: a coordinator joins at its first transaction (CAS 0 -> JOINING, READ every
//! epoch word, then the closed-epoch word, and start past the newest of them) and leaves with
//! [`Calvin::retire`] (its words set to RETIRED, once the closed-epoch word holds the epochs
//! it closed): a run whose coordinators stop at different times does not stall the last
//! ones. A coordinator that never joined is no member; one that left closed epochs that a
//! joiner must not number its own with.
//!
//! **A crashed coordinator** (issue #23; under leases: `--faults compute=N` on `sim`,
//! `--leases` on real hosts). CALVIN proper replicates its input log and replays a dead
//! node's transactions; dtxn cannot (a transaction's logic lives in its coordinator), so the
//! dead coordinator's transaction is *finished* from what it logged, and the coordinator
//! *leaves* the epochs, online, by the leases' recovery service (`membership.rs`):
//!
//! 1. **The redo log.** Where coordinators can be recovered (`TxnConfig::lock_journal`, which
//!    the bench sets with `--faults` and `--leases`), the install is preceded, in its own
//!    batch, by one log entry ([`log_redo`]): every new record as the install writes it,
//!    tagged with the epoch it installs in, WRITTEN to the coordinator's log slice on every
//!    memory node the install writes, the install's way. WRITEs on one QP apply in post order
//!    (G4; as RPCs, one message per node served in order), and a crash leaves a prefix of each
//!    node's ops: a record changes on a node only after the whole entry is there. So if no
//!    node holds the entry whole, nothing was installed; if one does, the entry says all that
//!    is to be installed. (The inserts' undo log is not written then: nothing is ever undone.)
//! 2. **Settle** ([`settle_redo`], `Protocol::settle`): the dead coordinator's newest valid
//!    entry is *over* if its epoch word is past the entry's epoch or its done word has
//!    reached it (both move only after the install completed), and then left alone:
//!    successors may have written those records since. Otherwise it is **rolled forward**:
//!    every record to every replica. Nobody has touched them since the install began: the
//!    epoch's later transactions sharing a key wait for the done word, its earlier ones had
//!    finished before the dead one read, and no later epoch has closed (the dead one's epoch
//!    word is still the entry's). Finishing what the dead coordinator began is its own
//!    outcome: CALVIN is deterministic, the transaction had decided to commit before it logged,
//!    and an acknowledged commit (its install returned) is never undone. The decision reads the
//!    words and the entry, never the entry's status (a stale close sent as an RPC can land on
//!    a newer entry), so recovery settles a redo entry closed or not, as often as it runs.
//! 3. **Locks**: the shared release frees its inserts' slot and chain locks (by owner, with
//!    the scan: CALVIN keeps no lock journal, whose place its epoch area takes).
//! 4. **Leave** ([`leave_epochs`], `Protocol::release_held`): its done word WRITTEN and its
//!    epoch word CASed to RETIRED, as [`Calvin::retire`] does, after 2 and 3 were awaited.
//!    A live coordinator waiting on its done word, its epoch word or its batch then finds it
//!    done, or no member: every wait on it ends, and only once its transaction is settled.
//!    A joiner treats RETIRED as no member, and the epochs close without it from then on.
//!
//! Nothing of the dead coordinator lands after that: it posts nothing once its lease is past
//! `expiry - guard`, and recovery starts after a READ posted past the expiry (the lease
//! argument); a zombie that resumes is fenced (its posts refused), and only it or a recovery
//! leader ever changes its words. Meanwhile the live coordinators' waits end after a quarter
//! lease ([`wait_limit`]), so that they get back to their recovery service between attempts
//! (every one of them may be waiting on the dead one).
//!
//! Costs: without recovery in mind, none (the verbs and round trips of `tests/round_trips.rs`).
//! With it: per read-write transaction one WRITE of the entry per memory node its install
//! writes, in the install's batch (no round trip; the records' bytes once more per node),
//! and the entry's close, detached, as the undo log's; with `flush`, one round trip (the
//! entry flushed and awaited before the install). Recovery: one READ of the words and one
//! batch of WRITEs (plus a FLUSH per node) to roll forward, two round trips to leave.
//!
//! **Memory-node failover** (`Coordinator::set_failover`, where the membership service runs):
//! the batches go to node 0, which never fails over (a batch is written once, unreplicated:
//! spread over the nodes, a failed one took its coordinators' batches and every epoch with
//! it), and an install that fails on a node down is finished on the live replicas (the same
//! redo entry and record WRITEs again without it: the schedule decided the transaction
//! commits, its successors wait for its done word and must find its writes on whatever
//! replica they read, a promoted backup included). A transaction whose read fails on the
//! failed primary aborts (`replica-failure`, nothing written) and its coordinator's service
//! changes the view; the epochs go on through the view change (a coordinator waiting for
//! the view to be active holds its epoch back, and the others' waits on it end after a
//! quarter lease, so that they get to the view too). No re-replication (`rejoin=`): the
//! install takes no record lock, so the copy's slot locks would not keep it off.
//!
//! Limits: a declared set larger than a buffer aborts (`log-full`: bigger slices help), and so does a
//! redo entry larger than the slice's log half; inserts of different keys into one chain
//! still take the chain's lock (a physical conflict, which aborts the later one).

use crate::abort::{Abort, AbortReason};
use crate::config::TxnConfig;
use crate::coord::Core;
use crate::item::{Access, NewValue};
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::encode_new;
use crate::mechanisms::lock::{cold_rw, lock_round, Want};
use crate::mechanisms::rpc::{self, CasRead, Read, Via};
use crate::mechanisms::{absent, fetch, insert, release, table};
use crate::protocol::{Protocol, Row};
use crate::recovery::Recovered;
use crate::stage::{Stage, Stages};
use crate::tx::Tx;
use crate::txn::TxKind;
use dtxn_check::history;
use dtxn_fabric::{Endpoint, FabricError, NodeId, OpId};
use dtxn_store::log::HEAD_BYTES;
use dtxn_store::log::{encode_head, encode_item_as, set_tag, ItemKind, LogEntry, LogStatus};
use dtxn_store::PoolMap;
use dtxn_store::RecordFormat;

/// CALVIN: deterministic scheduling of epochs of dispatched key sets.
pub(crate) struct Calvin;

/// An epoch word: never joined.
const NOT_MEMBER: u64 = 0;
/// An epoch word: joining (its first epoch not yet chosen): every epoch waits for it.
const JOINING: u64 = u64::MAX - 1;
/// An epoch word and a done word: left for good.
const RETIRED: u64 = u64::MAX;

/// RCC's hybrid-code bits of CALVIN's dispatch (TxnBroadcastInput) and forwarding
/// (ValueForwarding): set, the stage runs one-sided.
const DISPATCH_BIT: u64 = 128;
const FORWARD_BIT: u64 = 256;

/// Keys per batch line.
const PER_LINE: usize = 3;
/// The smallest log slice: room for an undo log beside two buffers of 8 lines.
const MIN_SLICE: u64 = 2 * (64 + 2 * 8 * 64);

/// Lines per batch buffer in a pool whose log slices have `len` bytes: the area (a line of
/// words and two buffers) takes the top half of the slice, the undo log keeps the rest.
fn buf_lines(len: u64) -> usize {
    ((len / 2 - 64) / 2 / 64) as usize
}

fn area_bytes(len: u64) -> u64 {
    64 + 2 * 64 * buf_lines(len) as u64
}

/// How long a transaction waits for an epoch to close or a predecessor to finish before it
/// gives up (a crashed coordinator would otherwise stall it forever), and the longest
/// back-off between two polls.
pub(crate) const WAIT_LIMIT_NS: u64 = 50_000_000;
const MAX_BACKOFF_NS: u64 = 8_000;

/// How long a wait may last: [`WAIT_LIMIT_NS`], and under a lease a quarter of it at most
/// (the recovery service's scan period), so that a coordinator waiting on a dead one's
/// epoch word or done word gets back, between two attempts, to the service that recovers it
/// (every live coordinator may be waiting so).
fn wait_limit(ep: &Endpoint) -> u64 {
    match ep.lease() {
        Some((l, _)) => WAIT_LIMIT_NS.min(l.lease_ns / 4),
        None => WAIT_LIMIT_NS,
    }
}

/// A declared key: (table, key, exclusive).
type Key = (u32, u64, bool);

/// A transaction: its declared keys and the epoch it is scheduled in.
#[derive(Default)]
pub(crate) struct CalvinTxn {
    keys: Vec<Key>,
    epoch: Option<u64>,
}

/// Per coordinator: its membership, its epoch word, and the scheduler's vectors.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Coordinators (log slices) of the pool, and this one's index; 0 until it joined.
    members: u32,
    me: u32,
    /// Lines of every coordinator's batch buffers (the pool's log slices fix them).
    buf_lines: usize,
    /// Memory nodes, over which the batches are spread.
    nodes: u16,
    /// What this coordinator's epoch word holds (what its next CAS expects), and the epoch
    /// its last dispatch went to (the next goes to the one after).
    word: u64,
    epoch: u64,
    /// The newest epoch this coordinator knows closed (every member dispatched it): what
    /// the closed-epoch word must hold at least before it leaves ([`Calvin::retire`]).
    closed: u64,
    batch: Vec<u8>,
    pending: Vec<u32>,
    next: Vec<u32>,
    conflicts: Vec<u32>,
    reads: Vec<(u32, Read, Option<Read>)>,
}

impl Protocol for Calvin {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const OPTIONS: Option<&'static str> = Some("rcc");
    const COPY_IN_SLICES: bool = true;
    /// Node 0 holds its schedule (epoch, done and closed-epoch words, batches) alone.
    const ON_NODE0: bool = true;
    const RPC_FORMS: Stages = Stages::of(&Stage::COMMON);
    type Item = ();
    type Txn = CalvinTxn;
    type Scratch = Scratch;

    /// RCC's hybrid code, with CALVIN's own bits: dispatch (128) is the log stage here (the
    /// batch, the epoch word; an insert's undo log with them), forwarding (256) the release
    /// stage (the done word that replaces it; an insert's chain unlocks with it). Bits 4 and
    /// 8 (log, release) mean nothing to CALVIN, as RCC's CALVIN has no such stages.
    fn rpc(cfg: &TxnConfig) -> Stages {
        let code = u64::from(cfg.rcc.hybrid);
        let mut s = cfg
            .rcc
            .hybrid
            .rpc_stages()
            .and(Self::RPC_FORMS)
            .minus(Stages::of(&[Stage::Log, Stage::Release]));
        if code & DISPATCH_BIT == 0 {
            s = s.with(Stage::Log);
        }
        if code & FORWARD_BIT == 0 {
            s = s.with(Stage::Release);
        }
        s
    }

    /// Where coordinators can be recovered (`TxnConfig::lock_journal`: `--faults`,
    /// `--leases`), the install's redo log replaces the inserts' undo log.
    fn undo_logged(cfg: &TxnConfig) -> bool {
        !cfg.lock_journal
    }

    fn begin(tx: &mut Tx<'_, Self>) {
        tx.st.keys.clear();
        tx.st.epoch = None;
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        let rw = tx.kind == TxKind::ReadWrite;
        declare(tx, accesses.iter().map(|a| (a.table, a.key, rw))).await?;
        fetch::records(tx, accesses, Locking::Optimistic { hitchhike: false }).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        declare(tx, rows.iter().map(|&(t, k, _)| (t, k, true))).await?;
        insert::insert(tx, rows).await
    }

    /// The inserts' free slots (a physical claim: two keys of one chain may pick one slot).
    /// Records read for update take no lock: the schedule keeps everyone else off them.
    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        lock_round(tx, |it| {
            (it.new == NewValue::Insert && cold_rw(it)).then_some(Want {
                lock: true,
                header: true,
            })
        })
        .await
    }

    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        install(tx).await
    }

    fn release(tx: &mut Tx<'_, Self>) {
        close_log(tx, LogStatus::Committed);
        done(tx);
    }

    async fn abort(tx: &mut Tx<'_, Self>) {
        release::release_on_abort(tx).await;
        done(tx);
    }

    /// A dead coordinator's newest log entry: a redo log is finished ([`settle_redo`]); an
    /// undo log of inserts (a run without recovery in mind) is rolled back as FORD's.
    async fn settle(
        ep: &mut Endpoint,
        map: &PoolMap,
        owner: u64,
        e: &LogEntry,
    ) -> Result<Recovered, FabricError> {
        if is_redo(e) {
            return settle_redo(ep, map, owner, e).await;
        }
        crate::mechanisms::settle::settle(ep, map, owner, e, false).await
    }

    /// A redo entry is judged whatever its status says: see [`settle_redo`].
    fn judges_closed(e: &LogEntry) -> bool {
        is_redo(e)
    }

    /// The dead leave the epochs ([`leave_epochs`]), once their transactions are settled and
    /// their locks free.
    async fn release_held(
        ep: &mut Endpoint,
        map: &PoolMap,
        dead: &[u32],
        _deadline_ns: u64,
    ) -> Result<Vec<(bool, u32)>, FabricError> {
        leave_epochs(ep, map, dead).await
    }

    /// The copier holds the schedule: it is a member between its transactions, so no epoch
    /// past its last dispatched one can close without it; and every other member has
    /// dispatched past that epoch, so its transaction there has ended (a coordinator
    /// dispatches only once its last transaction ended, its install awaited). Nothing is
    /// installed until the copier dispatches again. A member still joining is not past it:
    /// it chose its first epoch from words it read earlier, which may be ours or older. With
    /// the copier no member, only a pool where nobody is one and every other coordinator is
    /// settled for good (`others_settled`: done, recovered, or never started) is held.
    async fn installs_held(
        ep: &mut Endpoint,
        map: &PoolMap,
        me: u32,
        members: u32,
        others_settled: bool,
    ) -> Result<bool, FabricError> {
        let reads: Vec<(u32, OpId)> = (0..members)
            .filter(|&k| map.log_slice(k).is_some())
            .map(|k| (k, ep.read(0, area(map, k), 8)))
            .collect();
        ep.post().await?;
        let words: Vec<(u32, u64)> = reads
            .iter()
            .map(|&(k, r)| (k, word(ep.bytes(r), 0)))
            .collect();
        Ok(schedule_held(&words, me, others_settled))
    }

    /// Leaves the epochs. First the closed-epoch word is made to hold every epoch we know
    /// closed: a joiner starts past that word and the member words it reads, and ours will
    /// read RETIRED, so an epoch we closed must be in the closed word by then, not in a
    /// detached CAS still under way (as RPCs nothing orders it before our leaving; and a
    /// joiner's epochs below a closed word's value would pass their barriers unsynchronized).
    async fn retire(c: &mut Core, s: &mut Self::Scratch) {
        if s.members == 0 || s.word == RETIRED {
            return;
        }
        let (via, poll) = (c.via(Stage::Log), c.via(Stage::Fetch));
        let closed_at = area(&c.map, 0) + 16;
        // Best effort, as the leaving below (a post refused: memory node 0 is down, which
        // takes the system with it, or our lease is over, and recovery leaves for us).
        if s.closed > 0 {
            let r = Read::post(&mut c.ep, poll, 0, closed_at, 8);
            let mut seen = match c.ep.post().await {
                Ok(()) => word(r.bytes(&c.ep), 0),
                Err(_) => s.closed,
            };
            // A CAS that moves the word from what we read makes any CAS of ours still under
            // way (expecting an older value) fail. One that fails found the word moved on,
            // and it moves only forward: this ends.
            while seen < s.closed {
                let cas = CasRead::post(&mut c.ep, via, 0, closed_at, (seen, s.closed), None);
                if c.ep.post().await.is_err() || cas.swapped(&c.ep) {
                    break;
                }
                match cas.old(&c.ep) {
                    Some(w) => seen = w,
                    None => break,
                }
            }
        }
        let base = area(&c.map, s.me);
        CasRead::post(&mut c.ep, via, 0, base, (s.word, RETIRED), None);
        let release = c.via(Stage::Release);
        rpc::write(&mut c.ep, release, 0, base + 8, &RETIRED.to_le_bytes());
        // Best effort: a memory node 0 that is down takes the whole system with it.
        let _ = c.ep.post().await;
        s.word = RETIRED;
        // Should it run a transaction again, it joins again (from RETIRED, as from 0).
        s.members = 0;
    }
}

/// [`Calvin::installs_held`] on the epoch words read, `(coordinator, word)`: `me` a member
/// and every other past its epoch or no member; or `me` no member, nobody else one either,
/// and every other coordinator settled for good.
fn schedule_held(words: &[(u32, u64)], me: u32, others_settled: bool) -> bool {
    let idle = |w: u64| w == NOT_MEMBER || w == RETIRED;
    let mine = words.iter().find(|&&(k, _)| k == me).map(|&(_, w)| w);
    let mut others = words.iter().filter(|&&(k, _)| k != me).map(|&(_, w)| w);
    match mine {
        Some(m) if !idle(m) && m != JOINING => others.all(|w| idle(w) || (w != JOINING && w > m)),
        Some(m) if m == JOINING => false,
        _ => others_settled && others.all(idle),
    }
}

/// Where coordinator `k`'s words and batches are, on memory node 0.
fn area(map: &PoolMap, k: u32) -> u64 {
    let (off, len) = map.log_slice(k).expect("a member has a slice");
    off + len - area_bytes(len)
}

/// Where coordinator `k`'s batches are: spread over the memory nodes (its words are on node 0,
/// where every epoch word must be for the join's ordering, G6; its batches need no order
/// with them: their lines carry the epoch). With memory-node failover on, on node 0 too: a
/// batch is written once, unreplicated, and node 0 is the one node that never fails over
/// (it holds the view); a failed node would take its coordinators' batches, and every
/// epoch, with it.
fn batch_node(nodes: u16, k: u32, failover: bool) -> NodeId {
    if failover {
        return 0;
    }
    (k % u32::from(nodes.max(1))) as NodeId
}

/// The buffer of epoch `e` in an area whose buffers have `lines` lines.
fn buffer(base: u64, lines: usize, e: u64) -> u64 {
    base + 64 + (e % 2) * 64 * lines as u64
}

/// Declares `keys`: the first declaration dispatches the transaction into an epoch and waits
/// for its turn; a later one with a key not declared yet (or now wanted exclusively) moves it
/// to the next epoch (OLLP), where what it read is validated.
async fn declare(tx: &mut Tx<'_, Calvin>, keys: impl Iterator<Item = Key>) -> Result<(), Abort> {
    let mut grew = false;
    for (t, k, x) in keys {
        match tx.st.keys.iter_mut().find(|d| d.0 == t && d.1 == k) {
            Some(d) if d.2 || !x => {}
            Some(d) => {
                d.2 = true;
                grew = true;
            }
            None => {
                tx.st.keys.push((t, k, x));
                grew = true;
            }
        }
    }
    let Some(epoch) = tx.st.epoch else {
        return schedule(tx).await;
    };
    if !grew {
        return Ok(());
    }
    // OLLP: our place in `epoch` is given up (nothing written yet), the next one taken.
    publish_done(tx, epoch);
    tx.st.epoch = None;
    schedule(tx).await?;
    revalidate(tx).await
}

/// Everything read so far is what it was (the keys are ours again, in a later place).
async fn revalidate(tx: &mut Tx<'_, Calvin>) -> Result<(), Abort> {
    lock_round(tx, |it| {
        (it.exists && it.new != NewValue::Insert).then_some(Want {
            lock: false,
            header: true,
        })
    })
    .await?;
    absent::validate_absent(tx).await
}

/// Dispatches the declared keys into the coordinator's next epoch and waits until every
/// conflicting transaction ordered before it there has finished.
async fn schedule(tx: &mut Tx<'_, Calvin>) -> Result<(), Abort> {
    let first = tx.st.keys[0];
    let fail = |reason| Abort {
        reason,
        table: first.0,
        key: first.1,
    };
    if tx.s.members == 0 {
        join(tx).await.map_err(fail)?;
    }
    if tx.st.keys.len() > tx.s.buf_lines * PER_LINE {
        return Err(fail(AbortReason::LogFull));
    }
    let e = tx.s.epoch + 1;
    let map = tx.c.map.clone();
    let (me, members) = (tx.s.me, tx.s.members);
    let base = area(&map, me);
    encode_batch(&mut tx.s.batch, e, &tx.st.keys);
    let log = tx.c.via(Stage::Log);
    let poll = tx.c.via(Stage::Fetch);
    let at = buffer(base, tx.s.buf_lines, e);
    rpc::write(
        &mut tx.c.ep,
        log,
        batch_node(tx.s.nodes, me, tx.c.failover),
        at,
        &tx.s.batch,
    );
    let cas = CasRead::post(&mut tx.c.ep, log, 0, base, (tx.s.word, e), None);
    // One-sided, the CAS executes before the READs posted after it on the QP (G6); an RPC
    // and a READ are not ordered, so then the dispatch is waited for first.
    let mut dispatch = Some(cas);
    if log == Via::Rpc || poll == Via::Rpc {
        if tx.c.ep.post().await.is_err() {
            return Err(fail(AbortReason::ReplicaFailure));
        }
        dispatch = None;
        // Only our own word's CAS can fail (it is ours alone): memory node 0 lost it.
        if !cas.swapped(&tx.c.ep) {
            return Err(fail(AbortReason::ReplicaFailure));
        }
    }
    tx.s.word = e;
    tx.s.epoch = e;
    tx.st.epoch = Some(e);
    let mut pending = std::mem::take(&mut tx.s.pending);
    let mut next = std::mem::take(&mut tx.s.next);
    let mut conflicts = std::mem::take(&mut tx.s.conflicts);
    let mut reads = std::mem::take(&mut tx.s.reads);
    pending.clear();
    pending.extend((0..members).filter(|&k| k != me));
    conflicts.clear();
    let lists = [&mut pending, &mut next];
    let r = barrier(tx, &map, (e, dispatch), lists, &mut conflicts, &mut reads).await;
    let r = match r {
        Ok(()) => wait_done(tx, &map, e, [&mut conflicts, &mut next], &mut reads).await,
        Err(a) => Err(a),
    };
    tx.s.pending = pending;
    tx.s.next = next;
    tx.s.conflicts = conflicts;
    tx.s.reads = reads;
    r.map_err(fail)
}

/// Joins the members: CAS our epoch word 0 -> JOINING and READ every other's after it (G6),
/// and start after the newest epoch seen. A coordinator that read our word as 0 had CASed its
/// own to its epoch before that READ, so our READ of its word (after our CAS) sees that epoch
/// or a later one: we never enter an epoch it closed without us. One that reads JOINING waits.
/// Epochs closed by coordinators that have left since are in the closed-epoch word, read in a
/// second round (see below).
async fn join(tx: &mut Tx<'_, Calvin>) -> Result<(), AbortReason> {
    let map = tx.c.map.clone();
    let me = (tx.c.owner - 1) as u32;
    let mut members = 0;
    while let Some((_, len)) = map.log_slice(members) {
        if len < MIN_SLICE {
            return Err(AbortReason::LogFull);
        }
        members += 1;
    }
    if me >= members {
        return Err(AbortReason::LogFull);
    }
    // The undo log (inserts) keeps the slice below the area.
    if let Some((off, len)) = map.log_slice(me) {
        tx.c.log_slice = Some((off, len - area_bytes(len)));
        tx.s.buf_lines = buf_lines(len);
        tx.s.nodes = tx.c.ep.node_sizes().len() as u16;
    }
    let via = tx.c.via(Stage::Log);
    let poll = tx.c.via(Stage::Fetch);
    // From 0 (never joined) or RETIRED (left): either way no member, as the others see it.
    let was = tx.s.word;
    let cas = CasRead::post(&mut tx.c.ep, via, 0, area(&map, me), (was, JOINING), None);
    // A coordinator back from RETIRED resets its done word, which said RETIRED (done with
    // everything): applied before this round completes, so before our first dispatch's CAS
    // makes anyone wait on it.
    if was == RETIRED {
        let release = tx.c.via(Stage::Release);
        rpc::write(
            &mut tx.c.ep,
            release,
            0,
            area(&map, me) + 8,
            &0u64.to_le_bytes(),
        );
    }
    let mut swapped = None;
    if via == Via::Rpc || poll == Via::Rpc {
        swapped = Some(tx.c.ep.post().await.is_ok() && cas.swapped(&tx.c.ep));
    }
    let mut reads = std::mem::take(&mut tx.s.reads);
    reads.clear();
    for k in (0..members).filter(|&k| k != me) {
        let r = Read::post(&mut tx.c.ep, poll, 0, area(&map, k), 16);
        reads.push((k, r, None));
    }
    let ok = tx.c.ep.post().await.is_ok() && swapped.unwrap_or_else(|| cas.swapped(&tx.c.ep));
    if !ok {
        // (A post refused before it went out, by the lease's gate, left no results to read.)
        tx.s.reads = reads;
        return Err(AbortReason::ReplicaFailure);
    }
    let newest = reads
        .iter()
        .map(|(_, r, _)| word(r.bytes(&tx.c.ep), 0))
        .filter(|&w| w != JOINING && w != RETIRED)
        .max()
        .unwrap_or(0);
    tx.s.reads = reads;
    // And past the closed-epoch word, read after the words. A coordinator that closed an
    // epoch and left is no member now, but the epoch may be in the closed word: one that
    // retired put every epoch it closed there before its word said RETIRED (see
    // `Calvin::retire`), and what a crashed one got there landed before recovery retired it
    // (the lease argument; what never lands claims nothing). So a word we read RETIRED means
    // the closed word holds, by our second READ, every epoch its coordinator will ever have
    // claimed closed. Started below one, our barriers would take it for closed without
    // waiting for anyone.
    let closed = Read::post(&mut tx.c.ep, poll, 0, area(&map, 0) + 16, 8);
    if tx.c.ep.post().await.is_err() {
        return Err(AbortReason::ReplicaFailure);
    }
    // And past our own last epoch, if we were a member before: a dispatch of ours to it
    // (our batch, then a done word published detached) may land or be read late, and must
    // not be taken for this membership's.
    let newest = newest.max(word(closed.bytes(&tx.c.ep), 0)).max(tx.s.epoch);
    tx.s.members = members;
    tx.s.me = me;
    tx.s.word = JOINING;
    tx.s.epoch = newest;
    Ok(())
}

/// Epoch synchronization: polls the members still `pending` until every one has dispatched
/// epoch `e` (or is no member, or has left), and collects in `conflicts` those ordered before
/// us whose batch in `e` conflicts with our keys. The first round's batch holds our dispatch
/// CAS too, if it was not waited for.
async fn barrier(
    tx: &mut Tx<'_, Calvin>,
    map: &PoolMap,
    (e, mut dispatch): (u64, Option<CasRead>),
    [pending, next]: [&mut Vec<u32>; 2],
    conflicts: &mut Vec<u32>,
    reads: &mut Vec<(u32, Read, Option<Read>)>,
) -> Result<(), AbortReason> {
    let via = tx.c.via(Stage::Fetch);
    let me = tx.s.me;
    let start = tx.c.ep.now_ns();
    let limit = wait_limit(&tx.c.ep);
    let mut backoff = 500;
    // Members whose batch has more keys than the head READ brought: read whole next round.
    let mut whole: Vec<u32> = Vec::new();
    let closed_at = area(map, 0) + 16;
    // Whether this round reads the pending members (else only the closed-epoch word).
    let mut full = true;
    let mut rounds = 0u32;
    // Whether the closed word said the epoch closed (else we saw it ourselves, and say so).
    let mut told = false;
    // The closed word as last read.
    let mut seen = 0;
    while !pending.is_empty() || dispatch.is_some() {
        reads.clear();
        let closed = Read::post(&mut tx.c.ep, via, 0, closed_at, 8);
        if full {
            post_polls(tx, map, e, pending, &whole, reads);
        }
        if tx.c.ep.post().await.is_err() {
            return Err(AbortReason::ReplicaFailure);
        }
        // Only our own word's CAS can fail (it is ours alone): memory node 0 lost it.
        if dispatch.take().is_some_and(|c| !c.swapped(&tx.c.ep)) {
            return Err(AbortReason::ReplicaFailure);
        }
        seen = word(closed.bytes(&tx.c.ep), 0);
        if !full && seen >= e {
            // Someone saw every member dispatch `e`: only the batches of those ordered before
            // us are still to read (they are all there now, or about to be).
            pending.retain(|&k| k < me);
            full = true;
            told = true;
            continue;
        }
        next.clear();
        let (progress, dispatched) = classify(tx, e, reads, [next, conflicts, &mut whole]);
        if full {
            std::mem::swap(pending, next);
        }
        if pending.is_empty() {
            break;
        }
        if tx.c.ep.now_ns().saturating_sub(start) > limit {
            return Err(AbortReason::LockConflict);
        }
        // Between two reads of the laggards (a fallback: a closer's CAS fails if the word
        // moved since it read it), only the closed word is polled: one READ, not one per
        // member.
        rounds += 1;
        full = rounds.is_multiple_of(8) || (full && dispatched);
        if progress {
            backoff = 500;
        } else {
            backoff = (backoff * 2).min(MAX_BACKOFF_NS);
        }
        tx.c.ep.sleep(backoff).await;
    }
    // Tell the others the epoch closed (unless the closed word said so already), detached.
    // From what it was last read as (not from e - 1: CASes of two epochs' closers may land
    // out of order, and one from e - 1 would then fail for good), only ever forward.
    if !told && seen < e {
        let log = tx.c.via(Stage::Log);
        CasRead::post(&mut tx.c.ep, log, 0, closed_at, (seen, e), None);
        let _ = tx.c.ep.post_detached();
    }
    tx.s.closed = tx.s.closed.max(e);
    Ok(())
}

/// Posts a round of polls: each pending member's epoch word and, for those ordered before
/// us, its batch (as many lines as our own batch, batches of one workload being alike; all of
/// them for those in `whole`).
fn post_polls(
    tx: &mut Tx<'_, Calvin>,
    map: &PoolMap,
    e: u64,
    pending: &[u32],
    whole: &[u32],
    reads: &mut Vec<(u32, Read, Option<Read>)>,
) {
    let via = tx.c.via(Stage::Fetch);
    let (me, all) = (tx.s.me, tx.s.buf_lines);
    let head = lines_for(tx.st.keys.len()).min(all);
    for &k in pending {
        let base = area(map, k);
        let words = Read::post(&mut tx.c.ep, via, 0, base, 16);
        let batch = (k < me).then(|| {
            let lines = if whole.contains(&k) { all } else { head };
            let n = batch_node(tx.s.nodes, k, tx.c.failover);
            Read::post(&mut tx.c.ep, via, n, buffer(base, all, e), lines * 64)
        });
        reads.push((k, words, batch));
    }
}

/// One round of polls, read: the members still to wait for (or to read again) go to `next`,
/// those whose batch conflicts with ours to `conflicts`, those whose batch is longer than was
/// read to `whole`. Returns whether anything moved, and whether every member left in `next`
/// has dispatched (its batch only not all seen yet).
fn classify(
    tx: &mut Tx<'_, Calvin>,
    e: u64,
    reads: &[(u32, Read, Option<Read>)],
    [next, conflicts, whole]: [&mut Vec<u32>; 3],
) -> (bool, bool) {
    let mut progress = false;
    let mut dispatched = true;
    for &(k, words, batch) in reads {
        let w = word(words.bytes(&tx.c.ep), 0);
        let published = match w {
            NOT_MEMBER | RETIRED => {
                progress = true;
                continue;
            }
            JOINING => false,
            w => w >= e,
        };
        if !published {
            next.push(k);
            dispatched = false;
            continue;
        }
        let Some(batch) = batch else {
            progress = true;
            continue;
        };
        match decode_batch(batch.bytes(&tx.c.ep), e, tx.s.buf_lines) {
            Batch::Absent if w > e => progress = true,
            // Dispatched, its batch not (all) seen yet: read again.
            Batch::Absent | Batch::Torn => next.push(k),
            Batch::Longer => {
                whole.push(k);
                next.push(k);
                progress = true;
            }
            Batch::Keys(bytes) => {
                progress = true;
                if conflict(bytes, &tx.st.keys) {
                    conflicts.push(k);
                }
            }
        }
    }
    (progress, dispatched)
}

/// Deterministic scheduling: waits until every conflicting predecessor has published done.
async fn wait_done(
    tx: &mut Tx<'_, Calvin>,
    map: &PoolMap,
    e: u64,
    [waiting, next]: [&mut Vec<u32>; 2],
    reads: &mut Vec<(u32, Read, Option<Read>)>,
) -> Result<(), AbortReason> {
    let via = tx.c.via(Stage::Fetch);
    let start = tx.c.ep.now_ns();
    let limit = wait_limit(&tx.c.ep);
    let mut backoff = 500;
    while !waiting.is_empty() {
        reads.clear();
        for &k in waiting.iter() {
            let r = Read::post(&mut tx.c.ep, via, 0, area(map, k) + 8, 8);
            reads.push((k, r, None));
        }
        if tx.c.ep.post().await.is_err() {
            return Err(AbortReason::ReplicaFailure);
        }
        next.clear();
        for &(k, r, _) in reads.iter() {
            if word(r.bytes(&tx.c.ep), 0) < e {
                next.push(k);
            }
        }
        std::mem::swap(waiting, next);
        if waiting.is_empty() {
            break;
        }
        if tx.c.ep.now_ns().saturating_sub(start) > limit {
            return Err(AbortReason::LockConflict);
        }
        backoff = (backoff * 2).min(MAX_BACKOFF_NS);
        tx.c.ep.sleep(backoff).await;
    }
    Ok(())
}

/// The little-endian word at byte `at` (0 for a short, malformed reply).
fn word(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
}

/// A batch: every line starts with its epoch; the first then holds the count; keys are
/// 16 bytes (key, table u32, exclusive u32), three per line.
fn encode_batch(out: &mut Vec<u8>, e: u64, keys: &[Key]) {
    let lines = lines_for(keys.len());
    out.clear();
    out.resize(lines * 64, 0);
    for l in 0..lines {
        out[l * 64..l * 64 + 8].copy_from_slice(&e.to_le_bytes());
    }
    out[8..16].copy_from_slice(&(keys.len() as u64).to_le_bytes());
    for (i, &(t, k, x)) in keys.iter().enumerate() {
        let at = slot(i);
        out[at..at + 8].copy_from_slice(&k.to_le_bytes());
        out[at + 8..at + 12].copy_from_slice(&t.to_le_bytes());
        out[at + 12..at + 16].copy_from_slice(&u32::from(x).to_le_bytes());
    }
}

/// Where key `i` of a batch is: three per line, after the line's epoch (and, in the first
/// line, the count).
fn slot(i: usize) -> usize {
    let (l, j) = (i / PER_LINE, i % PER_LINE);
    l * 64 + 16 + j * 16
}

fn lines_for(keys: usize) -> usize {
    keys.div_ceil(PER_LINE).max(1)
}

/// What a READ of a batch buffer holds for epoch `e`.
enum Batch<'a> {
    /// No batch of `e` (an older one, or none).
    Absent,
    /// Part of the lines are of `e`, part older: the batch's WRITE was not all applied.
    Torn,
    /// More keys than the READ brought.
    Longer,
    Keys(&'a [u8]),
}

fn decode_batch(b: &[u8], e: u64, buf_lines: usize) -> Batch<'_> {
    if word(b, 0) != e {
        return Batch::Absent;
    }
    let n = word(b, 8) as usize;
    let lines = lines_for(n);
    if n > buf_lines * PER_LINE {
        // Not a batch this code writes: read again rather than trust it.
        return Batch::Torn;
    }
    if lines * 64 > b.len() {
        return Batch::Longer;
    }
    if (0..lines).any(|l| word(b, l * 64) != e) {
        return Batch::Torn;
    }
    Batch::Keys(&b[..lines * 64])
}

/// Whether a decoded batch shares a key with `ours` that either side wants exclusively.
fn conflict(batch: &[u8], ours: &[Key]) -> bool {
    let n = word(batch, 8) as usize;
    (0..n).any(|i| {
        let at = slot(i);
        let k = word(batch, at);
        let t = u32::from_le_bytes(batch[at + 8..at + 12].try_into().expect("4 bytes"));
        let x = batch[at + 12] != 0;
        ours.iter()
            .any(|&(ot, ok, ox)| ot == t && ok == k && (x || ox))
    })
}

/// The commit: every replica of every written record with its lock word free, and the
/// inserts' chain locks given back after them, in one batch; where coordinators can be
/// recovered, the redo log ahead of them in the same batch ([`log_redo`]).
async fn install(tx: &mut Tx<'_, Calvin>) -> Result<(), Abort> {
    let Some(first) = tx.items.iter().find(|i| i.written()) else {
        return Ok(());
    };
    let fail = Abort {
        reason: AbortReason::ReplicaFailure,
        table: first.table,
        key: first.key,
    };
    // The undo log (of inserts) is acknowledged before anything is written in place.
    if tx.c.ep.wait_background().await.is_err() {
        return Err(fail);
    }
    let map = tx.c.map.clone();
    // Memory nodes found down for good (failover): the install is finished on the live
    // replicas. The transaction decided to commit before it logged (CALVIN never aborts
    // once scheduled), and its successors in the schedule wait for its done word: they must
    // find every record it writes installed on every replica they may read, the promoted
    // backups of the new view included (it is active only once we have acknowledged it,
    // between transactions: after these WRITEs landed).
    let mut down: Vec<NodeId> = Vec::new();
    let mut chains_released = false;
    let r = loop {
        match post_install(tx, &map, &down, &mut chains_released).await? {
            Err(FabricError::NodeDown(n)) if tx.c.failover && n != 0 && !down.contains(&n) => {
                down.push(n)
            }
            r => break r,
        }
    };
    if r.is_err() {
        return Err(fail);
    }
    for it in &mut tx.items {
        it.locked = false;
        it.chain_lock = None;
    }
    Ok(())
}

/// The install's verbs on every replica but those `down`, awaited: the redo log (where
/// coordinators can be recovered), the records, (`flush`) the backups' FLUSHes, the inserts'
/// chain locks given back unless `chains_released` (an earlier try posted them: they landed
/// on every live node, and another inserter may hold one since). An abort only when the redo
/// log does not fit.
async fn post_install(
    tx: &mut Tx<'_, Calvin>,
    map: &PoolMap,
    down: &[NodeId],
    chains_released: &mut bool,
) -> Result<Result<(), FabricError>, Abort> {
    let via = tx.c.via(Stage::Commit);
    let mut record = std::mem::take(&mut tx.c.mech.record);
    let redo = !Calvin::undo_logged(&tx.c.cfg);
    if redo {
        match log_redo(tx, map, via, down) {
            Ok(()) => {}
            Err(a) => {
                tx.c.mech.record = record;
                return Err(a);
            }
        }
        if tx.c.cfg.flush {
            // The entry is durable before any record WRITE can be (a FLUSH orders nothing
            // after it).
            for &n in &tx.undo.nodes {
                if !down.contains(&n) {
                    tx.c.ep.flush(n);
                }
            }
            if let Err(e) = tx.c.ep.post().await {
                tx.c.mech.record = record;
                return Ok(Err(e));
            }
        }
    }
    // With the redo log, each record is WRITTEN from its image in the log's body, which is
    // what recovery would install.
    let mut at = HEAD_BYTES;
    for it in tx.items.iter().filter(|i| i.written()) {
        let t = table(map, it.table);
        let off = it.offset.expect("written items exist");
        let image: &[u8] = if redo {
            let len = t.copy_bytes();
            at += REDO_ITEM_HEAD;
            let image = &tx.undo.body[at - HEAD_BYTES..at - HEAD_BYTES + len];
            at += len.next_multiple_of(8);
            image
        } else {
            encode_new(&mut record, t, it, 0);
            &record
        };
        for &n in t.replicas.iter().filter(|n| !down.contains(n)) {
            rpc::write(&mut tx.c.ep, via, n, off, image);
        }
    }
    tx.c.mech.record = record;
    if tx.c.cfg.flush {
        // Persistent memory: each backup once, after its last WRITE (FORD's selective remote
        // flush: a lost primary is rebuilt from its backups).
        let mut flushed = std::mem::take(&mut tx.c.mech.nodes);
        flushed.clear();
        for it in tx.items.iter().filter(|i| i.written()) {
            flushed.extend_from_slice(table(map, it.table).backups());
        }
        flushed.sort_unstable();
        flushed.dedup();
        for &n in flushed.iter().filter(|n| !down.contains(n)) {
            tx.c.ep.flush(n);
        }
        tx.c.mech.nodes = flushed;
    }
    let release = tx.c.via(Stage::Release);
    for it in tx.items.iter().filter(|_| !*chains_released) {
        if let Some((n, addr)) = it.chain_lock.filter(|(n, _)| !down.contains(n)) {
            rpc::write(&mut tx.c.ep, release, n, addr, &0u64.to_le_bytes());
        }
    }
    *chains_released = true;
    tx.installed = true;
    Ok(tx.c.ep.post().await)
}

/// Bytes of a log item's descriptor, before its image (`dtxn_store::log`).
const REDO_ITEM_HEAD: usize = 24;

/// The redo log (where coordinators can be recovered: `TxnConfig::lock_journal`): one entry
/// in the coordinator's log slice, the new record of every written item (lock word 0, as the
/// install writes it), tagged with the epoch the transaction installs in, WRITTEN to every
/// memory node the install writes, the install's way (one-sided or as RPCs), posted before
/// the install's WRITEs in the same batch. One-sided, WRITEs on one QP apply in post order
/// (G4); as RPCs, a batch's requests to one node are one message served in post order; and a
/// crash leaves a prefix of each node's ops. So no record changes on a node before the whole
/// entry is there: if no node holds the entry whole, nothing was installed anywhere. With
/// `flush` the caller flushes it and awaits that first (a FLUSH orders nothing after it).
/// Nodes `down` (failed over) are left out. Posts, does not wait. The
/// entry's body is kept in the transaction's undo-log buffers (`tx.undo`: no undo log is
/// written meanwhile), which close it at the release like an undo log.
fn log_redo(
    tx: &mut Tx<'_, Calvin>,
    map: &PoolMap,
    via: Via,
    down: &[NodeId],
) -> Result<(), Abort> {
    let first = tx
        .items
        .iter()
        .find(|i| i.written())
        .expect("called with writes");
    let abort = |reason| Abort {
        reason,
        table: first.table,
        key: first.key,
    };
    let (Some((slice, room)), Some(epoch)) = (tx.c.log_slice, tx.st.epoch) else {
        // More coordinators than log slices (`join` refuses them), or writes without a place
        // in an epoch (every write was fetched or inserted, which schedules it).
        return Err(abort(AbortReason::LogFull));
    };
    let full = abort(AbortReason::LogFull);
    tx.undo.clear();
    let mut record = std::mem::take(&mut tx.c.mech.record);
    let mut nodes = std::mem::take(&mut tx.undo.nodes);
    for it in tx.items.iter().filter(|i| i.written()) {
        let t = table(map, it.table);
        encode_new(&mut record, t, it, 0);
        let off = it.offset.expect("written items exist");
        let insert = it.new == NewValue::Insert;
        encode_item_as(
            ItemKind::RedoRecord,
            it.table,
            off,
            insert,
            &record,
            &mut tx.undo.body,
        );
        tx.undo.logged += 1;
        nodes.extend_from_slice(&t.replicas);
    }
    tx.c.mech.record = record;
    nodes.sort_unstable();
    nodes.dedup();
    tx.undo.nodes = nodes;
    if (HEAD_BYTES + tx.undo.body.len()) as u64 > room {
        tx.undo.clear();
        return Err(full);
    }
    let mut head = encode_head(
        tx.id,
        tx.c.ep.id().index,
        LogStatus::Pending,
        tx.undo.logged as u32,
        tx.undo.body.len() as u32,
        crc32fast::hash(&tx.undo.body),
    );
    set_tag(&mut head, epoch);
    for &n in tx.undo.nodes.iter().filter(|n| !down.contains(n)) {
        rpc::write_parts(&mut tx.c.ep, via, n, slice, &[&head, &tx.undo.body]);
    }
    Ok(())
}

/// Closes the undo log entry (inserts), detached.
fn close_log(tx: &mut Tx<'_, Calvin>, status: LogStatus) {
    crate::mechanisms::undo::queue_status(tx, status);
}

/// The transaction is over: its successors may go.
fn done(tx: &mut Tx<'_, Calvin>) {
    if let Some(e) = tx.st.epoch.take() {
        publish_done(tx, e);
    }
    let _ = tx.c.ep.post_detached();
}

/// WRITEs our done word (posted, not waited for).
fn publish_done(tx: &mut Tx<'_, Calvin>, e: u64) {
    let base = area(&tx.c.map, tx.s.me);
    let via = tx.c.via(Stage::Release);
    rpc::write(&mut tx.c.ep, via, 0, base + 8, &e.to_le_bytes());
}

/// Whether a log entry is CALVIN's redo log (its items are records to install).
fn is_redo(e: &LogEntry) -> bool {
    e.tag != 0 && e.items.iter().all(|i| i.kind == ItemKind::RedoRecord)
}

/// Recovery of a dead coordinator's redo entry `e` (tagged with the epoch its transaction
/// installs in): **over** if the coordinator's epoch word is past that epoch (it dispatched
/// a later one, retired, or joined again: its transaction had ended, install awaited) or its
/// done word has reached it (published after the install completed): nothing to do, and
/// nothing may be done, since successors may have written the same records since. Otherwise
/// **rolled forward**: every record of the entry WRITTEN to every replica (lock word 0, as the
/// install would have), then flushed. That is safe because nobody has touched those records
/// since the install began: the transactions of the epoch ordered after it that share a key
/// wait for its done word, those ordered before it had finished before it read, and no
/// transaction of a later epoch has run past its barrier (the dead coordinator's epoch word
/// is still the entry's epoch, and only recovery retires it, after this). The decision reads
/// the words and the log alone, so it is the same whatever the status says (a stale close
/// of an earlier entry, posted as an RPC, may land on a newer one) and however often
/// recovery runs.
async fn settle_redo(
    ep: &mut Endpoint,
    map: &PoolMap,
    owner: u64,
    e: &LogEntry,
) -> Result<Recovered, FabricError> {
    let index = (owner - 1) as u32;
    if map.log_slice(index).is_none() {
        return Ok(Recovered::Nothing);
    }
    let r = ep.read(0, area(map, index), 16);
    ep.post().await?;
    let (epoch_word, done_word) = (word(ep.bytes(r), 0), word(ep.bytes(r), 8));
    if epoch_word > e.tag || done_word >= e.tag {
        return Ok(Recovered::Nothing);
    }
    let mut written: Vec<NodeId> = Vec::new();
    let mut writes = Vec::with_capacity(e.items.len());
    for it in &e.items {
        let Ok(t) = map.table(it.table) else { continue };
        // An image of the wrong size is a corrupt entry (its crc passed, but trust nothing
        // remote): left alone.
        if it.image.len() != t.copy_bytes() {
            continue;
        }
        for &n in &t.replicas {
            ep.write(n, it.offset, &it.image);
            if !written.contains(&n) {
                written.push(n);
            }
        }
        let h = t.codec().header(&it.image);
        writes.push(history::Write {
            table: it.table,
            key: h.key,
            version: h.version,
            deleted: !h.valid,
            // Not read back: its readers are held to the first of them.
            hash: None,
        });
    }
    // In persistent-memory mode the roll forward survives a power loss, as a commit's
    // install does (a FLUSH per node written, ordering nothing more otherwise).
    for n in written {
        ep.flush(n);
    }
    ep.post().await?;
    Ok(Recovered::rolled_forward(e, ep.now_ns(), writes))
}

/// Recovery's last step for CALVIN: each dead coordinator leaves the epochs, as
/// [`Calvin::retire`] does: its done word WRITTEN and its epoch word CASed to RETIRED, both
/// after its transaction was settled and its locks freed (the settle's batch is awaited
/// before). So a live coordinator waiting for its done word, or for its epoch word to reach
/// an epoch, or reading its batch, goes on only once nothing of the dead one's transaction is
/// left to happen: it finds the done word past its epoch, or the epoch word RETIRED, which
/// makes it no member. The dead coordinator posts nothing after its lease expired (the lease
/// argument, `membership.rs`), so nothing of it lands on these words afterwards, and only it
/// ever changes them otherwise: the CAS (from the word read) cannot fail but for a second
/// leader, which the leader word excludes. One that never joined (its word 0) is no member
/// and is left alone. Two round trips for any number of dead coordinators.
async fn leave_epochs(
    ep: &mut Endpoint,
    map: &PoolMap,
    dead: &[u32],
) -> Result<Vec<(bool, u32)>, FabricError> {
    let reads: Vec<_> = dead
        .iter()
        .map(|&d| map.log_slice(d).map(|_| ep.read(0, area(map, d), 16)))
        .collect();
    ep.post().await?;
    // Every word is taken before the first WRITE or CAS starts a new batch (which the READs'
    // bytes do not outlive).
    let words: Vec<Option<(u64, u64)>> = reads
        .iter()
        .map(|r| r.map(|r| (word(ep.bytes(r), 0), word(ep.bytes(r), 8))))
        .collect();
    let mut cas = Vec::with_capacity(dead.len());
    let mut any = false;
    for (&d, words) in dead.iter().zip(words) {
        let Some((w, done)) = words else {
            cas.push(None);
            continue;
        };
        if w == NOT_MEMBER || (w == RETIRED && done == RETIRED) {
            cas.push(None);
            continue;
        }
        let base = area(map, d);
        any = true;
        if done != RETIRED {
            ep.write(0, base + 8, &RETIRED.to_le_bytes());
        }
        cas.push((w != RETIRED).then(|| ep.cas(0, base, w, RETIRED)));
    }
    if any {
        ep.post().await?;
    }
    // A CAS that failed (nobody else should move the word) leaves it for the next run.
    Ok(cas
        .into_iter()
        .map(|c| (c.is_none_or(|c| ep.cas_ok(c)), 0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copier holds the schedule only when nobody can be installing: every other member
    /// past its epoch, or nobody a member at all.
    #[test]
    fn the_schedule_is_held_only_when_no_install_can_run() {
        let held = |words: &[u64], settled: bool| {
            let w: Vec<(u32, u64)> = words
                .iter()
                .enumerate()
                .map(|(k, &w)| (k as u32, w))
                .collect();
            schedule_held(&w, 0, settled)
        };
        // Members past our epoch 7, or gone, or never members: held.
        assert!(held(&[7, 8, 9, RETIRED, NOT_MEMBER], false));
        // One still in epoch 7 (its transaction may be installing), or behind: not held.
        assert!(!held(&[7, 8, 7], false));
        assert!(!held(&[7, 6, 8], false));
        // One joining: its first epoch may be ours or older.
        assert!(!held(&[7, 8, JOINING], true));
        // We are no member: the others' epochs close without us; with nobody a member, only
        // if every other coordinator is settled for good (one that is not may join).
        assert!(!held(&[RETIRED, 8], true));
        assert!(!held(&[NOT_MEMBER, JOINING], true));
        assert!(held(&[RETIRED, RETIRED, NOT_MEMBER], true));
        assert!(!held(&[RETIRED, RETIRED, NOT_MEMBER], false));
        // Joining ourselves (never between transactions): no hold.
        assert!(!held(&[JOINING, 8], true));
    }
}
