//! Interned text for what a graph repeats: op types, domains and attribute names.
//!
//! A graph of 100,000 nodes names a few dozen op types and attributes, each ~100,000 times; a
//! `String` per use was ~300,000 allocations and 24 bytes a field. A [`Sym`] shares one copy (8
//! bytes a field, no allocation: a thin pointer to the shared text, where an `Arc<str>` was 16 and
//! made a graph's node 80 bytes), handed out by a [`Symbols`] table per load.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// Shared, immutable text that reads as a `str` (compares with `&str` and `String`, formats as
/// its text).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sym(Arc<Box<str>>);

impl Sym {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Sym {
    /// The empty text (ONNX's default domain).
    fn default() -> Self {
        Sym::from("")
    }
}

impl Deref for Sym {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Sym {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Sym {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Hash for Sym {
    /// As its text, so that a `str` finds it in a map (`Borrow<str>`).
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl From<&str> for Sym {
    fn from(s: &str) -> Self {
        Sym(Arc::new(s.into()))
    }
}

impl From<String> for Sym {
    fn from(s: String) -> Self {
        Sym(Arc::new(s.into_boxed_str()))
    }
}

impl From<Sym> for String {
    fn from(s: Sym) -> Self {
        s.as_str().to_owned()
    }
}

impl PartialEq<str> for Sym {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Sym {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Sym {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<Sym> for str {
    fn eq(&self, other: &Sym) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Sym> for &str {
    fn eq(&self, other: &Sym) -> bool {
        *self == other.as_str()
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Hands out one [`Sym`] per distinct text: what a loader names nodes' op types, domains and
/// attributes through.
#[derive(Default)]
pub struct Symbols {
    table: hashbrown::HashTable<Sym>,
    hasher: foldhash::fast::FixedState,
    /// The empty text: the default domain, asked for by most nodes.
    empty: Sym,
}

impl Symbols {
    /// The shared copy of `s`, made on first sight.
    pub fn get(&mut self, s: &str) -> Sym {
        if s.is_empty() {
            return self.empty.clone();
        }
        let hash = self.hasher.hash_one(s);
        match self.table.find(hash, |k| k.as_str() == s) {
            Some(k) => k.clone(),
            None => {
                let hasher = &self.hasher;
                let k = Sym::from(s);
                self.table
                    .insert_unique(hash, k.clone(), |k| hasher.hash_one(k.as_str()));
                k
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_text() {
        let mut syms = Symbols::default();
        let a = syms.get("Conv");
        let b = syms.get(&String::from("Conv"));
        let c = syms.get("Relu");
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(!Arc::ptr_eq(&a.0, &c.0));
        assert_eq!(a, "Conv");
        assert_eq!("Relu", c);
        assert_eq!(syms.get(""), Sym::default());
        assert_eq!(format!("{a} {c:?}"), "Conv \"Relu\"");
    }

    #[test]
    fn finds_by_text_in_a_map() {
        let mut m = std::collections::HashMap::new();
        m.insert(Sym::from("axis"), 1);
        assert_eq!(m.get("axis"), Some(&1));
    }
}
