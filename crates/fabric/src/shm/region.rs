//! One memory node's region: a mapping, its layout, and the seqlocks that make READ and WRITE
//! atomic per 64-byte line.
//!
//! The byte layout is documented on the `shm` module.
//!
//! # Seqlocks, one per group of lines
//!
//! One sequence word guards each aligned group of [`GROUP_LINES`] lines (512 bytes). It is even
//! when the group is stable and odd while someone (a WRITE, CAS or FAA, from any thread or
//! process) changes it. Writers take it with a CAS even -> odd, store their words, and release
//! with `seq + 2` (a CAS that swapped nothing restores `seq`, so that polling a lock word does
//! not make READs of its group retry). Readers copy the words between two loads of the sequence
//! and retry if it was odd or moved. Every access to the mapped words is atomic (relaxed loads
//! and stores ordered by the sequence word), so concurrent access from other threads and
//! processes is defined behaviour, and no READ sees a line half written.
//!
//! Why groups and not one word per line: a record (a TPC-C stock row is 384 bytes, a hash bucket
//! 576) spans several lines, and each sequence word is a cache miss and a locked instruction of
//! its own. Measured on TPC-C with per-line words, the sequence traffic was the largest single
//! cost of the backend; per group, a record costs one or two. Guarding more than the contract's
//! line is only stronger (a group is read and written as a unit); the price is false sharing
//! between neighbouring records, which hold their group for a few stores at most.
//!
//! A process that dies while holding a group leaves it odd: every later access to that group
//! spins forever. [`super::ShmPool::create`] re-initialises the files; nothing repairs them in
//! place.

use crate::verbs::LINE;
use crate::FabricError;
use memmap2::{MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};

pub(super) const MAGIC: [u8; 8] = *b"DTXNSHM1";
/// The region layout (see the `shm` module docs); bump on any change: `open` refuses other
/// versions.
pub const LAYOUT_VERSION: u64 = 2;
pub(super) const HEADER_BYTES: u64 = 4096;
const PAGE: u64 = 4096;
const WORD: u64 = 8;
const WORDS_PER_LINE: usize = (LINE / WORD) as usize;
/// Lines guarded by one sequence word.
pub(super) const GROUP_LINES: u64 = 8;
const GROUP: u64 = GROUP_LINES * LINE;

// Alignment is tested with masks (`is_multiple_of` needs Rust 1.87; the MSRV is 1.85).
const _: () = assert!(LINE.is_power_of_two() && WORD.is_power_of_two() && LINE >= WORD);
const _: () = assert!(GROUP_LINES.is_power_of_two());
const _: () = assert!(HEADER_BYTES & (PAGE - 1) == 0 && HEADER_BYTES >= 4 * WORD);

/// Bytes of the sequence array for `lines` lines: one word per group, rounded up to a page.
fn seq_bytes(lines: u64) -> u64 {
    (lines.div_ceil(GROUP_LINES) * WORD).div_ceil(PAGE) * PAGE
}

/// Total mapping size for a region of `size` data bytes.
pub(super) fn mapping_bytes(size: u64) -> u64 {
    HEADER_BYTES + seq_bytes(size / LINE) + size
}

/// Sizes must be positive multiples of a line: the seqlocks cover whole lines.
pub(super) fn check_size(node: usize, size: u64) -> Result<(), FabricError> {
    if size == 0 || size & (LINE - 1) != 0 {
        return Err(FabricError::Setup(format!(
            "memory node {node}: region size {size} is not a positive multiple of {LINE} bytes"
        )));
    }
    // Leave room for the header and the sequence words without overflowing u64 or usize.
    if size > u64::MAX / 4 || usize::try_from(mapping_bytes(size)).is_err() {
        return Err(FabricError::Setup(format!(
            "memory node {node}: region size {size} is too large to map"
        )));
    }
    Ok(())
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> FabricError {
    FabricError::Setup(format!("{what} {}: {e}", path.display()))
}

/// A mapped region. All unsafe code of the backend lives in this type.
pub(super) struct Region {
    /// Keeps the mapping alive (and unmaps it on drop); `base` points into it.
    map: MmapRaw,
    base: *mut u8,
    /// Offset of the data from `base`.
    data_off: usize,
    size: u64,
    /// Mapped from a file: [`Region::persist`] has something to write back.
    file: bool,
}

// SAFETY: `Region` only hands out shared references to `AtomicU64`s inside the mapping, which
// are `Sync`; `base` is never used for non-atomic access after construction, and the mapping
// lives (unmoved: mmap memory does not move with the `MmapRaw` handle) as long as the `Region`.
unsafe impl Send for Region {}
// SAFETY: as above: every access through `&Region` is atomic.
unsafe impl Sync for Region {}

impl Region {
    fn from_map(map: MmapRaw, size: u64, file: bool) -> Region {
        let base = map.as_mut_ptr();
        debug_assert_eq!(base as usize % PAGE as usize, 0, "mmap is page-aligned");
        debug_assert_eq!(map.len() as u64, mapping_bytes(size));
        Region {
            base,
            data_off: (HEADER_BYTES + seq_bytes(size / LINE)) as usize,
            size,
            file,
            map,
        }
    }

    /// Anonymous memory: this process only, zero-filled. Populated (faulted in) at once, as
    /// an RDMA NIC's registered memory region is pinned before use: otherwise the first touch
    /// of every page (a TPC-C run inserts into fresh pages all along) costs the run a page
    /// fault and a page clear, a quarter of its CPU. On transparent huge pages where the
    /// kernel gives them (as NICs register memory on huge pages), else on plain pages.
    pub(super) fn anon(node: usize, size: u64) -> Result<Region, FabricError> {
        Region::anon_on(node, size, true)
    }

    /// [`Region::anon`], trying huge pages only with `huge` (tests take both paths).
    fn anon_on(node: usize, size: u64, huge: bool) -> Result<Region, FabricError> {
        check_size(node, size)?;
        let len = mapping_bytes(size) as usize;
        let map_err = |e: std::io::Error| {
            FabricError::Setup(format!(
                "memory node {node}: cannot map {len} bytes of anonymous memory: {e}"
            ))
        };
        let map = match huge.then(|| huge_anon(len)).flatten() {
            Some(map) => map,
            None => MmapOptions::new()
                .len(len)
                .populate()
                .map_anon()
                .map_err(map_err)?,
        };
        let r = Region::from_map(MmapRaw::from(map), size, false);
        r.write_header();
        Ok(r)
    }

    /// Creates (or truncates and re-initialises) the file of memory node `node`.
    pub(super) fn create_file(node: usize, path: &Path, size: u64) -> Result<Region, FabricError> {
        check_size(node, size)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| io_err("cannot create", path, e))?;
        // Truncated to zero first, so the whole region (sequence words included) reads as zeroes.
        file.set_len(mapping_bytes(size))
            .map_err(|e| io_err("cannot size", path, e))?;
        let map = MmapOptions::new()
            .map_raw(&file)
            .map_err(|e| io_err("cannot map", path, e))?;
        let r = Region::from_map(map, size, true);
        r.write_header();
        Ok(r)
    }

    /// Attaches to the existing file of memory node `node`, checking its header.
    pub(super) fn open_file(node: usize, path: &Path) -> Result<Region, FabricError> {
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err(&format!("memory node {node}: cannot open"), path, e))?;
        let len = file
            .metadata()
            .map_err(|e| io_err("cannot stat", path, e))?
            .len();
        let bad = |why: String| {
            FabricError::Setup(format!("memory node {node} file {} {why}", path.display()))
        };
        if len < HEADER_BYTES {
            return Err(bad(format!(
                "is {len} bytes, too short for the {HEADER_BYTES}-byte header"
            )));
        }
        let map = MmapOptions::new()
            .map_raw(&file)
            .map_err(|e| io_err("cannot map", path, e))?;
        if map.len() as u64 != len {
            return Err(bad(format!(
                "changed size while being mapped ({len} bytes)"
            )));
        }
        let h = |i: usize| {
            // SAFETY: the mapping is page-aligned and at least HEADER_BYTES long (checked above),
            // so word `i < 4` is in bounds and 8-aligned; `map` outlives this use; other
            // processes touch the header only with atomic accesses.
            let w = unsafe { &*(map.as_ptr().add(i * 8) as *const AtomicU64) };
            u64::from_le(w.load(Ordering::Acquire))
        };
        let magic = h(0).to_le_bytes();
        if magic != MAGIC {
            return Err(bad(format!(
                "is not a dtxn shm region (magic {:?}, expected {:?})",
                String::from_utf8_lossy(&magic),
                String::from_utf8_lossy(&MAGIC)
            )));
        }
        let version = h(1);
        if version != LAYOUT_VERSION {
            return Err(bad(format!(
                "has layout v{version}, this binary reads v{LAYOUT_VERSION}"
            )));
        }
        let (size, lines) = (h(2), h(3));
        if size == 0 || size & (LINE - 1) != 0 || lines != size / LINE || size > u64::MAX / 4 {
            return Err(bad(format!(
                "has a corrupt header: {size} data bytes in {lines} lines"
            )));
        }
        if len != mapping_bytes(size) {
            return Err(bad(format!(
                "is {len} bytes, but its header describes {size} data bytes, which take {}",
                mapping_bytes(size)
            )));
        }
        Ok(Region::from_map(map, size, true))
    }

    /// Writes the header, magic last, so that a concurrent `open` sees either no region or a
    /// complete header.
    fn write_header(&self) {
        let h = |i: usize| {
            // SAFETY: the mapping is page-aligned and starts with the HEADER_BYTES header, so
            // word `i < 4` is in bounds and 8-aligned; `self.map` outlives the reference; all
            // accesses to mapped words are atomic.
            unsafe { &*(self.base.add(i * 8) as *const AtomicU64) }
        };
        h(1).store(LAYOUT_VERSION.to_le(), Ordering::Relaxed);
        h(2).store(self.size.to_le(), Ordering::Relaxed);
        h(3).store((self.size / LINE).to_le(), Ordering::Relaxed);
        h(0).store(u64::from_le_bytes(MAGIC).to_le(), Ordering::Release);
    }

    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// Writes the pages holding data bytes `addr..addr+len` back to the region's file and
    /// waits for the device (`msync(MS_SYNC)`): what a FLUSH means for a file-backed region.
    /// Returns the bytes written back (whole pages); anonymous memory has no file: 0.
    pub(super) fn persist(&self, addr: u64, len: u64) -> std::io::Result<u64> {
        if !self.file || len == 0 {
            return Ok(0);
        }
        self.check(addr, len);
        let from = (self.data_off as u64 + addr) & !(PAGE - 1);
        let to = (self.data_off as u64 + addr + len).div_ceil(PAGE) * PAGE;
        self.map.flush_range(from as usize, (to - from) as usize)?;
        Ok(to - from)
    }

    /// The region's bytes `addr..addr+len` must lie inside it: every accessor checks this first,
    /// which is what makes the pointer arithmetic below sound. Verbs are checked earlier (with
    /// an error) by `check_op`; reaching this panic is a bug of the caller of [`LocalMem`].
    ///
    /// [`LocalMem`]: crate::LocalMem
    #[inline]
    fn check(&self, addr: u64, len: u64) {
        assert!(
            addr.checked_add(len).is_some_and(|end| end <= self.size),
            "access at {addr:#x}+{len} is outside the {}-byte region",
            self.size
        );
    }

    /// The sequence word of group `group` (data bytes `group * GROUP..`). Callers guarantee
    /// `group * GROUP < size`.
    #[inline]
    fn seq(&self, group: u64) -> &AtomicU64 {
        debug_assert!(group * GROUP < self.size);
        // SAFETY: `group * GROUP < size` (callers bounds-check their byte range first), so the
        // word lies inside the sequence array (`seq_bytes` holds one word per started group),
        // which starts at the page-aligned HEADER_BYTES offset and is 8-aligned; the mapping
        // lives as long as `&self`; the mapped words are only ever accessed atomically, by this
        // and other processes.
        unsafe { &*(self.base.add(HEADER_BYTES as usize + group as usize * 8) as *const AtomicU64) }
    }

    /// Data word `w` (byte address `8 w`). Callers guarantee `8 w < size`.
    #[inline]
    fn word(&self, w: u64) -> &AtomicU64 {
        debug_assert!(w * WORD < self.size);
        // SAFETY: `8 w < size` (callers bounds-check their byte range first); the data starts at
        // a page-aligned offset, so the word is in bounds and 8-aligned; the mapping lives as
        // long as `&self`; the mapped words are only ever accessed atomically, by this and other
        // processes.
        unsafe { &*(self.base.add(self.data_off + w as usize * 8) as *const AtomicU64) }
    }

    /// Data words `w..w+n` (byte addresses `8 w..8 (w+n)`). Callers guarantee `8 (w+n) <= size`.
    #[inline]
    fn words_at(&self, w: u64, n: usize) -> &[AtomicU64] {
        debug_assert!((w + n as u64) * WORD <= self.size);
        // SAFETY: as for `word`, for each of the `n` consecutive words, all in bounds since
        // the last one is.
        unsafe {
            std::slice::from_raw_parts(
                self.base.add(self.data_off + w as usize * 8) as *const AtomicU64,
                n,
            )
        }
    }

    /// Takes group `group`'s seqlock; returns the (even) sequence value it held.
    #[inline]
    fn lock(&self, group: u64) -> u64 {
        let seq = self.seq(group);
        let mut spins = 0;
        loop {
            let s = seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && seq
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Orders the odd sequence before our data stores: a reader that sees any of them
                // then sees the sequence changed (its Acquire fence pairs with this one).
                fence(Ordering::Release);
                return s;
            }
            backoff(&mut spins);
        }
    }

    #[inline]
    fn unlock(&self, group: u64, seq: u64) {
        self.seq(group).store(seq, Ordering::Release);
    }

    /// Asks the CPU to start loading the lines of `addr..addr+len` and their sequence words
    /// into its cache, without waiting: a batch prefetches every op before executing any, so
    /// that its cache misses overlap instead of following one another (an op's time is mostly
    /// the miss on its sequence word and its first line). A hint only: it changes no memory,
    /// and addresses outside the region are skipped. (Prefetching the lines of WRITEs in
    /// exclusive state, PREFETCHW, measured no different on TPC-C.)
    #[inline]
    pub(super) fn prefetch(&self, addr: u64, len: u64) {
        if len == 0 || addr.checked_add(len).is_none_or(|end| end > self.size) {
            return;
        }
        // Every op takes its groups' sequence words with a store (writers) or reads them
        // (readers); 8 words share a cache line.
        let (g0, g1) = (addr / GROUP, (addr + len - 1) / GROUP);
        let mut g = g0;
        while g <= g1 {
            prefetch_line(self.seq(g) as *const AtomicU64 as *const u8);
            g = (g / WORDS_PER_LINE as u64 + 1) * WORDS_PER_LINE as u64;
        }
        for l in addr / LINE..=(addr + len - 1) / LINE {
            let p = self.word(l * WORDS_PER_LINE as u64) as *const AtomicU64 as *const u8;
            prefetch_line(p);
        }
    }

    /// Copies `dst.len()` bytes from `addr`, each group of lines atomically, groups in address
    /// order.
    pub(super) fn read(&self, addr: u64, dst: &mut [u8]) {
        self.check(addr, dst.len() as u64);
        if aligned(addr, dst.len()) {
            return self.read_words(addr, dst);
        }
        for (a, span) in group_spans(addr, dst.len()) {
            self.read_in_group(a, &mut dst[span]);
        }
    }

    /// [`read`](Self::read) of whole words (every record and bucket READ: slots are
    /// 64-byte aligned): the same group-by-group copy without the edge handling, whose
    /// iterators cost more than the copy on a typical 300-byte record.
    #[inline]
    fn read_words(&self, mut addr: u64, mut dst: &mut [u8]) {
        // A loop rather than `group_spans`: its iterator adapters cost 2% of a TPC-C
        // transaction's instructions here.
        while !dst.is_empty() {
            let group = addr / GROUP;
            let n = (((group + 1) * GROUP - addr) as usize).min(dst.len());
            let (out, rest) = dst.split_at_mut(n);
            let src = self.words_at(addr / WORD, n / WORD as usize);
            self.stable_read(group, || {
                for (o, w) in out.chunks_exact_mut(WORD as usize).zip(src) {
                    o.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
                }
            });
            (addr, dst) = (addr + n as u64, rest);
        }
    }

    /// `addr..addr+dst.len()` lies inside one group and inside the region.
    #[inline]
    fn read_in_group(&self, addr: u64, dst: &mut [u8]) {
        let (whole, edges) = words(addr, dst.len());
        // Whole words go straight into `dst`, which is ours to overwrite on a retry: no staging
        // copy, whose 8-byte stores reloaded as wider vectors would stall store forwarding. The
        // (rare) unaligned edges go through one word each.
        let head = body_offset(addr, &whole, dst.len());
        self.stable_read(addr / GROUP, || {
            for (w, o) in whole.clone().zip(dst[head..].chunks_exact_mut(8)) {
                o.copy_from_slice(&self.word(w).load(Ordering::Relaxed).to_ne_bytes());
            }
            for w in edges.clone() {
                self.load_part(w, addr, dst);
            }
        });
    }

    /// Copies the bytes of word `w` that fall inside `addr..addr+dst.len()` into `dst`.
    #[inline]
    fn load_part(&self, w: u64, addr: u64, dst: &mut [u8]) {
        let wa = w * WORD;
        let (lo, hi) = (addr.max(wa), (addr + dst.len() as u64).min(wa + WORD));
        let b = self.word(w).load(Ordering::Relaxed).to_ne_bytes();
        dst[(lo - addr) as usize..(hi - addr) as usize]
            .copy_from_slice(&b[(lo - wa) as usize..(hi - wa) as usize]);
    }

    /// Runs `copy` (relaxed loads of group `group`'s words) until it ran while nobody changed
    /// the group.
    #[inline]
    fn stable_read(&self, group: u64, mut copy: impl FnMut()) {
        let seq = self.seq(group);
        let mut spins = 0;
        loop {
            let s = seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                copy();
                // Pairs with the writer's Release fence: if we saw any of its stores, the reload
                // below sees its odd (or a later) sequence value.
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == s {
                    return;
                }
            }
            backoff(&mut spins);
        }
    }

    /// Stores `src` at `addr`, group by group in increasing address order, each group
    /// atomically.
    pub(super) fn write(&self, addr: u64, src: &[u8]) {
        self.check(addr, src.len() as u64);
        if aligned(addr, src.len()) {
            return self.write_words(addr, src);
        }
        for (a, span) in group_spans(addr, src.len()) {
            self.write_in_group(a, &src[span]);
        }
    }

    /// [`write`](Self::write) of whole words (every record WRITE), as
    /// [`read_words`](Self::read_words).
    #[inline]
    fn write_words(&self, mut addr: u64, mut src: &[u8]) {
        while !src.is_empty() {
            let group = addr / GROUP;
            let n = (((group + 1) * GROUP - addr) as usize).min(src.len());
            let (part, rest) = src.split_at(n);
            let dst = self.words_at(addr / WORD, n / WORD as usize);
            let s = self.lock(group);
            // Nothing between lock and unlock can panic (see `write_in_group`).
            for (w, b) in dst.iter().zip(part.chunks_exact(WORD as usize)) {
                let mut word = [0u8; 8];
                word.copy_from_slice(b);
                w.store(u64::from_ne_bytes(word), Ordering::Relaxed);
            }
            self.unlock(group, s + 2);
            (addr, src) = (addr + n as u64, rest);
        }
    }

    /// `addr..addr+src.len()` lies inside one group and inside the region.
    #[inline]
    fn write_in_group(&self, addr: u64, src: &[u8]) {
        let (whole, edges) = words(addr, src.len());
        let body = &src[body_offset(addr, &whole, src.len())..];
        let group = addr / GROUP;
        let s = self.lock(group);
        // Nothing between lock and unlock can panic (the ranges are in bounds by construction):
        // a panic here would leave the group locked for good.
        for (w, part) in whole.zip(body.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(part);
            self.word(w).store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        for w in edges {
            self.store_part(w, addr, src);
        }
        self.unlock(group, s + 2);
    }

    /// Stores the bytes of `src` (placed at `addr`) that fall inside word `w`, keeping the
    /// word's other bytes: the caller holds the word's group, so this read-modify-write cannot
    /// lose anyone's update.
    #[inline]
    fn store_part(&self, w: u64, addr: u64, src: &[u8]) {
        let (wa, atom) = (w * WORD, self.word(w));
        let (lo, hi) = (addr.max(wa), (addr + src.len() as u64).min(wa + WORD));
        let mut b = atom.load(Ordering::Relaxed).to_ne_bytes();
        b[(lo - wa) as usize..(hi - wa) as usize]
            .copy_from_slice(&src[(lo - addr) as usize..(hi - addr) as usize]);
        atom.store(u64::from_ne_bytes(b), Ordering::Relaxed);
    }

    fn check_word(&self, addr: u64) {
        self.check(addr, WORD);
        assert!(
            addr & (WORD - 1) == 0,
            "atomic at {addr:#x} is not 8-byte aligned"
        );
    }

    /// Compare-and-swap on the aligned little-endian word at `addr`; returns the old value.
    pub(super) fn cas(&self, addr: u64, expect: u64, new: u64) -> u64 {
        self.check_word(addr);
        let group = addr / GROUP;
        let atom = self.word(addr / WORD);
        // A CAS bound to fail (a lock already held, typically) need not take the group: the
        // word is read atomically, and a failed CAS is allowed to read any value the word held
        // during the op. This spares the group's readers and writers a locked instruction and a
        // cache-line steal per poll of a held lock.
        let seen = u64::from_le(atom.load(Ordering::Acquire));
        if seen != expect {
            return seen;
        }
        let s = self.lock(group);
        let old = u64::from_le(atom.load(Ordering::Relaxed));
        if old == expect {
            atom.store(new.to_le(), Ordering::Relaxed);
            self.unlock(group, s + 2);
        } else {
            // Nothing changed: restoring the old sequence spares concurrent READs of the group
            // (typically a record whose lock word this CAS polls) a useless retry.
            self.unlock(group, s);
        }
        old
    }

    /// Fetch-and-add (wrapping) on the aligned little-endian word at `addr`; returns the old value.
    pub(super) fn faa(&self, addr: u64, add: u64) -> u64 {
        self.check_word(addr);
        let group = addr / GROUP;
        let s = self.lock(group);
        let atom = self.word(addr / WORD);
        let old = u64::from_le(atom.load(Ordering::Relaxed));
        atom.store(old.wrapping_add(add).to_le(), Ordering::Relaxed);
        self.unlock(group, s + 2);
        old
    }
}

/// `addr..addr+len` is made of whole words.
#[inline]
fn aligned(addr: u64, len: usize) -> bool {
    (addr | len as u64) & (WORD - 1) == 0
}

/// Splits `addr..addr+len` at group boundaries: each piece's address, and its bytes' range in
/// the op's buffer. A READ or WRITE takes its groups one at a time, in address order.
fn group_spans(addr: u64, len: usize) -> impl Iterator<Item = (u64, Range<usize>)> {
    let end = addr + len as u64;
    let starts = std::iter::successors(Some(addr).filter(|&a| a < end), move |&a| {
        let next = (a / GROUP + 1) * GROUP;
        (next < end).then_some(next)
    });
    starts.map(move |a| {
        let stop = ((a / GROUP + 1) * GROUP).min(end);
        (a, (a - addr) as usize..(stop - addr) as usize)
    })
}

/// The words that `addr..addr+len` (not empty) touches: the ones it covers whole (a range,
/// maybe empty), and the at most two at its edges that it covers only in part.
fn words(addr: u64, len: usize) -> (Range<u64>, impl Iterator<Item = u64> + Clone) {
    let end = addr + len as u64;
    let first_whole = addr.div_ceil(WORD);
    let whole = first_whole..(end / WORD).max(first_whole);
    let (first, last) = (addr / WORD, (end - 1) / WORD);
    let covered = whole.clone();
    let edges = [Some(first), (last != first).then_some(last)]
        .into_iter()
        .flatten()
        .filter(move |w| !covered.contains(w));
    (whole, edges)
}

/// Where the whole words `whole` of an op at `addr` start in its `len`-byte buffer (`len`
/// when there are none, so that slicing there is empty).
fn body_offset(addr: u64, whole: &Range<u64>, len: usize) -> usize {
    if whole.is_empty() {
        len
    } else {
        (whole.start * WORD - addr) as usize
    }
}

/// Anonymous memory of `len` bytes on transparent huge pages, populated: `None` where that
/// cannot be had (not Linux, THP off, no MADV_POPULATE_WRITE), and the caller maps plain pages.
///
/// Why: TPC-C's regions are over a gigabyte, read and written at random; with 4 KiB pages
/// nearly every verb also misses the TLB (it covers a few MiB), with 2 MiB pages most hit.
/// The pages must be advised before they are touched, so the mapping is populated after
/// the advice rather than at `mmap` time.
fn huge_anon(len: usize) -> Option<memmap2::MmapMut> {
    #[cfg(target_os = "linux")]
    {
        use memmap2::Advice;
        let map = MmapOptions::new().len(len).map_anon().ok()?;
        map.advise(Advice::HugePage).ok()?;
        map.advise(Advice::PopulateWrite).ok()?;
        Some(map)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = len;
        None
    }
}

/// A prefetch hint for the cache line at `p` (nothing on targets without one).
#[inline]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it never faults, reads nothing the program sees and
    // writes nothing, whatever the address (here always inside the mapping); SSE is part of
    // the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Waiting for a line held by another thread: spin briefly, then give the CPU away, since the
/// holder may be descheduled (more worker threads than cores).
#[inline]
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("size", &self.size)
            .field("mapped", &self.map.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of mapping anonymous memory give a zeroed, working region: huge pages (where
    /// the kernel has them; else the same fallback) and plain populated pages.
    #[test]
    fn anonymous_regions_work_on_huge_and_plain_pages() {
        // 4 MiB and a bit: spans whole huge pages and a partial one.
        let size = (4 << 20) + 4096;
        for huge in [true, false] {
            let r = Region::anon_on(0, size, huge).unwrap();
            let mut buf = vec![1u8; 100];
            r.read(size - 100, &mut buf);
            assert!(buf.iter().all(|&b| b == 0), "zero-filled (huge: {huge})");
            r.write(3 << 20, &[7u8; 700]);
            let mut back = vec![0u8; 700];
            r.read(3 << 20, &mut back);
            assert_eq!(back, vec![7u8; 700]);
            assert_eq!(
                r.cas(3 << 20, u64::from_le_bytes([7; 8]), 5),
                u64::from_le_bytes([7; 8])
            );
            assert_eq!(r.faa(3 << 20, 1), 5);
        }
    }
}
