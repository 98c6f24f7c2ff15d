//! Seeded random numbers: splitmix64 and Box–Muller, the same on every platform and independent of
//! any crate's generator, so that the SVD sketches and the checker's inputs are reproducible from
//! `--seed` alone.

/// splitmix64's increment of its state per draw.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64: the generator behind every sample here.
fn splitmix(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state.wrapping_add(GOLDEN);
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
///
/// Pair `j` (samples `2j`, `2j + 1`) comes from draws `2j + 1` and `2j + 2` of splitmix64, whose
/// state is a counter: so blocks of pairs are made in parallel, each from its own starting state,
/// and the samples are the same as one sequential run's.
pub fn normals(seed: u64, n: usize) -> Vec<f64> {
    use rayon::prelude::*;
    /// Pairs per block: large enough that a block outweighs its scheduling.
    const BLOCK: usize = 1 << 14;
    let pairs = n.div_ceil(2);
    let mut out = vec![0.0; pairs * 2];
    out.par_chunks_mut(2 * BLOCK)
        .enumerate()
        .for_each(|(b, chunk)| {
            let first_draw = (b * BLOCK * 2) as u64;
            let mut next = splitmix(seed.wrapping_add(first_draw.wrapping_mul(GOLDEN)));
            for pair in chunk.chunks_exact_mut(2) {
                // uniform in (0, 1]
                let u1 = ((next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                let u2 = (next() >> 11) as f64 / (1u64 << 53) as f64;
                let r = (-2.0 * u1.ln()).sqrt();
                let t = std::f64::consts::TAU * u2;
                pair[0] = r * t.cos();
                pair[1] = r * t.sin();
            }
        });
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

    #[test]
    fn blocks_made_in_parallel_equal_one_sequential_run() {
        // the sequential definition, over several blocks and an odd length
        let (seed, n) = (0xdead_beef, 3 * (1 << 15) + 7);
        let mut next = splitmix(seed);
        let mut want = Vec::new();
        while want.len() < n {
            let u1 = ((next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
            let u2 = (next() >> 11) as f64 / (1u64 << 53) as f64;
            let (r, t) = ((-2.0 * u1.ln()).sqrt(), std::f64::consts::TAU * u2);
            want.extend([r * t.cos(), r * t.sin()]);
        }
        want.truncate(n);
        let got = normals(seed, n);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(got.len(), n);
    }
}
