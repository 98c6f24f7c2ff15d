//! Human units: bytes in KiB/MiB/GiB, counts as 25.6M, shares as percentages, and sizes typed by
//! users (`16GiB`).

/// `0 B`, `512 B`, `1.5 KiB`, `97.5 MiB`, `1.21 GiB` (three significant digits).
pub fn bytes(n: u64) -> String {
    let mut s = String::with_capacity(12);
    write_bytes(&mut s, n);
    s
}

/// [`bytes`], appended to `out` (a table of 100k rows formats 200k sizes in place).
pub fn write_bytes(out: &mut String, n: u64) {
    if n < 1024 {
        out.push_str(itoa::Buffer::new().format(n));
        out.push_str(" B");
    } else if n < 1 << 53 {
        bytes_exact(out, n);
    } else {
        float_bytes(out, n);
    }
}

/// [`bytes`] through `f64` (exact for every `n` below 2^53, where [`bytes_exact`] answers).
fn float_bytes(out: &mut String, n: u64) {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    sig3(out, v);
    out.push(' ');
    out.push_str(unit);
}

/// [`bytes`] for `1024 <= n < 2^53` in integers, the same text as formatting
/// `n / 1024^k` as `f64` (which is exact there): the value is the dyadic fraction
/// `n / 2^(10k)`, rounded to its decimals half to even as `format!("{:.2}")` rounds. A table of
/// 100k rows formats 200k sizes; float formatting took 5% of `mem` (its exact mode runs
/// bignum arithmetic).
fn bytes_exact(out: &mut String, n: u64) {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut k = 0u32;
    while k < 5 && n >> (10 * (k + 1)) != 0 {
        k += 1;
    }
    let shift = 10 * k;
    let whole = n >> shift;
    let decimals = if whole >= 100 {
        0
    } else if whole >= 10 {
        1
    } else {
        2
    };
    let scaled = u128::from(n) * 10u128.pow(decimals);
    let den = 1u128 << shift;
    let (mut q, r) = (scaled >> shift, scaled & (den - 1));
    if 2 * r > den || (2 * r == den && q % 2 == 1) {
        q += 1;
    }
    let start = out.len();
    out.push_str(itoa::Buffer::new().format(q));
    if decimals > 0 {
        // v >= 1 (n >= 1024^k), so q >= 10^decimals has a digit before the point
        out.insert(out.len() - decimals as usize, '.');
        let kept = out[start..]
            .trim_end_matches('0')
            .trim_end_matches('.')
            .len();
        out.truncate(start + kept);
    }
    out.push(' ');
    out.push_str(UNITS[k as usize - 1]);
}

/// `0`, `999`, `1.5K`, `25.6M`, `138M`, `4.09G` (three significant digits, SI steps).
pub fn count(n: u64) -> String {
    let mut s = String::with_capacity(8);
    write_count(&mut s, n);
    s
}

/// [`count`], appended to `out`.
pub fn write_count(out: &mut String, n: u64) {
    if n < 1000 {
        out.push_str(itoa::Buffer::new().format(n));
        return;
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
    sig3(out, v);
    out.push_str(unit);
}

/// Three significant digits, without trailing zeros after the point, appended to `out`.
fn sig3(out: &mut String, v: f64) {
    let start = out.len();
    write_fixed(
        out,
        v,
        if v >= 100.0 {
            0
        } else if v >= 10.0 {
            1
        } else {
            2
        },
    );
    if out[start..].contains('.') {
        let kept = out[start..]
            .trim_end_matches('0')
            .trim_end_matches('.')
            .len();
        out.truncate(start + kept);
    }
}

/// A percentage with one decimal, `<0.1%` for tiny non-zero shares.
pub fn percent(part: f64, total: f64) -> String {
    let mut s = String::with_capacity(8);
    write_percent(&mut s, part, total);
    s
}

/// [`percent`], appended to `out`.
pub fn write_percent(out: &mut String, part: f64, total: f64) {
    if total <= 0.0 {
        out.push('-');
        return;
    }
    let p = 100.0 * part / total;
    if p > 0.0 && p < 0.05 {
        out.push_str("<0.1%");
    } else {
        write_fixed(out, p, 1);
        out.push('%');
    }
}

/// `v` with `decimals` (at most 2) digits after the point: the text of `format!("{v:.decimals$}")`,
/// which rounds `v`'s exact value half to even. Where that rounding cannot be a tie or a near one,
/// the digits come from integers (the formatting machinery was ~450 instructions a number, 2% of
/// `mem` on a graph of 10,000 nodes, which prints a share and a MAC count per row).
fn write_fixed(out: &mut String, v: f64, decimals: usize) {
    use std::fmt::Write;
    const SCALE: [f64; 3] = [1.0, 10.0, 100.0];
    const POW: [u64; 3] = [1, 10, 100];
    if let (Some(&scale), Some(&pow)) = (SCALE.get(decimals), POW.get(decimals)) {
        let y = v * scale;
        // below 1e9, `y` is within 1.2e-7 of the exact `v·scale` (half an ulp); away from a
        // half, both round to the same integer (NaN, infinities and -0.0 take the long way)
        if v.is_sign_positive() && y < 1e9 && (y - y.floor() - 0.5).abs() > 1e-6 {
            let n = y.round() as u64;
            let mut b = itoa::Buffer::new();
            out.push_str(b.format(n / pow));
            if decimals > 0 {
                out.push('.');
                let frac = n % pow;
                if decimals == 2 && frac < 10 {
                    out.push('0');
                }
                out.push_str(b.format(frac));
            }
            return;
        }
    }
    let _ = write!(out, "{v:.decimals$}");
}

/// Parses `16GiB`, `512MiB`, `1.5GB`, `80G`, `1024` (bytes). Binary units for `Ki/Mi/Gi/Ti` and for a
/// bare `K/M/G/T` (GPU memory is sold in binary gigabytes); decimal for `KB/MB/GB/TB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 16GiB, 512MiB)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        // a bare number is ambiguous (16 bytes or 16 GiB?); 0 is not
        "" if v != 0.0 => {
            return Err(format!(
                "'{s}' has no unit: write {num}GiB, {num}MiB or {num}B (bytes)"
            ))
        }
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0_f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => return Err(format!("unknown size unit '{other}' in '{s}'")),
    };
    let bytes = v * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fixed_digits_read_as_the_float_formatting_reads_them() {
        // exact ties (k/2^j), values one ulp beside them, decimals just around each rounding
        // point, large and odd values: every text as `format!` writes it
        let mut values = vec![
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            1e9,
            1e12,
            4.5e15,
            0.05,
            99.95,
        ];
        for k in 0..4000u32 {
            for j in 0..6 {
                let tie = f64::from(k) / f64::from(1u32 << j);
                values.extend([tie, tie.next_up(), tie.next_down()]);
            }
            let d = f64::from(k) / 1000.0;
            values.extend([d, d + 0.0005, d + 0.005, d + 0.05, d * 997.0]);
        }
        let mut x = 0x9e3779b97f4a7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(f64::from_bits(x >> 2) % 2000.0);
        }
        for v in values {
            for d in 0..=2 {
                let mut s = String::from("x");
                super::write_fixed(&mut s, v, d);
                assert_eq!(s[1..], format!("{v:.d$}"), "{v:e} at {d} decimals");
            }
        }
    }

    fn with(f: fn(&mut String, u64), n: u64) -> String {
        // written after other text, as a table writes it
        let mut s = String::from("x");
        f(&mut s, n);
        s.split_off(1)
    }

    #[test]
    fn exact_sizes_read_as_the_float_formatting_reads_them() {
        // every n near each unit's boundaries and decimal steps, rounding ties (n·10^d an odd
        // multiple of half the unit) included
        let mut seen = 0;
        for k in 1..=5u32 {
            let unit = 1u64 << (10 * k);
            for base in [1u64, 9, 10, 99, 100, 1023] {
                let at = base * unit;
                for n in at.saturating_sub(4096)..at + 4096 {
                    if (1024..1 << 53).contains(&n) {
                        assert_eq!(
                            with(super::bytes_exact, n),
                            with(super::float_bytes, n),
                            "{n}"
                        );
                        seen += 1;
                    }
                }
            }
            let hi = (unit.saturating_mul(1024)).min(1 << 53) as i64;
            for n in crate::util::rng::integers(u64::from(k), 20_000, unit as i64, hi) {
                let n = n as u64;
                assert_eq!(
                    with(super::bytes_exact, n),
                    with(super::float_bytes, n),
                    "{n}"
                );
            }
        }
        assert!(seen > 100_000);
        // ties: 1.125 KiB rounds to 1.12, 1.375 KiB to 1.38, 10.25 KiB to 10.2
        assert_eq!(super::bytes(1152), "1.12 KiB");
        assert_eq!(super::bytes(1408), "1.38 KiB");
        assert_eq!(super::bytes(10_496), "10.2 KiB");
        assert_eq!(super::bytes(u64::MAX), "16 EiB");
    }

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
    fn sizes() {
        assert_eq!(parse_size("16GiB"), Ok(16 << 30));
        assert_eq!(parse_size("16G"), Ok(16 << 30));
        assert_eq!(parse_size("1.5 MiB"), Ok(3 << 19));
        assert_eq!(parse_size("40GB"), Ok(40_000_000_000));
        assert_eq!(parse_size("1024B"), Ok(1024));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("1024").unwrap_err().contains("no unit"));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }
}
