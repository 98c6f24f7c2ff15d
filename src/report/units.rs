//! Human units for quantities that may be symbolic (`1.5 MiB·N`); plain numbers use
//! [`crate::util::units`].

use crate::ir::Dim;
pub use crate::util::units::{bytes, count, percent, write_bytes, write_count, write_percent};

/// A byte quantity that may be symbolic.
pub fn dim_bytes(d: &Dim) -> String {
    match d.as_u64() {
        Some(v) => bytes(v),
        None => d.render_with(|c| bytes(c.unsigned_abs())),
    }
}

/// [`dim_bytes`], appended to `out`.
pub fn write_dim_bytes(out: &mut String, d: &Dim) {
    match d.as_u64() {
        Some(v) => write_bytes(out, v),
        None => out.push_str(&dim_bytes(d)),
    }
}

/// [`dim_count`], appended to `out`.
pub fn write_dim_count(out: &mut String, d: &Dim) {
    match d.as_u64() {
        Some(v) => write_count(out, v),
        None => out.push_str(&dim_count(d)),
    }
}

/// A count that may be symbolic.
pub fn dim_count(d: &Dim) -> String {
    match d.as_u64() {
        Some(v) => count(v),
        None => d.render_with(|c| count(c.unsigned_abs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_bytes() {
        let d = Dim::sym("N")
            .checked_mul(&Dim::known(3 * 1024 * 1024 / 2))
            .unwrap();
        assert_eq!(dim_bytes(&d), "1.5 MiB·N");
    }
}
