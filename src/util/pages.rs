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
