//! Many small things in one allocation: lists of items per key in one array ([`Lists`], what a
//! `Vec<Vec<T>>` holds) and strings in one string ([`Texts`], what a `Vec<String>` holds). A graph
//! of 100,000 nodes made 100,000 allocations for each such use.

/// List `k` is `items[starts[k]..starts[k + 1]]`.
#[derive(Clone, Debug, Default)]
pub struct Lists<T> {
    starts: Vec<usize>,
    items: Vec<T>,
}

impl<T: Copy + Default> Lists<T> {
    /// Lists for the keys `0..keys` from the `(key, item)` pairs that `pairs` yields (called twice:
    /// counted, then placed), each list in the order its items come. A key out of range is a bug
    /// of the caller and panics.
    pub fn build<I: Iterator<Item = (usize, T)>>(keys: usize, pairs: impl Fn() -> I) -> Self {
        let mut starts = vec![0usize; keys + 1];
        for (k, _) in pairs() {
            starts[k + 1] += 1;
        }
        for k in 0..keys {
            starts[k + 1] += starts[k];
        }
        let mut items = vec![T::default(); starts[keys]];
        let mut next = starts.clone();
        for (k, item) in pairs() {
            items[next[k]] = item;
            next[k] += 1;
        }
        Lists { starts, items }
    }

    /// The items of key `k`.
    pub fn get(&self, k: usize) -> &[T] {
        &self.items[self.starts[k]..self.starts[k + 1]]
    }

    /// The items of key `k`; `None` for a key the lists were not built for.
    pub fn get_checked(&self, k: usize) -> Option<&[T]> {
        let (&start, &end) = (self.starts.get(k)?, self.starts.get(k.checked_add(1)?)?);
        self.items.get(start..end)
    }
}

/// Strings one after another in one `String`; string `i` ends at `ends[i]`.
#[derive(Clone, Debug, Default)]
pub struct Texts {
    text: String,
    ends: Vec<usize>,
}

impl Texts {
    /// Room for `count` strings of `text` bytes in all.
    pub fn with_capacity(count: usize, text: usize) -> Texts {
        Texts {
            text: String::with_capacity(text),
            ends: Vec::with_capacity(count),
        }
    }

    /// Room for `count` more strings of `text` more bytes in all.
    pub fn reserve(&mut self, count: usize, text: usize) {
        self.ends.reserve(count);
        self.text.reserve(text);
        crate::util::pages::advise_huge(&self.ends);
        crate::util::pages::advise_huge_text(&self.text);
    }

    pub fn push(&mut self, s: &str) {
        self.push_with(|out| out.push_str(s));
    }

    /// Appends the string that `write` writes in place, and returns it.
    #[inline]
    pub fn push_with(&mut self, write: impl FnOnce(&mut String)) -> &str {
        let start = self.text.len();
        write(&mut self.text);
        self.ends.push(self.text.len());
        &self.text[start..]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Removes every string, keeping the room they took.
    pub fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The room left: strings, and bytes of text.
    pub fn spare(&self) -> (usize, usize) {
        (
            self.ends.capacity() - self.ends.len(),
            self.text.capacity() - self.text.len(),
        )
    }

    /// Appends every string of `other`, in order.
    pub fn append(&mut self, other: &Texts) {
        let base = self.text.len();
        self.text.push_str(&other.text);
        self.ends.extend(other.ends.iter().map(|&e| base + e));
    }

    /// String `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_list_holds_its_items_in_order_and_empty_keys_are_empty() {
        let pairs = [(2, 'a'), (0, 'b'), (2, 'c'), (3, 'd'), (2, 'e')];
        let lists = Lists::build(5, || pairs.iter().copied());
        let want: Vec<Vec<char>> = (0..5)
            .map(|k| pairs.iter().filter(|p| p.0 == k).map(|p| p.1).collect())
            .collect();
        for (k, want) in want.iter().enumerate() {
            assert_eq!(lists.get(k), want.as_slice(), "key {k}");
        }
        assert!(Lists::<u8>::build(0, std::iter::empty).starts == [0]);
    }

    #[test]
    fn texts_read_back_as_pushed() {
        let mut t = Texts::default();
        t.push("a");
        t.push("");
        assert_eq!(t.push_with(|s| s.push_str("βγ")), "βγ");
        assert_eq!((t.len(), t.get(0), t.get(1), t.get(2)), (3, "a", "", "βγ"));
    }
}
