//! Large buffers backed by huge pages where the system lends them.
//!
//! A buffer of many megabytes written once from start to end (a graph's node and value arrays,
//! the rows of a report, the table's text) takes a page fault per 4 KiB page as it is first
//! written: on a graph of 100,000 nodes ~30,000 faults, a fifth of `mem`'s time. Advised for
//! transparent huge pages, it takes one per 2 MiB (where the system's setting is `madvise` or
//! `always`; elsewhere the advice does nothing). Only whole 2 MiB ranges inside the buffer's
//! capacity are advised: a small buffer, and the ends of a large one, keep ordinary pages.

/// Smaller buffers are left alone: under two huge pages, at most part of one would be advised.
const MIN_BYTES: usize = 4 << 20;

/// Advises the capacity of `v` (see the module's text).
pub fn advise_huge<T>(v: &Vec<T>) {
    advise(
        v.as_ptr() as usize,
        v.capacity().saturating_mul(std::mem::size_of::<T>()),
    );
}

/// Advises the capacity of `s` (see the module's text).
pub fn advise_huge_text(s: &String) {
    advise(s.as_ptr() as usize, s.capacity());
}

/// The whole huge pages inside `[start, start + bytes)`, as `(first, end)`; `None` for a buffer
/// under [`MIN_BYTES`] or one that holds no whole huge page.
fn huge_range(start: usize, bytes: usize) -> Option<(usize, usize)> {
    const HUGE: usize = 2 << 20;
    if bytes < MIN_BYTES {
        return None;
    }
    let first = start.checked_next_multiple_of(HUGE)?;
    let end = start.checked_add(bytes)? & !(HUGE - 1);
    (end > first).then_some((first, end))
}

fn advise(start: usize, bytes: usize) {
    #[cfg(target_os = "linux")]
    if let Some((first, end)) = huge_range(start, bytes) {
        // SAFETY: advice on whole pages inside a live allocation of this process; it changes
        // neither their contents nor their mapping, only how the kernel backs them
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = huge_range(start, bytes);
}

/// What gives the heap's freed pages back to the system, set by the binary for its allocator
/// ([`set_give_back_freed`]); the library does not know which allocator its embedder uses.
static GIVE_BACK_FREED: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets what [`give_back_freed`] calls (once; later calls are ignored).
pub fn set_give_back_freed(hook: fn()) {
    let _ = GIVE_BACK_FREED.set(hook);
}

/// Asks the allocator to give back the pages freed so far, where the embedder said how, when
/// about `freed` bytes or more were just freed ([`GIVE_BACK_MIN`]). Called where much was freed
/// that later allocations would not reuse: after an ONNX graph is built (the loader's buffer,
/// index and scratch lists, ~10 MiB for a graph of 100,000 nodes, which jemalloc kept as dirty
/// pages and the analysis's large arrays, needing extents of their own, did not take), before a
/// report's rows (the ops, the initializers' folded values, the replay's arrays) and after the
/// analysis (its facts).
pub fn give_back_freed(freed: usize) {
    if freed < GIVE_BACK_MIN {
        return;
    }
    if let Some(hook) = GIVE_BACK_FREED.get() {
        hook();
    }
}

/// Below this, nothing is asked back: a purge splits the huge pages it touches, and a small
/// model's later allocations then fault pages of their own (`mem` of a graph of 1,000 nodes or of
/// VGG-16: peak RSS +1.3 MiB with a purge after each phase).
const GIVE_BACK_MIN: usize = 2 << 20;

/// A buffer read once from its start to its end, whose pages are given back to the system as the
/// reader leaves them behind: the compact protobuf of a model (load/skim.rs) while the IR is built
/// from it. A graph of 100,000 nodes holds ~15 MiB of encoded nodes; read one after the other, then
/// dropped with the buffer, they stood beside the whole IR at the load's high-water mark.
///
/// Only whole 2 MiB pages inside a *run* of spent messages are given back: messages that follow
/// each other with nothing between them but the next one's field key and length. A message that is
/// not spent (one whose bytes the IR keeps, or that may be read again) ends the run.
pub struct Spent {
    base: usize,
    len: usize,
    /// The run of spent messages, as offsets `[start, end)` into the buffer.
    run: Option<(usize, usize)>,
    /// Offsets below this are given back already.
    done: usize,
    /// Bytes given back so far.
    released: usize,
}

impl Spent {
    /// Tracks `buf`.
    ///
    /// # Safety
    /// `buf` is heap memory (private and anonymous) that the caller owns and keeps alive while
    /// this is used, and every message later passed to [`Spent::next`] as spent is never read
    /// again, through any handle: once given back, its pages read as zeros.
    pub unsafe fn new(buf: &[u8]) -> Spent {
        Spent {
            base: buf.as_ptr() as usize,
            len: buf.len(),
            run: None,
            done: 0,
            released: 0,
        }
    }

    /// Starts on the messages of another repeated field (which may lie before the last one's):
    /// its runs are its own. A page is given back only from inside a run, so none twice.
    pub fn restart(&mut self) {
        self.run = None;
        self.done = 0;
    }

    /// Bytes given back so far.
    pub fn released(&self) -> usize {
        self.released
    }

    /// Whether `bytes` lie (in part) in the buffer.
    pub fn holds(&self, bytes: &[u8]) -> bool {
        let start = bytes.as_ptr() as usize;
        !bytes.is_empty()
            && start < self.base.saturating_add(self.len)
            && self.base < start.saturating_add(bytes.len())
    }

    /// Records the next message of a repeated field whose messages are read in order: `msg`, a
    /// slice of the buffer encoded under a one-byte field key (field numbers up to 15), and whether
    /// it is spent (see [`Spent::new`]). Gives back the whole 2 MiB pages of the run so far.
    pub fn next(&mut self, msg: &[u8], spent: bool) {
        let start = (msg.as_ptr() as usize).wrapping_sub(self.base);
        let end = match start.checked_add(msg.len()) {
            Some(end) if spent && end <= self.len => end,
            _ => {
                self.run = None;
                return;
            }
        };
        // the bytes before `msg` are its own key and length, written in the fewest bytes: the run
        // goes on only when nothing else lies between it and the last message
        let header = 1 + prost::encoding::encoded_len_varint(msg.len() as u64);
        let lo = match self.run {
            Some((lo, hi)) if start.checked_sub(hi) == Some(header) => lo,
            _ => start,
        };
        self.run = Some((lo, end));
        if let Some((first, last)) = whole_pages(self.base, lo.max(self.done), end) {
            give_back(self.base + first, last - first);
            self.released += last - first;
            self.done = last;
        }
    }
}

const HUGE: usize = 2 << 20;

/// The whole 2 MiB pages (by address) inside offsets `[from, to)` of a buffer at `base`, as
/// offsets; `None` when there is none.
fn whole_pages(base: usize, from: usize, to: usize) -> Option<(usize, usize)> {
    let first = base.checked_add(from)?.checked_next_multiple_of(HUGE)? - base;
    let last = (base.checked_add(to)? & !(HUGE - 1)).checked_sub(base)?;
    (last > first).then_some((first, last))
}

fn give_back(start: usize, bytes: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: whole pages of a live heap buffer that nothing reads again (`Spent::new`'s
    // contract): the mapping stays, its pages read as zeros after
    unsafe {
        libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_DONTNEED);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}

#[cfg(test)]
mod tests {
    const MIB: usize = 1 << 20;

    /// Only whole 2 MiB pages inside the buffer are advised, and only for buffers of 4 MiB or more
    /// (the ranges worked out by hand).
    #[test]
    fn only_whole_huge_pages_inside_a_buffer_are_advised() {
        let range = super::huge_range;
        // aligned, 4 MiB: both of its huge pages
        assert_eq!(range(64 * MIB, 4 * MIB), Some((64 * MIB, 68 * MIB)));
        // under 4 MiB: nothing, even aligned
        assert_eq!(range(64 * MIB, 4 * MIB - 1), None);
        // 1 MiB past a boundary, 5 MiB long, [65, 70): the pages from 66 to 70 MiB
        assert_eq!(range(65 * MIB, 5 * MIB), Some((66 * MIB, 70 * MIB)));
        // 4 KiB past a boundary, 4 MiB long: the page from 66 to 68 MiB only
        assert_eq!(range(64 * MIB + 4096, 4 * MIB), Some((66 * MIB, 68 * MIB)));
        // 1 MiB past, 4 MiB long: [65, 69) holds one whole page, [66, 68)
        assert_eq!(range(65 * MIB, 4 * MIB), Some((66 * MIB, 68 * MIB)));
        // at the top of the address space: no overflow, nothing advised
        assert_eq!(range(usize::MAX - MIB, 8 * MIB), None);
    }

    /// Messages written as a repeated field 1 (key, length, payload) into `buf` from `at`, each
    /// `len` bytes of its index's low byte; their offsets.
    fn messages(buf: &mut [u8], at: usize, count: usize, len: usize) -> Vec<(usize, usize)> {
        let mut pos = at;
        let mut out = Vec::new();
        let mut head = vec![0x0A];
        prost::encoding::encode_varint(len as u64, &mut head);
        for i in 0..count {
            buf[pos..pos + head.len()].copy_from_slice(&head);
            pos += head.len();
            buf[pos..pos + len].fill(i as u8 | 1);
            out.push((pos, pos + len));
            pos += len;
        }
        out
    }

    /// Whether each 2 MiB page (by address) that `[from, to)` of `buf` covers whole reads as
    /// zeros (given back) or keeps its bytes, as the run of spent messages says.
    fn pages_given_back(buf: &[u8], from: usize, to: usize) -> usize {
        let base = buf.as_ptr() as usize;
        let Some((first, last)) = super::whole_pages(base, from, to) else {
            return 0;
        };
        // SAFETY (of the reads): the buffer is alive; given-back pages read as zeros
        assert!(buf[first..last].iter().all(|&b| b == 0));
        last - first
    }

    /// A run of messages read in order is given back by whole 2 MiB pages, and only the pages
    /// that lie wholly inside it: a message that is not spent, or bytes between two messages
    /// that are not the second's key and length, end the run; what is not given back keeps its
    /// bytes. The expected ranges are worked out from the buffer's address.
    #[test]
    fn a_run_of_spent_messages_is_given_back_by_whole_huge_pages() {
        let mut buf = vec![0xEEu8; 24 * MIB];
        // three runs of 1,000-byte messages (two length bytes), each about 6 MiB: the second run
        // starts after a stray byte, the third after a message that is not spent
        let first = messages(&mut buf, 5, 6_000, 1_000);
        let stray = first.last().unwrap().1;
        buf[stray] = 0x10;
        let second = messages(&mut buf, stray + 1, 6_000, 1_000);
        let kept_at = second.last().unwrap().1;
        let kept = messages(&mut buf, kept_at, 1, 1_000);
        let third = messages(&mut buf, kept[0].1, 6_000, 1_000);
        let copy = buf.clone();
        // SAFETY: the buffer is this test's own, alive below; the spent messages are read again
        // only to check that they read as zeros
        let mut spent = unsafe { super::Spent::new(&buf) };
        let feed = |spent: &mut super::Spent, list: &[(usize, usize)], is_spent: bool| {
            for &(a, b) in list {
                spent.next(&buf[a..b], is_spent);
            }
        };
        feed(&mut spent, &first, true);
        feed(&mut spent, &second, true);
        feed(&mut spent, &kept, false);
        feed(&mut spent, &third, true);
        let runs = [&first, &second, &third].map(|r| (r[0].0, r.last().unwrap().1));
        let expected: usize = runs
            .iter()
            .map(|&(a, b)| pages_given_back(&buf, a, b))
            .sum();
        assert!(expected >= 6 * MIB, "{expected}");
        assert_eq!(spent.released(), expected);
        // every byte outside the runs' whole pages is as written
        let base = buf.as_ptr() as usize;
        let inside = |i: usize| {
            runs.iter().any(|&(a, b)| {
                super::whole_pages(base, a, b).is_some_and(|(f, l)| (f..l).contains(&i))
            })
        };
        assert!((0..buf.len()).all(|i| inside(i) || buf[i] == copy[i]));
        // the kept message and the stray byte keep their bytes
        assert!(buf[kept[0].0..kept[0].1].iter().all(|&b| b == 1));
        assert_eq!(buf[stray], 0x10);
    }

    thread_local! {
        static ASKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn count() {
        ASKED.set(ASKED.get() + 1);
    }

    /// The embedder's hook is asked from 2 MiB freed, not below (counted on this thread: other
    /// tests load models, and the hook is the process's).
    #[test]
    fn freed_pages_are_asked_back_from_two_mebibytes() {
        super::set_give_back_freed(count);
        let before = ASKED.get();
        super::give_back_freed((2 << 20) - 1);
        super::give_back_freed(0);
        assert_eq!(ASKED.get(), before);
        super::give_back_freed(2 << 20);
        super::give_back_freed(64 << 20);
        assert_eq!(ASKED.get(), before + 2);
    }

    /// Slices from elsewhere, and empty ones, are not in the buffer; slices of it are.
    #[test]
    fn a_buffer_holds_its_own_slices_only() {
        let buf = [7u8; 100];
        let other = [7u8; 100];
        // SAFETY: nothing is given back (no message is passed)
        let spent = unsafe { super::Spent::new(&buf[10..90]) };
        assert!(spent.holds(&buf[10..11]));
        assert!(spent.holds(&buf[0..11]));
        assert!(spent.holds(&buf[89..100]));
        assert!(!spent.holds(&buf[0..10]));
        assert!(!spent.holds(&buf[90..100]));
        assert!(!spent.holds(&buf[50..50]));
        assert!(!spent.holds(&other));
    }

    /// The advice leaves what a buffer holds as it is, whatever its size.
    #[test]
    fn advised_buffers_keep_their_contents() {
        for n in [0usize, 1, 1 << 20, 3 << 20] {
            let mut v: Vec<u32> = Vec::with_capacity(n);
            super::advise_huge(&v);
            v.extend((0..n as u32).map(|i| i.wrapping_mul(2654435761)));
            assert!(v
                .iter()
                .enumerate()
                .all(|(i, &x)| x == (i as u32).wrapping_mul(2654435761)));
            let mut s = String::with_capacity(n * 4);
            super::advise_huge_text(&s);
            s.extend(std::iter::repeat_n('x', n));
            assert_eq!(s.len(), n);
        }
    }
}
