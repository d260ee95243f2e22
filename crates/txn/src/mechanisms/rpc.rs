//! The RPC forms of the mechanisms' verbs, and the memory node's side of them.
//!
//! A stage that runs as RPCs (see [`crate::Stages`]) sends each of its verbs as a request that
//! the memory node's CPU executes on its own memory: a lock's CAS (with the READ that follows
//! it), a READ, a WRITE. The coordinator's decisions stay the same whichever way the bytes
//! travel; what changes is the cost (the fabric packs a batch's requests to one node into one
//! message, served by one core) and the ordering, which the RPC forms keep without G6: a
//! request's CAS and READ run one after the other on the memory node's CPU.
//!
//! Two rules make the forms safe to mix with one-sided stages:
//! - **G11**: the memory node's CPU atomics are not atomic with respect to a NIC's, so every
//!   CAS on lock words of a run goes one way: with the lock stage as RPCs, the hitchhiked
//!   CAS, the commit's lock rounds, inserts' chain locks and every give-back all do.
//! - An RPC is not ordered with the one-sided ops of its batch: a READ that must follow a CAS
//!   goes in the CAS's request.
//!
//! Requests (little-endian, 8-byte fields after an 8-byte tag word):
//!
//! ```text
//! LOCK    tag=1 | addr | expect | new | read_addr | read_len
//!                                                  -> status | old | the READ (if swapped)
//! READ    tag=2 | addr | len                       -> status | bytes
//! WRITE   tag=3 | addr | bytes...                  -> status
//! SHARE   tag=4 | addr | read_addr | read_len | now | share_ns -> status | old | the READ (if granted)
//! UNSHARE tag=5 | addr                             -> status | old
//! RAISE   tag=6 | addr | ts | read_addr | read_len -> status | old | the READ
//! TICKET  tag=7 | grant addr | ts | limit | journal -> status | GRANT before | UPPER
//! ```
//!
//! TICKET is Scythe's takeout-lock grant ([`super::takeout`]).
//!
//! SHARE takes a read share of a 2PL lock word (one share more, if no one holds it
//! exclusively: status [`OK`], else [`NO`]) and UNSHARE gives one back (the word goes to 0
//! with the last): the memory node's CPU does in one request what one-sided verbs do with a
//! CAS from a guessed count (tried again when the guess was wrong), and a FAA then a CAS.
//!
//! RAISE is MVCC's read-timestamp raise: the word at `addr` goes up to `ts` unless it is
//! there already or frozen (bit 63), and the READ follows: what one-sided verbs do with a CAS
//! from the word last seen, tried again from the word it found, in one request that always
//! finishes (RCC's RPC read, which checks and raises at the memory node).
//!
//! A request that does not fit the region (or a misaligned CAS) is answered with status
//! [`BAD`], never a panic: a memory node serves whoever reaches it.

use super::share;
#[cfg(test)]
use super::{INVISIBLE, SHARED};
use dtxn_fabric::{Endpoint, LocalMem, NodeId, OpId, RpcHandler};

const LOCK: u64 = 1;
const READ: u64 = 2;
const WRITE: u64 = 3;
const SHARE: u64 = 4;
const UNSHARE: u64 = 5;
const RAISE: u64 = 6;
/// RAISE: a word with this bit set is frozen (not raised).
pub(crate) const FROZEN: u64 = 1 << 63;
/// Response statuses (the first response word).
const OK: u64 = 0;
const BAD: u64 = 1;
/// SHARE: not granted (the word is held exclusively).
const NO: u64 = 2;
/// Bytes before a response's payload.
const LOCK_REPLY: usize = 16;
const READ_REPLY: usize = 8;

/// The memory nodes' handlers of the mechanisms' RPC forms: what a memory node (`dtxn
/// memnode`, or a `sim`/`shm` pool) installs to serve them.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryNodeHandlers;

#[inline]
fn word(req: &[u8], i: usize) -> Option<u64> {
    let b = req.get(8 * i..8 * i + 8)?;
    Some(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

fn fits(mem: &dyn LocalMem, addr: u64, len: u64) -> bool {
    addr.checked_add(len).is_some_and(|end| end <= mem.size())
}

impl MemoryNodeHandlers {
    /// Serves one request into `resp`; `None` for a malformed one.
    fn serve(mem: &mut dyn LocalMem, req: &[u8], resp: &mut Vec<u8>) -> Option<()> {
        match word(req, 0)? {
            LOCK => {
                let (addr, expect, new) = (word(req, 1)?, word(req, 2)?, word(req, 3)?);
                let (read_addr, len) = (word(req, 4)?, word(req, 5)?);
                if !addr.is_multiple_of(8) || !fits(mem, addr, 8) || !fits(mem, read_addr, len) {
                    return None;
                }
                let old = mem.cas(addr, expect, new);
                resp.extend_from_slice(&OK.to_le_bytes());
                resp.extend_from_slice(&old.to_le_bytes());
                if old == expect && len > 0 {
                    let at = resp.len();
                    resp.resize(at + len as usize, 0);
                    mem.read(read_addr, &mut resp[at..]);
                }
            }
            READ => {
                let (addr, len) = (word(req, 1)?, word(req, 2)?);
                if !fits(mem, addr, len) {
                    return None;
                }
                resp.extend_from_slice(&OK.to_le_bytes());
                let at = resp.len();
                resp.resize(at + len as usize, 0);
                mem.read(addr, &mut resp[at..]);
            }
            WRITE => {
                let addr = word(req, 1)?;
                let bytes = &req[16..];
                if !fits(mem, addr, bytes.len() as u64) {
                    return None;
                }
                mem.write(addr, bytes);
                resp.extend_from_slice(&OK.to_le_bytes());
            }
            SHARE => {
                let (addr, read_addr, len) = (word(req, 1)?, word(req, 2)?, word(req, 3)?);
                if !addr.is_multiple_of(8) || !fits(mem, addr, 8) || !fits(mem, read_addr, len) {
                    return None;
                }
                // The requester's share terms (its clock and its shares' length; a length of
                // 0: it holds no lease, and shares never expire): the word is judged by them,
                // as the requester's own CAS would judge it.
                let terms = share_terms(word(req, 4)?, word(req, 5)?);
                let (granted, old) = loop {
                    let w = mem.read_u64(addr);
                    let Some(new) = share::one_more(w, terms) else {
                        break (false, w);
                    };
                    if mem.cas(addr, w, new) == w {
                        break (true, w);
                    }
                };
                resp.extend_from_slice(&(if granted { OK } else { NO }).to_le_bytes());
                resp.extend_from_slice(&old.to_le_bytes());
                if granted && len > 0 {
                    let at = resp.len();
                    resp.resize(at + len as usize, 0);
                    mem.read(read_addr, &mut resp[at..]);
                }
            }
            UNSHARE => {
                let addr = word(req, 1)?;
                if !addr.is_multiple_of(8) || !fits(mem, addr, 8) {
                    return None;
                }
                let old = loop {
                    let w = mem.read_u64(addr);
                    let new = share::one_less(w)?;
                    if mem.cas(addr, w, new) == w {
                        break w;
                    }
                };
                resp.extend_from_slice(&OK.to_le_bytes());
                resp.extend_from_slice(&old.to_le_bytes());
            }
            super::takeout::TICKET => super::takeout::serve(mem, req, resp)?,
            RAISE => {
                let (addr, ts, read_addr, len) =
                    (word(req, 1)?, word(req, 2)?, word(req, 3)?, word(req, 4)?);
                if !addr.is_multiple_of(8) || !fits(mem, addr, 8) || !fits(mem, read_addr, len) {
                    return None;
                }
                let old = loop {
                    let w = mem.read_u64(addr);
                    if w & FROZEN != 0 || w >= ts || mem.cas(addr, w, ts) == w {
                        break w;
                    }
                };
                resp.extend_from_slice(&OK.to_le_bytes());
                resp.extend_from_slice(&old.to_le_bytes());
                let at = resp.len();
                resp.resize(at + len as usize, 0);
                mem.read(read_addr, &mut resp[at..]);
            }
            _ => return None,
        }
        Some(())
    }
}

/// A SHARE request's terms (`share_ns` 0: none). The guard is the requester's to apply.
fn share_terms(now_ns: u64, share_ns: u64) -> Option<share::Terms> {
    (share_ns > 0).then_some(share::Terms {
        now_ns,
        share_ns,
        guard_ns: 0,
    })
}

impl RpcHandler for MemoryNodeHandlers {
    fn handle(
        &self,
        _node: NodeId,
        _now_ns: u64,
        mem: &mut dyn LocalMem,
        req: &[u8],
        resp: &mut Vec<u8>,
    ) {
        let at = resp.len();
        if Self::serve(mem, req, resp).is_none() {
            resp.truncate(at);
            resp.extend_from_slice(&BAD.to_le_bytes());
        }
    }
}

/// How a stage's verbs travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    OneSided,
    Rpc,
}

impl Via {
    #[inline]
    pub(crate) fn rpc(yes: bool) -> Via {
        if yes {
            Via::Rpc
        } else {
            Via::OneSided
        }
    }
}

/// A lock attempt, CAS(`expect` -> `new`) on a word and, if asked, a READ of `(addr, len)`
/// executed after the CAS: CAS + READ in one batch (G6), or one RPC whose handler does both.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CasRead {
    Verbs {
        cas: OpId,
        read: Option<OpId>,
    },
    Rpc {
        id: OpId,
        expect: u64,
    },
    /// A SHARE request: the memory node decided.
    Share {
        id: OpId,
    },
}

impl CasRead {
    #[inline]
    pub(crate) fn post(
        ep: &mut Endpoint,
        via: Via,
        node: NodeId,
        addr: u64,
        (expect, new): (u64, u64),
        read: Option<(u64, usize)>,
    ) -> CasRead {
        match via {
            Via::OneSided => {
                let cas = ep.cas(node, addr, expect, new);
                let read = read.map(|(at, len)| ep.read(node, at, len));
                CasRead::Verbs { cas, read }
            }
            Via::Rpc => {
                let (at, len) = read.unwrap_or((addr, 0));
                let mut req = [0u8; 48];
                for (i, w) in [LOCK, addr, expect, new, at, len as u64]
                    .into_iter()
                    .enumerate()
                {
                    req[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                }
                CasRead::Rpc {
                    id: ep.rpc(node, &req),
                    expect,
                }
            }
        }
    }

    /// A read share of the 2PL lock word at `addr`, taken on `terms` ([`share`]), and, if
    /// asked, a READ after it: CAS(the `expect`ed word -> one share more) + READ in one batch
    /// (tried again by the caller if the word was not as expected), or one SHARE request.
    #[inline]
    pub(crate) fn share(
        ep: &mut Endpoint,
        via: Via,
        node: NodeId,
        addr: u64,
        expect: u64,
        terms: Option<share::Terms>,
        read: Option<(u64, usize)>,
    ) -> CasRead {
        match via {
            Via::OneSided => {
                // (The caller retries only a word that takes one more share.)
                let new = share::one_more(expect, terms).unwrap_or(expect);
                CasRead::post(ep, via, node, addr, (expect, new), read)
            }
            Via::Rpc => {
                let (at, len) = read.unwrap_or((addr, 0));
                let (now, length) = terms.map_or((0, 0), |t| (t.now_ns, t.share_ns));
                let mut req = [0u8; 48];
                for (i, w) in [SHARE, addr, at, len as u64, now, length]
                    .into_iter()
                    .enumerate()
                {
                    req[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                }
                CasRead::Share {
                    id: ep.rpc(node, &req),
                }
            }
        }
    }

    /// MVCC's raise of the read-timestamp word at `addr` to `ts` (from `seen`, the word last
    /// seen) and, if asked, a READ after it: CAS(`seen` -> `ts`) + READ in one batch (tried
    /// again by the caller from the word found), or one RAISE request, which raises whatever
    /// the word holds (unless frozen or high enough) and always READs. Its `old` is the word
    /// before; [`CasRead::swapped`] says whether that was `seen`.
    #[inline]
    pub(crate) fn raise(
        ep: &mut Endpoint,
        via: Via,
        node: NodeId,
        addr: u64,
        (seen, ts): (u64, u64),
        read: Option<(u64, usize)>,
    ) -> CasRead {
        match via {
            Via::OneSided => CasRead::post(ep, via, node, addr, (seen, ts), read),
            Via::Rpc => {
                let (at, len) = read.unwrap_or((addr, 0));
                let mut req = [0u8; 40];
                for (i, w) in [RAISE, addr, ts, at, len as u64].into_iter().enumerate() {
                    req[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                }
                CasRead::Rpc {
                    id: ep.rpc(node, &req),
                    expect: seen,
                }
            }
        }
    }

    /// Whether this is served by a memory node's CPU (a RAISE then raised whatever it found).
    #[inline]
    pub(crate) fn is_rpc(&self) -> bool {
        !matches!(self, CasRead::Verbs { .. })
    }

    /// Whether the CAS swapped (a malformed reply counts as not).
    #[inline]
    pub(crate) fn swapped(&self, ep: &Endpoint) -> bool {
        match *self {
            CasRead::Verbs { cas, .. } => ep.cas_ok(cas),
            CasRead::Rpc { id, expect } => reply_word(ep, id, 1) == Some(expect),
            CasRead::Share { id } => reply_word(ep, id, 0) == Some(OK),
        }
    }

    /// The word the CAS found (`None` for a malformed reply).
    #[inline]
    pub(crate) fn old(&self, ep: &Endpoint) -> Option<u64> {
        match *self {
            CasRead::Verbs { cas, .. } => Some(ep.old(cas)),
            CasRead::Rpc { id, .. } | CasRead::Share { id } => match reply_word(ep, id, 0) {
                Some(OK | NO) => reply_word(ep, id, 1),
                _ => None,
            },
        }
    }

    /// The bytes the READ after the CAS returned (for an RPC: only if the CAS swapped; a
    /// RAISE's always).
    #[inline]
    pub(crate) fn bytes<'e>(&self, ep: &'e Endpoint) -> &'e [u8] {
        match *self {
            CasRead::Verbs { read, .. } => read.map_or(&[], |r| ep.bytes(r)),
            CasRead::Rpc { id, .. } | CasRead::Share { id } => {
                ep.bytes(id).get(LOCK_REPLY..).unwrap_or(&[])
            }
        }
    }
}

/// Gives back a read share of the 2PL lock word at `addr`, taken as `held` (the word right
/// after its CAS), posted: FAA(-1) then CAS(the word of no shares -> 0) (so that the last
/// share leaves the word free as writers expect it; if someone took a share or the lock in
/// between, or raised the expiry, the CAS fails and changes nothing: a word of no shares is
/// free all the same), or one UNSHARE request.
#[inline]
pub(crate) fn unshare(ep: &mut Endpoint, via: Via, node: NodeId, addr: u64, held: u64) {
    match via {
        Via::OneSided => {
            ep.faa(node, addr, u64::MAX);
            ep.cas(node, addr, share::drained(held), 0);
        }
        Via::Rpc => {
            let mut req = [0u8; 16];
            for (i, w) in [UNSHARE, addr].into_iter().enumerate() {
                req[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
            }
            ep.rpc(node, &req);
        }
    }
}

/// A READ, one-sided or by RPC.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Read {
    Verb(OpId),
    Rpc(OpId),
}

impl Read {
    #[inline]
    pub(crate) fn post(ep: &mut Endpoint, via: Via, node: NodeId, addr: u64, len: usize) -> Read {
        match via {
            Via::OneSided => Read::Verb(ep.read(node, addr, len)),
            Via::Rpc => {
                let mut req = [0u8; 24];
                for (i, w) in [READ, addr, len as u64].into_iter().enumerate() {
                    req[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                }
                Read::Rpc(ep.rpc(node, &req))
            }
        }
    }

    /// The bytes read (empty for a malformed reply).
    #[inline]
    pub(crate) fn bytes<'e>(&self, ep: &'e Endpoint) -> &'e [u8] {
        match *self {
            Read::Verb(r) => ep.bytes(r),
            Read::Rpc(id) => match reply_word(ep, id, 0) {
                Some(OK) => &ep.bytes(id)[READ_REPLY..],
                _ => &[],
            },
        }
    }
}

/// A WRITE of `bytes`, one-sided or by RPC.
// Always inlined: the commit's and the release's WRITEs go through here, and a call per WRITE
// (with its slice of parts) cost 3% of a SmallBank transaction's instructions.
#[inline(always)]
pub(crate) fn write(ep: &mut Endpoint, via: Via, node: NodeId, addr: u64, bytes: &[u8]) {
    match via {
        Via::OneSided => {
            ep.write(node, addr, bytes);
        }
        Via::Rpc => write_rpc(ep, node, addr, &[bytes]),
    }
}

/// A WRITE of the concatenation of `parts`, one-sided or by RPC.
#[inline(always)]
pub(crate) fn write_parts(ep: &mut Endpoint, via: Via, node: NodeId, addr: u64, parts: &[&[u8]]) {
    match via {
        Via::OneSided => {
            ep.write_parts(node, addr, parts);
        }
        Via::Rpc => write_rpc(ep, node, addr, parts),
    }
}

/// [`write_parts`] as an RPC: out of line, so that the one-sided form stays a plain WRITE
/// where it is inlined (the commit's and release's hot paths).
#[inline(never)]
fn write_rpc(ep: &mut Endpoint, node: NodeId, addr: u64, parts: &[&[u8]]) {
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&WRITE.to_le_bytes());
    head[8..].copy_from_slice(&addr.to_le_bytes());
    match parts {
        [a] => ep.rpc_parts(node, &[&head, a]),
        [a, b] => ep.rpc_parts(node, &[&head, a, b]),
        _ => {
            let mut all: Vec<&[u8]> = vec![&head];
            all.extend_from_slice(parts);
            ep.rpc_parts(node, &all)
        }
    };
}

#[inline]
fn reply_word(ep: &Endpoint, id: OpId, i: usize) -> Option<u64> {
    word(ep.bytes(id), i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region as a memory node's CPU sees it, for the handlers alone.
    struct Mem(Vec<u8>);

    impl LocalMem for Mem {
        fn size(&self) -> u64 {
            self.0.len() as u64
        }
        fn read(&mut self, addr: u64, buf: &mut [u8]) {
            buf.copy_from_slice(&self.0[addr as usize..addr as usize + buf.len()]);
        }
        fn write(&mut self, addr: u64, data: &[u8]) {
            self.0[addr as usize..addr as usize + data.len()].copy_from_slice(data);
        }
        fn cas(&mut self, addr: u64, expect: u64, new: u64) -> u64 {
            let old = self.read_u64(addr);
            if old == expect {
                self.write_u64(addr, new);
            }
            old
        }
        fn faa(&mut self, addr: u64, add: u64) -> u64 {
            let old = self.read_u64(addr);
            self.write_u64(addr, old.wrapping_add(add));
            old
        }
    }

    fn req(words: &[u64], tail: &[u8]) -> Vec<u8> {
        let mut r: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        r.extend_from_slice(tail);
        r
    }

    fn serve(mem: &mut Mem, r: &[u8]) -> Vec<u8> {
        let mut resp = vec![0xee]; // a response appends after what is there
        MemoryNodeHandlers.handle(0, 0, mem, r, &mut resp);
        resp.remove(0);
        resp
    }

    #[test]
    fn a_lock_reads_after_its_cas_and_only_if_it_swapped() {
        let mut mem = Mem((0..128u8).collect());
        let word0 = mem.read_u64(64);
        // CAS the word at 64 from its value to 7, then READ 16 bytes at 72.
        let r = serve(&mut mem, &req(&[LOCK, 64, word0, 7, 72, 16], &[]));
        assert_eq!(r.len(), 16 + 16);
        assert_eq!(word(&r, 0), Some(OK));
        assert_eq!(word(&r, 1), Some(word0));
        assert_eq!(&r[16..], &(72..88u8).collect::<Vec<_>>()[..]);
        assert_eq!(mem.read_u64(64), 7);
        // It fails now (the word is 7): the old value, no READ.
        let r = serve(&mut mem, &req(&[LOCK, 64, word0, 9, 64, 8], &[]));
        assert_eq!((r.len(), word(&r, 1)), (16, Some(7)));
        // A READ after the CAS of the word itself sees the new value.
        let r = serve(&mut mem, &req(&[LOCK, 64, 7, 5, 64, 8], &[]));
        assert_eq!(word(&r, 2), Some(5));
    }

    #[test]
    fn a_raise_raises_unless_frozen_or_high_enough_and_always_reads_after() {
        let mut mem = Mem(vec![0; 64]);
        mem.write_u64(8, 5);
        mem.write_u64(16, 0xabcd);
        let raise = |mem: &mut Mem, ts| serve(mem, &req(&[RAISE, 8, ts, 8, 16], &[]));
        // Up from 5 to 9, whatever the coordinator last saw; the READ sees the raise.
        let r = raise(&mut mem, 9);
        assert_eq!(
            (word(&r, 0), word(&r, 1), word(&r, 2)),
            (Some(OK), Some(5), Some(9))
        );
        assert_eq!(word(&r, 3), Some(0xabcd));
        // Never down.
        let r = raise(&mut mem, 7);
        assert_eq!((word(&r, 1), mem.read_u64(8)), (Some(9), 9));
        // A frozen word stays as it is.
        mem.write_u64(8, FROZEN | 3);
        let r = raise(&mut mem, 20);
        assert_eq!(
            (word(&r, 1), mem.read_u64(8)),
            (Some(FROZEN | 3), FROZEN | 3)
        );
        // Misaligned: BAD.
        assert_eq!(
            serve(&mut mem, &req(&[RAISE, 3, 1, 0, 0], &[])),
            req(&[BAD], &[])
        );
    }

    #[test]
    fn reads_and_writes_touch_exactly_their_bytes() {
        let mut mem = Mem(vec![0; 64]);
        assert_eq!(
            serve(&mut mem, &req(&[WRITE, 8], &[1, 2, 3])),
            req(&[OK], &[])
        );
        assert_eq!(&mem.0[7..12], &[0, 1, 2, 3, 0]);
        let r = serve(&mut mem, &req(&[READ, 8, 3], &[]));
        assert_eq!(r, req(&[OK], &[1, 2, 3]));
    }

    #[test]
    fn share_grants_read_shares_until_a_writer_holds_the_word_and_unshare_frees_the_last() {
        let mut mem = Mem(vec![0; 64]);
        mem.write_u64(8, 0xabcd);
        let share = |mem: &mut Mem| serve(mem, &req(&[SHARE, 0, 8, 8, 0, 0], &[]));
        // Two shares of a free word, each with its READ after it.
        assert_eq!(share(&mut mem), req(&[OK, 0, 0xabcd], &[]));
        assert_eq!(share(&mut mem), req(&[OK, SHARED | 1, 0xabcd], &[]));
        assert_eq!(mem.read_u64(0), SHARED | 2);
        // Both given back: the word is free (0), not a `SHARED` with no shares.
        let unshare = |mem: &mut Mem| serve(mem, &req(&[UNSHARE, 0], &[]));
        assert_eq!(unshare(&mut mem), req(&[OK, SHARED | 2], &[]));
        assert_eq!(unshare(&mut mem), req(&[OK, SHARED | 1], &[]));
        assert_eq!(mem.read_u64(0), 0);
        // A word held exclusively (or being installed) grants no share and reads nothing.
        for held in [7, 7 | INVISIBLE] {
            mem.write_u64(0, held);
            assert_eq!(share(&mut mem), req(&[NO, held], &[]));
            assert_eq!(mem.read_u64(0), held);
            // Nor does a word with no share of ours take an UNSHARE.
            assert_eq!(unshare(&mut mem), req(&[BAD], &[]));
        }
    }

    #[test]
    fn share_counts_stay_below_the_flags() {
        use share::{one_more, COUNT};
        assert_eq!(one_more(0, None), Some(SHARED | 1));
        assert_eq!(one_more(SHARED, None), Some(SHARED | 1));
        assert_eq!(one_more(SHARED | (COUNT - 1), None), Some(SHARED | COUNT));
        assert_eq!(one_more(SHARED | COUNT, None), None);
        assert_eq!(one_more(5, None), None);
        assert_eq!(share::one_less(SHARED | 1), Some(0));
        assert_eq!(share::one_less(SHARED | 3), Some(SHARED | 2));
        assert_eq!(share::one_less(SHARED), None);
        assert_eq!(share::one_less(0), None);
    }

    #[test]
    fn share_judges_the_word_by_the_requesters_terms_and_starts_over_a_void_count() {
        let mut mem = Mem(vec![0; 64]);
        let share =
            |mem: &mut Mem, now: u64| serve(mem, &req(&[SHARE, 0, 8, 0, now, 1 << 20], &[]));
        // A share taken at 0 lasts about 2^20 ns; another joins it before that.
        assert_eq!(share(&mut mem, 0), req(&[OK, 0], &[]));
        let first = mem.read_u64(0);
        assert_eq!(share::count(first), 1);
        assert_eq!(share(&mut mem, 1000), req(&[OK, first], &[]));
        assert_eq!(share::count(mem.read_u64(0)), 2);
        // Once the expiry has come, both are void: the next share counts alone.
        let held = mem.read_u64(0);
        assert_eq!(share(&mut mem, 4 << 20), req(&[OK, held], &[]));
        assert_eq!(share::count(mem.read_u64(0)), 1);
    }

    #[test]
    fn a_malformed_request_is_answered_bad_never_a_panic() {
        let mut mem = Mem(vec![0; 64]);
        for r in [
            vec![],
            req(&[99], &[]),
            req(&[READ, 60, 8], &[]),
            req(&[READ, u64::MAX, 2], &[]),
            req(&[LOCK, 4, 0, 1, 0, 0], &[]),
            req(&[LOCK, 64, 0, 1, 0, 0], &[]),
            req(&[LOCK, 0, 0, 1, 60, 8], &[]),
            req(&[LOCK, 0, 0], &[]),
            req(&[WRITE, 62], &[1, 2, 3]),
            req(&[SHARE, 4, 0, 0, 0, 0], &[]),
            req(&[SHARE, 0, 60, 8, 0, 0], &[]),
            req(&[SHARE, 0, 8, 8], &[]),
            req(&[UNSHARE, 64], &[]),
            req(&[UNSHARE, 0], &[]),
        ] {
            assert_eq!(serve(&mut mem, &r), req(&[BAD], &[]), "{r:?}");
        }
        assert_eq!(mem.0, vec![0; 64], "a bad request changes nothing");
    }
}
