//! Truncated singular value decompositions for the rewrites, in f64 (faer's f32 SVD of rectangular
//! matrices returned wrong small singular values in our measurements).
//!
//! Small matrices get a full thin SVD. Large ones, when only a low rank is wanted, get a
//! randomized SVD (Halko, Martinsson & Tropp 2011: a Gaussian sketch with 20 columns of
//! oversampling and 2 power iterations), which costs a few passes over the matrix instead of a
//! cubic decomposition. The energy a rank keeps is measured against the Frobenius norm, which is
//! exact whichever way the singular values were found.

use faer::Mat;

/// Which rank to keep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Want {
    /// This rank (clamped to `min(m, n)`).
    Rank(usize),
    /// The smallest rank whose squared singular values reach this share of the total.
    Energy(f64),
}

/// A rank-`r` factorisation `A ≈ U diag(s) Vᵀ`.
pub struct Factors {
    /// `m × r`
    pub u: Mat<f64>,
    /// `r` singular values, largest first.
    pub s: Vec<f64>,
    /// `n × r`
    pub v: Mat<f64>,
    /// `‖A‖_F²`, the sum of all squared singular values.
    pub total_energy: f64,
}

impl Factors {
    pub fn rank(&self) -> usize {
        self.s.len()
    }

    /// Share of `‖A‖_F²` the kept singular values hold.
    pub fn kept_energy(&self) -> f64 {
        if self.total_energy <= 0.0 {
            return 1.0;
        }
        (self.s.iter().map(|x| x * x).sum::<f64>() / self.total_energy).min(1.0)
    }
}

/// Oversampling and power iterations of the randomized SVD.
const OVERSAMPLE: usize = 20;
const POWER_ITERS: usize = 2;
/// Below this smaller side, a full SVD is cheap enough.
const FULL_SVD_MAX: usize = 256;

/// Runs `f` with faer's global parallelism turned off, then restores it: thread hand-offs cost
/// more than many tiny decompositions (rewrites run on one thread, so nothing else sees the switch).
pub fn sequential<T>(f: impl FnOnce() -> T) -> T {
    let before = faer::get_global_parallelism();
    faer::set_global_parallelism(faer::Par::Seq);
    let out = f();
    faer::set_global_parallelism(before);
    out
}

/// A row-major `m × n` slice as a faer matrix.
pub fn matrix(data: &[f64], m: usize, n: usize) -> Mat<f64> {
    Mat::from_fn(m, n, |i, j| data[i * n + j])
}

/// The smallest rank whose squared singular values (largest first) reach `energy` of `total`;
/// `None` when even all of `s` does not.
pub fn rank_for_energy(s: &[f64], total: f64, energy: f64) -> Option<usize> {
    if total <= 0.0 {
        return Some(1.min(s.len()));
    }
    let mut acc = 0.0;
    for (i, x) in s.iter().enumerate() {
        acc += x * x;
        if acc >= energy * total * (1.0 - 1e-12) {
            return Some(i + 1);
        }
    }
    None
}

/// Truncated SVD of `a` at the wanted rank.
pub fn truncated(a: &Mat<f64>, want: Want, seed: u64) -> Result<Factors, String> {
    let (m, n) = (a.nrows(), a.ncols());
    let full = m.min(n);
    if full == 0 {
        return Err("the matrix is empty".into());
    }
    let total: f64 = a.squared_norm_l2();
    if !total.is_finite() {
        return Err("the weights hold NaN or infinite values".into());
    }
    let small = full <= FULL_SVD_MAX;
    match want {
        Want::Rank(r) => {
            let r = r.clamp(1, full);
            if small || r + OVERSAMPLE >= full / 2 {
                exact(a, total).map(|f| f.keep(r))
            } else {
                randomized(a, r, total, seed).map(|f| f.keep(r))
            }
        }
        Want::Energy(e) => {
            if small {
                let f = exact(a, total)?;
                let r = rank_for_energy(&f.s, total, e).unwrap_or(f.rank());
                return Ok(f.keep(r));
            }
            // grow the sketch until it holds the energy, then fall back to the full SVD
            let mut k = 64.min(full);
            loop {
                if k + OVERSAMPLE >= full / 2 {
                    let f = exact(a, total)?;
                    let r = rank_for_energy(&f.s, total, e).unwrap_or(f.rank());
                    return Ok(f.keep(r));
                }
                let f = randomized(a, k, total, seed)?;
                if let Some(r) = rank_for_energy(&f.s, total, e) {
                    if r <= k {
                        return Ok(f.keep(r));
                    }
                }
                k *= 2;
            }
        }
    }
}

impl Factors {
    fn keep(self, r: usize) -> Factors {
        let r = r.min(self.s.len());
        Factors {
            u: self.u.subcols(0, r).to_owned(),
            s: self.s[..r].to_vec(),
            v: self.v.subcols(0, r).to_owned(),
            total_energy: self.total_energy,
        }
    }
}

/// Full thin SVD, singular values sorted largest first.
fn exact(a: &Mat<f64>, total: f64) -> Result<Factors, String> {
    let svd = a
        .thin_svd()
        .map_err(|e| format!("the SVD did not converge ({e:?})"))?;
    Ok(sorted(
        svd.U().to_owned(),
        svd.S().column_vector().iter().copied().collect(),
        svd.V().to_owned(),
        total,
    ))
}

fn sorted(u: Mat<f64>, s: Vec<f64>, v: Mat<f64>, total: f64) -> Factors {
    let mut order: Vec<usize> = (0..s.len()).collect();
    order.sort_by(|&i, &j| s[j].total_cmp(&s[i]));
    if order.iter().enumerate().all(|(i, &j)| i == j) {
        return Factors {
            u,
            s,
            v,
            total_energy: total,
        };
    }
    Factors {
        u: Mat::from_fn(u.nrows(), order.len(), |i, j| u[(i, order[j])]),
        s: order.iter().map(|&j| s[j]).collect(),
        v: Mat::from_fn(v.nrows(), order.len(), |i, j| v[(i, order[j])]),
        total_energy: total,
    }
}

/// Randomized SVD keeping `k` singular triplets (Halko et al. 2011, algorithms 4.4 and 5.1).
fn randomized(a: &Mat<f64>, k: usize, total: f64, seed: u64) -> Result<Factors, String> {
    let (m, n) = (a.nrows(), a.ncols());
    let l = (k + OVERSAMPLE).min(m.min(n));
    let g = normals(seed, n * l);
    let omega = Mat::from_fn(n, l, |i, j| g[i * l + j]);
    let mut q = orthonormal(&(a * &omega));
    for _ in 0..POWER_ITERS {
        let z = orthonormal(&(a.transpose() * &q));
        q = orthonormal(&(a * &z));
    }
    let b = q.transpose() * a; // l × n
    let svd = b
        .thin_svd()
        .map_err(|e| format!("the SVD did not converge ({e:?})"))?;
    let u = &q * svd.U();
    let f = sorted(
        u,
        svd.S().column_vector().iter().copied().collect(),
        svd.V().to_owned(),
        total,
    );
    Ok(f.keep(k))
}

fn orthonormal(y: &Mat<f64>) -> Mat<f64> {
    y.qr().compute_thin_Q()
}

/// Deterministic standard normal samples (splitmix64 and Box–Muller), the same on every platform
/// and independent of any crate's generator.
pub fn normals(seed: u64, n: usize) -> Vec<f64> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut out = Vec::with_capacity(n + 1);
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

    /// A matrix with known singular values: U diag(s) Vᵀ from orthonormal factors.
    fn with_spectrum(m: usize, n: usize, s: &[f64]) -> Mat<f64> {
        let (gu, gv) = (normals(1, m * s.len()), normals(2, n * s.len()));
        let qu = orthonormal(&Mat::from_fn(m, s.len(), |i, j| gu[i * s.len() + j]));
        let qv = orthonormal(&Mat::from_fn(n, s.len(), |i, j| gv[i * s.len() + j]));
        let d = Mat::from_fn(s.len(), s.len(), |i, j| if i == j { s[i] } else { 0.0 });
        &qu * &d * qv.transpose()
    }

    #[test]
    fn energy_rank() {
        assert_eq!(rank_for_energy(&[3.0, 1.0, 0.0], 10.0, 0.9), Some(1));
        assert_eq!(rank_for_energy(&[1.0, 1.0, 1.0, 1.0], 4.0, 0.5), Some(2));
        assert_eq!(rank_for_energy(&[1.0, 1.0], 4.0, 0.9), None);
    }

    #[test]
    fn full_rank_reconstructs() {
        let a = with_spectrum(12, 7, &[5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.1]);
        let f = truncated(&a, Want::Rank(7), 0).unwrap();
        let d = Mat::from_fn(7, 7, |i, j| if i == j { f.s[i] } else { 0.0 });
        let back = &f.u * &d * f.v.transpose();
        let err = (&back - &a).norm_max();
        assert!(err < 1e-12, "{err}");
        assert!((f.s[0] - 5.0).abs() < 1e-12 && (f.s[6] - 0.1).abs() < 1e-12);
        assert!((f.kept_energy() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn randomized_matches_the_optimal_error() {
        // 400 x 300 with a decaying spectrum: the rank-10 truncation's error is the 11th value
        let s: Vec<f64> = (0..300).map(|i| 0.8f64.powi(i)).collect();
        let a = with_spectrum(400, 300, &s);
        let f = randomized(&a, 10, a.squared_norm_l2(), 7).unwrap();
        for i in 0..10 {
            assert!(
                (f.s[i] - s[i]).abs() < 1e-9 * s[0],
                "{i}: {} vs {}",
                f.s[i],
                s[i]
            );
        }
        let d = Mat::from_fn(10, 10, |i, j| if i == j { f.s[i] } else { 0.0 });
        let err = (&f.u * &d * f.v.transpose() - &a).norm_l2();
        let optimal: f64 = s[10..].iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!(err <= optimal * 1.003, "{err} vs {optimal}");
    }

    #[test]
    fn energy_through_the_sketch() {
        let s: Vec<f64> = (0..300).map(|i| 0.9f64.powi(i)).collect();
        let a = with_spectrum(400, 300, &s);
        let f = truncated(&a, Want::Energy(0.99), 3).unwrap();
        let total: f64 = s.iter().map(|x| x * x).sum();
        assert_eq!(Some(f.rank()), rank_for_energy(&s, total, 0.99));
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
