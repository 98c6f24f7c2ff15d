//! Dimensions that are known numbers or symbolic expressions.
//!
//! A [`Dim`] is a polynomial with integer coefficients over named symbols (`N`, `seq`, ...). That is
//! enough for what exported graphs do to shapes: products (`N*seq` after a flatten), sums (`past+seq`
//! after a concat), exact divisions (a `-1` in a reshape) and constants. A division that is not exact on
//! a symbolic value (`(H-1)/2` in a strided conv) becomes a new opaque symbol named after the expression,
//! so analysis goes on and the report shows what the dimension depends on. Binding symbols to numbers
//! (`--batch`, `--dim`) happens at the graph inputs, before inference, so every derived value becomes
//! known at once.
//!
//! All arithmetic is checked: an overflow is `None`, never a wrap or a panic.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

thread_local! {
    /// Set when checked arithmetic on known numbers overflows: `None` then means "too large",
    /// not "unknown", and the analysis turns it into an error naming the node.
    static OVERFLOWED: Cell<bool> = const { Cell::new(false) };
}

/// Whether a `Dim` operation overflowed on this thread since the last call (and resets it).
pub fn take_overflow() -> bool {
    OVERFLOWED.with(|o| o.replace(false))
}

thread_local! {
    /// The opaque symbols [`Dim::floor_div`] and [`Dim::ceil_div`] made, by name: the expression
    /// divided, the divisor, and whether it rounds up. A division of one of them (plus a constant)
    /// merges into one (`floor(floor(E/a)/b)` is `floor(E/(a·b))`).
    static DIVISIONS: std::cell::RefCell<std::collections::HashMap<Arc<str>, (Dim, i64, bool)>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// What each derived symbol (a rounded or an inexact division) depends on: the symbols a
    /// user can bind (`--dim NAME=V`), by name.
    static DEPENDS: std::cell::RefCell<std::collections::HashMap<Arc<str>, Vec<Arc<str>>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The most derived symbols each registry keeps per thread: a model makes a few dozen; a process
/// that analyses model after model (a fuzzer, a library caller) starts over past this, so the
/// registries never grow without bound (what is forgotten only prints less simplified).
const MAX_DERIVED: usize = 4096;

/// `f()` with an overflow it meets left unrecorded (a trial computation whose failure is an
/// answer, not an error).
fn quietly<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    let before = OVERFLOWED.with(|o| o.get());
    let out = f();
    OVERFLOWED.with(|o| o.set(before));
    out
}

fn overflowed<T>() -> Option<T> {
    OVERFLOWED.with(|o| o.set(true));
    None
}

/// `x`, noting an overflow when it is `None`.
fn noted<T>(x: Option<T>) -> Option<T> {
    match x {
        Some(v) => Some(v),
        None => overflowed(),
    }
}

/// A known or symbolic dimension (or integer shape value, which may be negative).
///
/// Known values, by far the most common, are stored inline without allocating; polynomials always
/// hold at least one symbol, so each value has exactly one representation.
///
/// One word: a known value of 63 bits inline, its low bit set; any other value boxed ([`Heap`]),
/// the word its box's address (even: a `Heap` is 8-aligned). A `Dim` is 8 bytes, and so is an
/// `Option<Dim>` (the word is never zero): the shapes, sizes and MACs of a graph of 100,000 nodes
/// took ~6 MB more as a two-word enum.
pub struct Dim(NonZeroU64);

/// What a `Dim` that is not inline holds.
#[derive(Clone)]
enum Heap {
    /// A known value beyond 63 bits.
    Wide(i64),
    /// Sorted by monomial, no zero coefficients, at least one symbol. The constant term has an
    /// empty monomial.
    Poly(Vec<Term>),
}

/// What a `Dim` is, read: its equality, order and hash are this enum's, derived (those of the
/// two-variant enum a `Dim` was before it was one word: known numbers first, in order, then
/// polynomials by their terms).
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Repr<'a> {
    Known(i64),
    Poly(&'a Vec<Term>),
}

// a `Dim` owns its `Heap` as a `Box` would: sent and shared as one
const _: () = {
    const fn owned<T: Send + Sync>() {}
    owned::<Heap>();
};

/// The known values held inline: 63 bits.
const INLINE: std::ops::RangeInclusive<i64> = -(1 << 62)..=(1 << 62) - 1;

impl Dim {
    /// `v` inline (within [`INLINE`]).
    const fn inline(v: i64) -> Dim {
        match NonZeroU64::new(((v << 1) | 1) as u64) {
            Some(w) => Dim(w),
            // the low bit is set
            None => unreachable!(),
        }
    }

    fn boxed(h: Heap) -> Dim {
        let at = Box::into_raw(Box::new(h)).expose_provenance() as u64;
        match NonZeroU64::new(at) {
            // a box's address is even (8-aligned) and not zero
            Some(w) if at & 1 == 0 => Dim(w),
            _ => unreachable!("a box's address is even and not zero"),
        }
    }

    /// The number held inline, when it is.
    #[inline]
    fn inline_value(&self) -> Option<i64> {
        let w = self.0.get();
        (w & 1 == 1).then_some((w as i64) >> 1)
    }

    /// The boxed value, when it is not inline.
    #[inline]
    fn heap(&self) -> Option<&Heap> {
        let w = self.0.get();
        // SAFETY: an even word is the address of the `Heap` this `Dim` owns (`Dim::boxed`), alive
        // as long as the `Dim`
        (w & 1 == 0).then(|| unsafe { &*std::ptr::with_exposed_provenance::<Heap>(w as usize) })
    }

    #[inline]
    fn repr(&self) -> Repr<'_> {
        if let Some(v) = self.inline_value() {
            return Repr::Known(v);
        }
        match self.heap() {
            Some(Heap::Wide(v)) => Repr::Known(*v),
            Some(Heap::Poly(t)) => Repr::Poly(t),
            None => unreachable!(),
        }
    }

    /// Frees the boxed value ([`Drop`], out of line: most dims are inline).
    #[inline(never)]
    fn free(&mut self) {
        let w = self.0.get();
        // SAFETY: the box `Dim::boxed` made for this `Dim` (its word is even), which no other
        // `Dim` holds; the `Dim` is being dropped
        drop(unsafe { Box::from_raw(std::ptr::with_exposed_provenance_mut::<Heap>(w as usize)) });
    }
}

impl Drop for Dim {
    #[inline]
    fn drop(&mut self) {
        // a known number: nothing to free (inline, not a call per dim of every shape dropped)
        if self.inline_value().is_none() {
            self.free();
        }
    }
}

impl Clone for Dim {
    #[inline]
    fn clone(&self) -> Dim {
        match self.heap() {
            None => Dim(self.0),
            Some(h) => Dim::boxed(h.clone()),
        }
    }
}

impl PartialEq for Dim {
    #[inline]
    fn eq(&self, other: &Dim) -> bool {
        // one representation per value: equal inline words are equal values
        self.0 == other.0 || self.repr() == other.repr()
    }
}

impl Eq for Dim {}

impl std::hash::Hash for Dim {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.repr().hash(state);
    }
}

impl PartialOrd for Dim {
    fn partial_cmp(&self, other: &Dim) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Dim {
    fn cmp(&self, other: &Dim) -> std::cmp::Ordering {
        self.repr().cmp(&other.repr())
    }
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Term {
    /// Sorted multiset of symbol names; a repeated name is a power.
    mono: Vec<Arc<str>>,
    coef: i64,
}

impl Dim {
    pub const ZERO: Dim = Dim::inline(0);

    pub fn known(v: i64) -> Dim {
        if INLINE.contains(&v) {
            Dim::inline(v)
        } else {
            Dim::boxed(Heap::Wide(v))
        }
    }

    pub fn sym(name: &str) -> Dim {
        Dim::boxed(Heap::Poly(vec![Term {
            mono: vec![Arc::from(name)],
            coef: 1,
        }]))
    }

    /// The terms, with a known value as one constant term (none for zero).
    fn terms(&self) -> std::borrow::Cow<'_, [Term]> {
        match self.repr() {
            Repr::Known(0) => std::borrow::Cow::Borrowed(&[]),
            Repr::Known(v) => std::borrow::Cow::Owned(vec![Term {
                mono: Vec::new(),
                coef: v,
            }]),
            Repr::Poly(t) => std::borrow::Cow::Borrowed(t),
        }
    }

    /// The value, when no symbol is involved.
    pub fn as_i64(&self) -> Option<i64> {
        if let Some(v) = self.inline_value() {
            return Some(v);
        }
        match self.heap() {
            Some(Heap::Wide(v)) => Some(*v),
            _ => None,
        }
    }

    /// The value as an unsigned size, when it is known and not negative.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i64().and_then(|v| u64::try_from(v).ok())
    }

    pub fn is_known(&self) -> bool {
        self.as_i64().is_some()
    }

    /// An opaque symbol named `name` for a value derived from `from` (an inexact division of
    /// symbolic sizes), recorded so that [`Dim::bindable_symbols`] names what it comes from.
    pub fn derived(name: &str, from: &[&Dim]) -> Dim {
        let d = Dim::sym(name);
        let mut deps: Vec<Arc<str>> = from.iter().flat_map(|f| f.bindable_symbols()).collect();
        deps.sort();
        deps.dedup();
        DEPENDS.with(|m| {
            let mut m = m.borrow_mut();
            if m.len() >= MAX_DERIVED {
                m.clear();
            }
            m.entry(Arc::from(name)).or_insert(deps);
        });
        d
    }

    /// The symbols a user can bind that this dimension depends on: derived symbols (divisions)
    /// replaced by the symbols they come from; sorted, without repeats.
    #[inline]
    pub fn bindable_symbols(&self) -> Vec<Arc<str>> {
        // a known number (every row's size, nearly): none, without a call
        if self.inline_value().is_some() {
            return Vec::new();
        }
        self.bindable_symbols_of_expression()
    }

    fn bindable_symbols_of_expression(&self) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        for s in self.symbols() {
            match DEPENDS.with(|m| m.borrow().get(&s).cloned()) {
                Some(deps) => out.extend(deps),
                None => out.push(s),
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Names of the symbols this dimension depends on, sorted, without repeats.
    pub fn symbols(&self) -> Vec<Arc<str>> {
        if let Repr::Known(_) = self.repr() {
            return Vec::new();
        }
        let mut out: Vec<Arc<str>> = self
            .terms()
            .iter()
            .flat_map(|t| t.mono.iter().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn from_terms(terms: Vec<Term>) -> Dim {
        match terms.as_slice() {
            [] => Dim::ZERO,
            [t] if t.mono.is_empty() => Dim::known(t.coef),
            _ => Dim::boxed(Heap::Poly(terms)),
        }
    }

    fn from_map(map: BTreeMap<Vec<Arc<str>>, i64>) -> Dim {
        Dim::from_terms(
            map.into_iter()
                .filter(|(_, c)| *c != 0)
                .map(|(mono, coef)| Term { mono, coef })
                .collect(),
        )
    }

    /// Known numbers inline (the common case); polynomials out of line.
    #[inline]
    pub fn checked_add(&self, other: &Dim) -> Option<Dim> {
        if let (Some(a), Some(b)) = (self.as_i64(), other.as_i64()) {
            return noted(a.checked_add(b)).map(Dim::known);
        }
        self.checked_add_poly(other)
    }

    fn checked_add_poly(&self, other: &Dim) -> Option<Dim> {
        let mut map: BTreeMap<Vec<Arc<str>>, i64> = BTreeMap::new();
        for t in self.terms().iter().chain(other.terms().iter()) {
            let c = map.entry(t.mono.clone()).or_insert(0);
            *c = noted(c.checked_add(t.coef))?;
        }
        Some(Dim::from_map(map))
    }

    pub fn checked_neg(&self) -> Option<Dim> {
        if let Some(a) = self.as_i64() {
            return a.checked_neg().map(Dim::known);
        }
        let terms = self
            .terms()
            .iter()
            .map(|t| {
                Some(Term {
                    mono: t.mono.clone(),
                    coef: t.coef.checked_neg()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Dim::from_terms(terms))
    }

    pub fn checked_sub(&self, other: &Dim) -> Option<Dim> {
        self.checked_add(&other.checked_neg()?)
    }

    /// Known numbers inline (the common case, a call on every size); polynomials out of line.
    #[inline]
    pub fn checked_mul(&self, other: &Dim) -> Option<Dim> {
        if let (Some(a), Some(b)) = (self.as_i64(), other.as_i64()) {
            return noted(a.checked_mul(b)).map(Dim::known);
        }
        self.checked_mul_poly(other)
    }

    fn checked_mul_poly(&self, other: &Dim) -> Option<Dim> {
        let mut map: BTreeMap<Vec<Arc<str>>, i64> = BTreeMap::new();
        for a in self.terms().iter() {
            for b in other.terms().iter() {
                let mut mono: Vec<Arc<str>> = a.mono.iter().chain(&b.mono).cloned().collect();
                mono.sort();
                let c = map.entry(mono).or_insert(0);
                *c = noted(c.checked_add(noted(a.coef.checked_mul(b.coef))?))?;
            }
        }
        Some(Dim::from_map(map))
    }

    /// `self / other` when the division is exact term by term (or `self == other`).
    pub fn div_exact(&self, other: &Dim) -> Option<Dim> {
        if let (Some(a), Some(b)) = (self.as_i64(), other.as_i64()) {
            return (b != 0 && a.checked_rem(b) == Some(0)).then(|| Dim::known(a / b));
        }
        if self == other && *other != Dim::ZERO {
            return Some(Dim::known(1));
        }
        let other_terms = other.terms();
        let d = match &*other_terms {
            [] => return None,
            [d] => d,
            many => {
                // a quotient of one term: `(1024·x + 1024)/(x + 1)` is 1024 (a reshape's -1 over
                // a sum); tried from each term of `self` over the divisor's last
                let last = Dim::from_terms(vec![many[many.len() - 1].clone()]);
                return quietly(|| {
                    self.terms().iter().find_map(|t| {
                        let q = Dim::from_terms(vec![t.clone()]).div_exact(&last)?;
                        (q.checked_mul(other)? == *self).then_some(q)
                    })
                });
            }
        };
        if d.coef == 0 {
            return None;
        }
        let mut map = BTreeMap::new();
        for t in self.terms().iter() {
            if t.coef % d.coef != 0 {
                return None;
            }
            let mut rest = t.mono.clone();
            for s in &d.mono {
                let pos = rest.iter().position(|r| r == s)?;
                rest.remove(pos);
            }
            map.insert(rest, t.coef / d.coef);
        }
        Some(Dim::from_map(map))
    }

    /// Floor division by a positive constant. A symbolic value that does not divide exactly becomes an
    /// opaque symbol named after the expression.
    pub fn floor_div(&self, k: i64) -> Option<Dim> {
        if k <= 0 {
            return None;
        }
        if let Some(v) = self.as_i64() {
            return Some(Dim::known(v.div_euclid(k)));
        }
        if let Some(q) = self.div_exact(&Dim::known(k)) {
            return Some(q);
        }
        if let Some(merged) = self.merged_division(k, false) {
            return merged;
        }
        Some(Dim::divided(self, k, false))
    }

    /// `self` as `D + c` for a division symbol `D` = `E / a` that rounds the same way: `(E +
    /// c·a) / (a·k)`, the same value (floor(floor(E/a) + c)/k) = floor((E + c·a)/(a·k)) for
    /// positive integers; ceilings alike). `None`: `self` is not such a sum.
    fn merged_division(&self, k: i64, up: bool) -> Option<Option<Dim>> {
        let terms = self.terms();
        let (mut sym, mut c) = (None, 0i64);
        for t in terms.iter() {
            match (t.mono.as_slice(), t.coef) {
                ([], v) => c = v,
                ([name], 1) if sym.is_none() => sym = Some(name.clone()),
                _ => return None,
            }
        }
        let (e, a, rounds_up) = DIVISIONS.with(|d| d.borrow().get(&sym?).cloned())?;
        if rounds_up != up {
            return None;
        }
        let inner = quietly(|| e.checked_add(&Dim::known(c.checked_mul(a)?)))?;
        let ak = quietly(|| a.checked_mul(k))?;
        Some(if up {
            inner.ceil_div(ak)
        } else {
            inner.floor_div(ak)
        })
    }

    /// The opaque symbol of `e / k` rounded down or up, recorded for [`Dim::merged_division`].
    fn divided(e: &Dim, k: i64, up: bool) -> Dim {
        let name = if up {
            format!("ceil(({e})/{k})")
        } else {
            format!("floor(({e})/{k})")
        };
        let d = Dim::derived(&name, &[e]);
        DIVISIONS.with(|m| {
            let mut m = m.borrow_mut();
            if m.len() >= MAX_DERIVED {
                m.clear();
            }
            m.entry(Arc::from(name.as_str()))
                .or_insert_with(|| (e.clone(), k, up));
        });
        d
    }

    /// Ceiling division by a positive constant, with the same rule as [`Dim::floor_div`].
    pub fn ceil_div(&self, k: i64) -> Option<Dim> {
        if k <= 0 {
            return None;
        }
        if let Some(v) = self.as_i64() {
            let q = v.div_euclid(k);
            return Some(Dim::known(if v.rem_euclid(k) == 0 { q } else { q + 1 }));
        }
        if let Some(q) = self.div_exact(&Dim::known(k)) {
            return Some(q);
        }
        if let Some(merged) = self.merged_division(k, true) {
            return merged;
        }
        Some(Dim::divided(self, k, true))
    }

    /// Replaces bound symbols by their values.
    pub fn substitute(&self, bindings: &BTreeMap<String, i64>) -> Option<Dim> {
        if let Repr::Known(_) = self.repr() {
            return Some(self.clone());
        }
        let mut acc = Dim::ZERO;
        for t in self.terms().iter() {
            let mut term = Dim::known(t.coef);
            for s in &t.mono {
                let f = match bindings.get(&**s) {
                    Some(v) => Dim::known(*v),
                    None => Dim::sym(s),
                };
                term = term.checked_mul(&f)?;
            }
            acc = acc.checked_add(&term)?;
        }
        Some(acc)
    }

    /// Product of dims, `None` on overflow.
    pub fn product<'a>(dims: impl IntoIterator<Item = &'a Dim>) -> Option<Dim> {
        dims.into_iter()
            .try_fold(Dim::known(1), |acc, d| acc.checked_mul(d))
    }

    /// Sum of dims, `None` on overflow.
    pub fn sum<'a>(dims: impl IntoIterator<Item = &'a Dim>) -> Option<Dim> {
        dims.into_iter()
            .try_fold(Dim::ZERO, |acc, d| acc.checked_add(d))
    }

    /// Whether the dim can be a size: a known non-negative number or an expression whose
    /// coefficients are all non-negative.
    pub fn is_plausible_size(&self) -> bool {
        match self.as_i64() {
            Some(v) => v >= 0,
            None => true,
        }
    }

    /// A rendering with every coefficient formatted by `fmt_coef` (used to print byte counts such
    /// as `1.5 MiB·N + 12 B`).
    pub fn render_with(&self, fmt_coef: impl Fn(i64) -> String) -> String {
        if let Some(v) = self.as_i64() {
            return fmt_coef(v);
        }
        let mut out = String::new();
        for (i, t) in self.terms().iter().rev().enumerate() {
            let (neg, abs) = (t.coef < 0, t.coef.unsigned_abs());
            if i > 0 {
                out.push_str(if neg { " - " } else { " + " });
            } else if neg {
                out.push('-');
            }
            let mono = render_mono(&t.mono);
            if mono.is_empty() {
                out.push_str(&fmt_coef(abs as i64));
            } else if abs == 1 {
                out.push_str(&mono);
            } else {
                out.push_str(&fmt_coef(abs as i64));
                out.push('·');
                out.push_str(&mono);
            }
        }
        out
    }
}

fn render_mono(mono: &[Arc<str>]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < mono.len() {
        let mut j = i;
        while j < mono.len() && mono[j] == mono[i] {
            j += 1;
        }
        let name = &mono[i];
        parts.push(if j - i > 1 {
            format!("{name}^{}", j - i)
        } else {
            name.to_string()
        });
        i = j;
    }
    parts.join("*")
}

impl From<i64> for Dim {
    fn from(v: i64) -> Dim {
        Dim::known(v)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(v) = self.as_i64() {
            return write!(f, "{v}");
        }
        for (i, t) in self.terms().iter().rev().enumerate() {
            let (neg, abs) = (t.coef < 0, t.coef.unsigned_abs());
            if i > 0 {
                f.write_str(if neg { " - " } else { " + " })?;
            } else if neg {
                f.write_str("-")?;
            }
            let mono = render_mono(&t.mono);
            match (mono.is_empty(), abs) {
                (true, _) => write!(f, "{abs}")?,
                (false, 1) => f.write_str(&mono)?,
                (false, _) => write!(f, "{abs}*{mono}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Renders a shape as `[N,3,224,224]`.
pub fn shape_to_string(shape: &[Dim]) -> String {
    let mut out = String::with_capacity(2 + 6 * shape.len());
    write_shape(&mut out, shape);
    out
}

/// Appends `[a,b,c]` to `out` ([`shape_to_string`] without a string per dim).
pub fn write_shape(out: &mut String, shape: &[Dim]) {
    use std::fmt::Write;
    out.push('[');
    let mut digits = itoa::Buffer::new();
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match d.as_i64() {
            Some(v) => out.push_str(digits.format(v)),
            None => {
                let _ = write!(out, "{d}");
            }
        }
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n() -> Dim {
        Dim::sym("N")
    }

    #[test]
    fn a_sum_divided_by_a_sum_it_is_a_multiple_of() {
        let x = Dim::sym("x");
        let one = Dim::known(1);
        // a reshape's -1: (1024·x + 1024)/(x + 1)
        let total = Dim::known(1024)
            .checked_mul(&x.checked_add(&one).unwrap())
            .unwrap();
        let den = x.checked_add(&one).unwrap();
        assert_eq!(total.div_exact(&den), Some(Dim::known(1024)));
        // a one-term quotient with a symbol: (4·x·y + 4·y)/(x + 1) = 4·y
        let y = Dim::sym("y");
        let num = total
            .div_exact(&Dim::known(256))
            .unwrap()
            .checked_mul(&y)
            .unwrap();
        assert_eq!(num.div_exact(&den).unwrap().to_string(), "4*y");
        // not a multiple: no quotient, and no overflow recorded for the trials
        let other = x.checked_add(&Dim::known(2)).unwrap();
        assert_eq!(total.div_exact(&other), None);
        let huge = Dim::known(i64::MAX).checked_mul(&x).unwrap();
        assert_eq!(
            huge.div_exact(&Dim::known(2).checked_mul(&den).unwrap()),
            None
        );
        assert!(!take_overflow());
    }

    #[test]
    fn the_registries_of_derived_symbols_stay_bounded() {
        let w = Dim::sym("W");
        for k in 2..(2 * MAX_DERIVED as i64 + 10) {
            let _ = w.floor_div(k);
        }
        assert!(DIVISIONS.with(|m| m.borrow().len()) <= MAX_DERIVED);
        assert!(DEPENDS.with(|m| m.borrow().len()) <= MAX_DERIVED);
        // what is kept still merges
        let d = w.floor_div(3).unwrap().floor_div(5).unwrap();
        assert_eq!(d.to_string(), "floor((W)/15)");
    }

    #[test]
    fn divisions_of_divisions_merge() {
        let w = Dim::sym("W");
        let one = Dim::known(1);
        // three stride-2 convolutions (kernel 3, pad 1): floor((H + 2 - 3)/2) + 1 each
        let conv = |h: &Dim| {
            h.checked_sub(&one)
                .unwrap()
                .floor_div(2)
                .unwrap()
                .checked_add(&one)
                .unwrap()
        };
        let out = conv(&conv(&conv(&w)));
        assert_eq!(out.to_string(), "floor((W - 1)/8) + 1");
        // the identity holds for every width
        for v in 1..200i64 {
            let mut h = v;
            for _ in 0..3 {
                h = (h - 1).div_euclid(2) + 1;
            }
            assert_eq!((v - 1).div_euclid(8) + 1, h, "W = {v}");
        }
        // ceilings merge with ceilings, not with floors
        let c = w.ceil_div(2).unwrap().ceil_div(3).unwrap();
        assert_eq!(c.to_string(), "ceil((W)/6)");
        let mixed = w.ceil_div(2).unwrap().floor_div(3).unwrap();
        assert_eq!(mixed.to_string(), "floor((ceil((W)/2))/3)");
    }

    /// One word, and so is an absent one; values of 64 bits that do not fit inline are the same
    /// values as the inline ones: equal, ordered and hashed as numbers, before every polynomial.
    #[test]
    fn a_dim_is_one_word_and_wide_values_are_numbers_like_the_others() {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        assert_eq!(std::mem::size_of::<Dim>(), 8);
        assert_eq!(std::mem::size_of::<Option<Dim>>(), 8);
        let hash = |d: &Dim| BuildHasherDefault::<DefaultHasher>::default().hash_one(d);
        let edges = [
            i64::MIN,
            i64::MIN + 1,
            -(1 << 62) - 1,
            -(1 << 62),
            -1,
            0,
            1,
            (1 << 62) - 1,
            1 << 62,
            i64::MAX,
        ];
        for (i, &v) in edges.iter().enumerate() {
            let d = Dim::known(v);
            assert_eq!(d.as_i64(), Some(v));
            assert_eq!(d.clone(), d);
            assert_eq!(d.to_string(), v.to_string());
            assert!(d < n(), "{v}");
            for &w in &edges[i + 1..] {
                assert!(d < Dim::known(w), "{v} < {w}");
                assert_ne!(d, Dim::known(w));
            }
        }
        // made by arithmetic across the inline edge: the same value as made directly
        let wide = Dim::known(1 << 61).checked_mul(&Dim::known(2)).unwrap();
        assert_eq!(wide, Dim::known(1 << 62));
        assert_eq!(hash(&wide), hash(&Dim::known(1 << 62)));
        let back = wide.checked_sub(&Dim::known(1)).unwrap();
        assert_eq!(back.as_i64(), Some((1 << 62) - 1));
        assert_eq!(back, Dim::known((1 << 62) - 1));
        // polynomials: cloned deeply, dropped once each (no double free under the test harness)
        let p = n().checked_mul(&Dim::known(3)).unwrap();
        let q = p.clone();
        drop(p);
        assert_eq!(q.to_string(), "3*N");
        assert_eq!(hash(&q), hash(&n().checked_mul(&Dim::known(3)).unwrap()));
    }

    #[test]
    fn known_arithmetic() {
        let a = Dim::known(6);
        let b = Dim::known(4);
        assert_eq!(a.checked_add(&b).unwrap().as_i64(), Some(10));
        assert_eq!(a.checked_sub(&b).unwrap().as_i64(), Some(2));
        assert_eq!(a.checked_mul(&b).unwrap().as_i64(), Some(24));
        assert_eq!(Dim::known(7).floor_div(2).unwrap().as_i64(), Some(3));
        assert_eq!(Dim::known(7).ceil_div(2).unwrap().as_i64(), Some(4));
        assert_eq!(Dim::known(-7).floor_div(2).unwrap().as_i64(), Some(-4));
    }

    #[test]
    fn overflow_is_none() {
        let big = Dim::known(i64::MAX);
        assert!(big.checked_add(&Dim::known(1)).is_none());
        assert!(big.checked_mul(&Dim::known(2)).is_none());
        assert!(Dim::known(i64::MIN).checked_neg().is_none());
    }

    #[test]
    fn symbolic_products_and_exact_division() {
        let flat = Dim::product(&[n(), Dim::known(512), Dim::known(7), Dim::known(7)]).unwrap();
        assert_eq!(flat.to_string(), "25088*N");
        assert_eq!(flat.div_exact(&n()).unwrap().as_i64(), Some(25088));
        assert_eq!(flat.div_exact(&Dim::known(25088)).unwrap(), n());
        assert!(flat.div_exact(&Dim::known(3)).is_none());
        let seq = Dim::sym("seq");
        let tokens = n().checked_mul(&seq).unwrap();
        assert_eq!(tokens.div_exact(&seq).unwrap(), n());
    }

    #[test]
    fn sums_collect_like_terms() {
        let s = n()
            .checked_add(&n())
            .unwrap()
            .checked_add(&Dim::known(3))
            .unwrap();
        assert_eq!(s.to_string(), "2*N + 3");
        assert_eq!(s.checked_sub(&n()).unwrap().to_string(), "N + 3");
        assert_eq!(n().checked_sub(&n()).unwrap().as_i64(), Some(0));
    }

    #[test]
    fn inexact_division_makes_an_opaque_symbol() {
        let h = Dim::sym("H").checked_sub(&Dim::known(1)).unwrap();
        let q = h.floor_div(2).unwrap();
        assert!(!q.is_known());
        assert_eq!(q.to_string(), "floor((H - 1)/2)");
        // the same expression gives the same symbol, so equal shapes stay equal
        assert_eq!(q, h.floor_div(2).unwrap());
    }

    #[test]
    fn substitution_binds_symbols() {
        let e = Dim::product(&[n(), n(), Dim::known(3)]).unwrap();
        assert_eq!(e.to_string(), "3*N^2");
        let b = BTreeMap::from([("N".to_string(), 4)]);
        assert_eq!(e.substitute(&b).unwrap().as_i64(), Some(48));
    }
}
