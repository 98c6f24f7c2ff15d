//! Human units: bytes in KiB/MiB/GiB, counts as 25.6M, symbolic quantities as `1.5 MiB·N`.

use crate::ir::Dim;

/// `0 B`, `512 B`, `1.5 KiB`, `97.5 MiB`, `1.21 GiB` (three significant digits).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{} {unit}", sig3(v))
}

/// `0`, `999`, `1.5K`, `25.6M`, `138M`, `4.09G` (three significant digits, SI steps).
pub fn count(n: u64) -> String {
    if n < 1000 {
        return n.to_string();
    }
    let mut v = n as f64;
    let mut unit = "";
    for u in ["K", "M", "G", "T", "P", "E"] {
        if v < 1000.0 {
            break;
        }
        v /= 1000.0;
        unit = u;
    }
    format!("{}{unit}", sig3(v))
}

/// Three significant digits, without trailing zeros after the point.
fn sig3(v: f64) -> String {
    let s = if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A byte quantity that may be symbolic.
pub fn dim_bytes(d: &Dim) -> String {
    match d.as_u64() {
        Some(v) => bytes(v),
        None => d.render_with(|c| bytes(c.unsigned_abs())),
    }
}

/// A count that may be symbolic.
pub fn dim_count(d: &Dim) -> String {
    match d.as_u64() {
        Some(v) => count(v),
        None => d.render_with(|c| count(c.unsigned_abs())),
    }
}

/// A percentage with one decimal, `<0.1%` for tiny non-zero shares.
pub fn percent(part: f64, total: f64) -> String {
    if total <= 0.0 {
        return "-".into();
    }
    let p = 100.0 * part / total;
    if p > 0.0 && p < 0.05 {
        "<0.1%".into()
    } else {
        format!("{p:.1}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(102_236_160), "97.5 MiB");
        assert_eq!(bytes(553_433_881), "528 MiB");
        assert_eq!(bytes(1_300_000_000), "1.21 GiB");
    }

    #[test]
    fn count_units() {
        assert_eq!(count(999), "999");
        assert_eq!(count(1500), "1.5K");
        assert_eq!(count(25_557_032), "25.6M");
        assert_eq!(count(138_357_544), "138M");
        assert_eq!(count(4_089_184_256), "4.09G");
    }

    #[test]
    fn symbolic_bytes() {
        let d = Dim::sym("N")
            .checked_mul(&Dim::known(3 * 1024 * 1024 / 2))
            .unwrap();
        assert_eq!(dim_bytes(&d), "1.5 MiB·N");
    }
}
