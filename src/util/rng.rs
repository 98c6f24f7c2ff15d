//! Seeded random numbers: splitmix64 and Box–Muller, the same on every platform and independent of
//! any crate's generator, so that the SVD sketches and the checker's inputs are reproducible from
//! `--seed` alone.

/// splitmix64: the generator behind every sample here.
fn splitmix(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Deterministic integers uniform in `lo..hi` (`lo` alone when the range is empty).
pub fn integers(seed: u64, n: usize, lo: i64, hi: i64) -> Vec<i64> {
    let span = hi.saturating_sub(lo).max(1) as u64;
    let mut next = splitmix(seed);
    // the modulo bias is below 2^-40 for any span a tensor dimension can have
    (0..n)
        .map(|_| lo.saturating_add((next() % span) as i64))
        .collect()
}

/// Deterministic standard normal samples. A longer request starts with the same values as a
/// shorter one of the same seed.
pub fn normals(seed: u64, n: usize) -> Vec<f64> {
    let mut next = splitmix(seed);
    let mut out = Vec::with_capacity(n.saturating_add(1));
    while out.len() < n {
        // uniform in (0, 1]
        let u1 = ((next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (next() >> 11) as f64 / (1u64 << 53) as f64;
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        out.push(r * t.cos());
        out.push(r * t.sin());
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_cover_their_range_only() {
        let x = integers(7, 10_000, 3, 10);
        assert!(x.iter().all(|v| (3..10).contains(v)));
        for k in 3..10 {
            assert!(x.contains(&k), "{k} never drawn");
        }
        assert_eq!(integers(1, 3, 5, 5), vec![5, 5, 5]);
    }

    #[test]
    fn normals_are_standard() {
        let x = normals(42, 100_000);
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
        assert_eq!(normals(42, 3), normals(42, 5)[..3]);
    }
}
