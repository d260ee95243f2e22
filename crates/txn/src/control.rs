//! A control word replicated over a **chain** of memory nodes, with one-sided verbs alone
//! (issue #23: surviving memory node 0; the design is `docs/src/control-chain.md`).
//!
//! The pool's control words (the view, the recovery service's leader word, the recovered
//! marks, the claim word) live on memory node 0 alone today, so its failure stops the pool
//! even where every table has a live replica. This module is the register they move to: one
//! copy of the word on each **member** of a chain (the first memory nodes, head first), in
//! the fail-stop model the pool already assumes for data replicas (a failed node never
//! answers again on any connection, and every coordinator learns it from a failed verb).
//!
//! **Words are tagged.** The caller's encoding gives every word a tag, and each write raises it
//! by one ([`cas`] refuses a new word whose tag is not its expected word's plus one), with the
//! writer's identity in the word, so that no two writes make the same word. Where two writers
//! may make the same word from the same one (two probes failing the same memory node make one
//! view), the word means the same whoever wrote it: each of them takes it for its own (`Done`).
//!
//! **A write** CASes the head from the expected word to the new one, then each later member
//! in chain order, one round trip each. **A read** READs every member in one batch and returns
//! the **tail**'s word: the *committed* one. A member behind its predecessor (a write still
//! travelling, or one whose writer crashed half-way) is **helped**: the reader CASes it from
//! what it read there to what it read at the predecessor, in chain order, before it answers.
//!
//! **Invariant** (over the live members, in chain order): (a) a member's tag only rises (every
//! CAS is from an exact word it read, to a higher tag); (b) every word a later member ever
//! holds is one an earlier member held (words are made only at the head; a helper copies a
//! word read at a predecessor; a writer copies its own, already at the head; a member that
//! dies leaves its successor with its predecessor's history); (c) no two live members hold
//! different words with one tag (two writes from the same word meet at one head, where one CAS
//! wins; a word left at a head that died reaches a later member only while that member still
//! holds the expected word, before a new head's write could land there).
//!
//! Hence: the committed word only moves forward, whatever dies (the next tail held everything
//! the last one did); a write that reached the tail is seen by every later read; and a write
//! expects the committed word, so two writes never both commit from one word (the leader
//! word's mutual exclusion).
//!
//! **A write's outcome** ([`Write`]): `Done` (it reached the tail, or a member past the head
//! shows a later write while the head that took ours is still up: every write after ours went
//! through that head, from ours), `Lost` (another write from the same word won), or `Unknown`
//! (the head that took ours died before ours was seen past it, and a later member shows a
//! later write: ours may or may not have committed first). Callers resolve `Unknown` from the
//! committed word, which names its writer. An `Err` from [`cas`] once its head CAS may have
//! landed is an `Unknown` too.
//!
//! **Batches.** Each step posts its own batch; the endpoint's lease renewals ride in them
//! (a copy on every member, [`dtxn_fabric::Lease::nodes`]). A batch that failed on renewals
//! alone succeeds (the endpoint notes the node down), and [`read`] and [`cas`] drop the
//! members it saw down before they post; a batch that fails names a member, maybe another
//! than the one its verb went to: that member is dropped, and the step goes on from wherever
//! its own member now stands. Call with no ops of the caller's own in the batch.

use dtxn_fabric::{Endpoint, FabricError, NodeId};

/// A word's tag, in the caller's encoding (a view word's number; a leader word's sequence).
pub type TagOf = fn(u64) -> u64;

/// The chain's members still up, as this coordinator knows them, head first. A member found
/// down is dropped for good (fail-stop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    members: Vec<NodeId>,
}

impl Chain {
    /// The chain over `members`, head first (at least one; no repeats).
    pub fn new(members: Vec<NodeId>) -> Result<Chain, ControlError> {
        if members.is_empty() {
            return Err(ControlError::Empty);
        }
        for (i, &n) in members.iter().enumerate() {
            if members[..i].contains(&n) {
                return Err(ControlError::Repeated(n));
            }
        }
        Ok(Chain { members })
    }

    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// Drops a member found down. `Err` if it was the last one: the word is lost.
    fn drop_member(&mut self, n: NodeId) -> Result<(), ControlError> {
        self.members.retain(|&m| m != n);
        match self.members.is_empty() {
            true => Err(ControlError::AllDown(n)),
            false => Ok(()),
        }
    }
}

/// What a [`cas`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Committed: every later read returns it or a later word.
    Done,
    /// Another write from the same word won: ours never commits.
    Lost,
    /// Ours may or may not have committed before a later write (see the module doc).
    Unknown,
}

/// What the chain counted (for tests and reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Members behind their predecessor, CASed forward by a read.
    pub helped: u64,
    /// Members dropped, found down.
    pub dropped: u64,
    /// Reads started again (a member moved between the READ and the help's CAS).
    pub reread: u64,
    /// Writes that came to [`Write::Unknown`].
    pub unknown: u64,
}

impl Counts {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Counts) {
        self.helped += o.helped;
        self.dropped += o.dropped;
        self.reread += o.reread;
        self.unknown += o.unknown;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("a control chain needs at least one member")]
    Empty,
    #[error("memory node {0} is named twice in the control chain")]
    Repeated(NodeId),
    #[error("every member of the control chain is down (the last: memory node {0}): the pool's control words are lost")]
    AllDown(NodeId),
    #[error("a control write must raise its word's tag by one ({expect_tag} to {new_tag} asked)")]
    BadTag { expect_tag: u64, new_tag: u64 },
    #[error(transparent)]
    Fabric(#[from] FabricError),
}

/// How many times a read starts again before it answers with the tail's word as last read
/// (committed all the same; only the help is given up). Writers that keep moving the word can
/// otherwise hold a reader for ever.
const MAX_REREADS: u32 = 16;

/// Reads the committed word at `off`: READs every member, helps those behind their
/// predecessor forward, and returns the tail's word.
pub async fn read(
    ep: &mut Endpoint,
    chain: &mut Chain,
    off: u64,
    tag: TagOf,
    counts: &mut Counts,
) -> Result<u64, ControlError> {
    let mut rereads = 0;
    seen_down(ep, chain, counts)?;
    'read: loop {
        let ops: Vec<_> = chain.members.iter().map(|&n| ep.read(n, off, 8)).collect();
        if let Err(e) = ep.post().await {
            down(ep, chain, e, counts)?;
            continue;
        }
        let mut words: Vec<u64> = ops.iter().map(|&op| ep.word(op, 0)).collect();
        if rereads < MAX_REREADS {
            for i in 1..words.len() {
                if tag(words[i]) >= tag(words[i - 1]) {
                    continue;
                }
                let n = chain.members[i];
                let op = ep.cas(n, off, words[i], words[i - 1]);
                if let Err(e) = ep.post().await {
                    down(ep, chain, e, counts)?;
                    continue 'read;
                }
                if !ep.cas_ok(op) {
                    counts.reread += 1;
                    rereads += 1;
                    continue 'read;
                }
                counts.helped += 1;
                words[i] = words[i - 1];
            }
        }
        return Ok(*words.last().expect("a member"));
    }
}

/// Writes `new` over `expect` (a committed word, from [`read`]): CAS at the head, then down
/// the chain in order. `new`'s tag must be `expect`'s plus one.
pub async fn cas(
    ep: &mut Endpoint,
    chain: &mut Chain,
    off: u64,
    expect: u64,
    new: u64,
    tag: TagOf,
    counts: &mut Counts,
) -> Result<Write, ControlError> {
    let words = [Cas { off, expect, new }];
    let out = cas_many(ep, chain, &words, tag, Opts::default(), counts).await?;
    Ok(out[0])
}

/// How [`cas_many`] writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Opts {
    /// Each member's batch ends with a FLUSH of that member (an atomic executes before later
    /// ops on its QP: the words are persistent once the batch completes, in
    /// persistent-memory mode).
    pub flush: bool,
    /// The words are written by one writer at a time, from the committed word (those the
    /// recovery leader alone writes, under the leader word): a write may raise the tag by
    /// more than one (the repaired word goes from the view last repaired to the current
    /// one). Where two writers may write from one word, the outcomes lean on the raise by
    /// one: a later word is then one written from ours.
    pub one_writer: bool,
}

/// One word's write in [`cas_many`]: `new` over `expect` at `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cas {
    pub off: u64,
    pub expect: u64,
    pub new: u64,
}

/// [`cas`] of several words of one encoding at once: each member's CASes go in one batch (at
/// the head, then down the chain), so that a chain of one member costs what one batch of
/// CASes did before the words were replicated. Each word's outcome, in order.
pub async fn cas_many(
    ep: &mut Endpoint,
    chain: &mut Chain,
    words: &[Cas],
    tag: TagOf,
    opts: Opts,
    counts: &mut Counts,
) -> Result<Vec<Write>, ControlError> {
    let flush = opts.flush;
    let raised = |w: &Cas| match opts.one_writer {
        true => tag(w.new) > tag(w.expect),
        false => tag(w.new) == tag(w.expect) + 1,
    };
    if let Some(w) = words.iter().find(|w| !raised(w)) {
        return Err(ControlError::BadTag {
            expect_tag: tag(w.expect),
            new_tag: tag(w.new),
        });
    }
    let mut out: Vec<Option<Write>> = vec![None; words.len()];
    if words.is_empty() {
        return Ok(Vec::new());
    }
    seen_down(ep, chain, counts)?;
    // The head: where our words are made. A head found down may have taken them (a failed
    // verb's effect is unknown) and a reader may have carried them on from there: ours are
    // then found at the next head, as a success.
    let mut maybe_taken = false;
    let head = loop {
        let head = chain.members[0];
        let ops: Vec<_> = words
            .iter()
            .map(|w| ep.cas(head, w.off, w.expect, w.new))
            .collect();
        if flush {
            ep.flush(head);
        }
        if let Err(e) = ep.post().await {
            down(ep, chain, e, counts)?;
            maybe_taken = true;
            continue;
        }
        for ((w, &op), o) in words.iter().zip(&ops).zip(&mut out) {
            let old = ep.old(op);
            if old == w.expect || old == w.new {
                continue;
            }
            // Another word at the head. With our tag, another write from the same word won
            // here (had ours committed, this member would have held it before). Above it,
            // where a head that died may have taken ours, a later write may descend from ours.
            *o = Some(match maybe_taken && tag(old) > tag(w.new) {
                true => Write::Unknown,
                false => Write::Lost,
            });
        }
        break head;
    };
    // Down the chain: each member from the expected words to ours. `passed`: the members
    // that hold ours (or a word past it), in chain order.
    let mut passed = vec![head];
    let mut past_ours = Vec::new();
    let mut i = 1;
    while i < chain.members.len() {
        let going: Vec<usize> = (0..words.len())
            .filter(|&j| out[j].is_none() && !past_ours.contains(&j))
            .collect();
        if going.is_empty() {
            break;
        }
        let n = chain.members[i];
        let ops: Vec<_> = going
            .iter()
            .map(|&j| ep.cas(n, words[j].off, words[j].expect, words[j].new))
            .collect();
        if flush {
            ep.flush(n);
        }
        if let Err(e) = ep.post().await {
            // The batch may have failed on other members than `n` (a lease renewal rides in
            // it), `n` among them or not: the chain shifts under `i`, so go on from the first
            // member not passed yet (`n` again if it is up: ours may have landed there, and
            // is accepted).
            down(ep, chain, e, counts)?;
            i = chain
                .members
                .iter()
                .take_while(|m| passed.contains(m))
                .count();
            continue;
        }
        for (&j, &op) in going.iter().zip(&ops) {
            let (w, old) = (words[j], ep.old(op));
            if old == w.expect || old == w.new {
                continue;
            }
            // Moved past the expected word to another. With our tag: a write from the same
            // word at a later head (ours died with the head that took it) won. Above it: a
            // write from ours (then ours committed), unless the head that took ours died and
            // a later head's writes overtook it here.
            if tag(old) <= tag(w.new) {
                out[j] = Some(Write::Lost);
            } else {
                past_ours.push(j);
            }
        }
        passed.push(n);
        i += 1;
    }
    if let Some(&j) = past_ours.first() {
        let found = probe(ep, chain, head, words[j].off, counts).await?;
        for j in past_ours {
            out[j] = Some(found);
        }
    }
    let out: Vec<Write> = out.into_iter().map(|o| o.unwrap_or(Write::Done)).collect();
    counts.unknown += out.iter().filter(|&&w| w == Write::Unknown).count() as u64;
    Ok(out)
}

/// A write that took `head` found a later word past it: `Done` while that head is up (every
/// later write went through it, from ours), `Unknown` once it is down.
async fn probe(
    ep: &mut Endpoint,
    chain: &mut Chain,
    head: NodeId,
    off: u64,
    counts: &mut Counts,
) -> Result<Write, ControlError> {
    while chain.members.contains(&head) {
        let _ = ep.read(head, off, 8);
        match ep.post().await {
            Ok(()) => return Ok(Write::Done),
            // Another member's failure (a renewal rode along) says nothing of the head.
            Err(e) => down(ep, chain, e, counts)?,
        }
    }
    Ok(Write::Unknown)
}

/// Drops the members the endpoint saw down (a batch of the caller's, or one whose failure
/// hit only lease renewals, [`Endpoint::seen_down`]), before a step posts to them.
fn seen_down(ep: &Endpoint, chain: &mut Chain, counts: &mut Counts) -> Result<(), ControlError> {
    for n in ep.seen_down().iter() {
        if chain.members.contains(&n) {
            counts.dropped += 1;
            chain.drop_member(n)?;
        }
    }
    Ok(())
}

/// A batch failed: drops the members it failed on (the endpoint saw every node it failed on;
/// the error names one of them, maybe not a member), or passes the error up if it dropped
/// none (a failure of no member's, or of another kind).
fn down(
    ep: &Endpoint,
    chain: &mut Chain,
    e: FabricError,
    counts: &mut Counts,
) -> Result<(), ControlError> {
    let before = chain.members.len();
    if let FabricError::NodeDown(_) = e {
        seen_down(ep, chain, counts)?;
    }
    match chain.members.len() < before {
        true => Ok(()),
        false => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_refuses_no_member_and_a_repeated_one() {
        assert_eq!(Chain::new(vec![]), Err(ControlError::Empty));
        assert_eq!(Chain::new(vec![0, 1, 0]), Err(ControlError::Repeated(0)));
        let mut c = Chain::new(vec![2, 0, 1]).unwrap();
        assert_eq!(c.members(), [2, 0, 1]);
        c.drop_member(0).unwrap();
        assert_eq!(c.members(), [2, 1]);
        c.drop_member(2).unwrap();
        assert_eq!(c.drop_member(1), Err(ControlError::AllDown(1)));
    }
}
