//! Singular value decompositions in f64 (faer's f32 SVD of rectangular matrices returned wrong
//! small singular values in our measurements), with the parallelism passed explicitly to every
//! faer call: lint runs rules on several threads at once, so nothing here touches faer's
//! process-wide parallelism setting. faer returns singular values in nonincreasing order, which
//! everything below relies on.
//!
//! Small matrices get a full thin SVD. Large ones, when only a low rank is wanted, get a
//! randomized SVD (Halko, Martinsson & Tropp 2011: a Gaussian sketch with 20 columns of
//! oversampling and 2 power iterations), which costs a few passes over the matrix instead of a
//! cubic decomposition. The energy a rank keeps is measured against the Frobenius norm, which is
//! exact whichever way the singular values were found.

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::svd::ComputeSvdVectors;
use faer::{Accum, Mat, MatRef};

pub use faer::Par;

use super::rng::normals;

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

/// Oversampling and power iterations of the randomized SVD.
const OVERSAMPLE: usize = 20;
const POWER_ITERS: usize = 2;
/// Below this smaller side, a full SVD is cheap enough.
const FULL_SVD_MAX: usize = 256;

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

/// Every singular value of `a`, largest first.
pub fn singular_values(a: MatRef<'_, f64>, par: Par) -> Result<Vec<f64>, String> {
    let (m, n) = a.shape();
    let mut s = faer::diag::Diag::<f64>::zeros(m.min(n));
    let mut mem = MemBuffer::new(faer::linalg::svd::svd_scratch::<f64>(
        m,
        n,
        ComputeSvdVectors::No,
        ComputeSvdVectors::No,
        par,
        Default::default(),
    ));
    let r = faer::linalg::svd::svd(
        a,
        s.as_mut(),
        None,
        None,
        par,
        MemStack::new(&mut mem),
        Default::default(),
    )
    .map_err(|e| format!("the SVD did not converge ({e:?})"));
    super::simd::settle(par);
    r?;
    Ok(s.column_vector().iter().copied().collect())
}

/// Truncated SVD of `a` at the wanted rank.
pub fn truncated(a: &Mat<f64>, want: Want, seed: u64, par: Par) -> Result<Factors, String> {
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
                exact(a.as_ref(), total, par).map(|f| f.keep(r))
            } else {
                randomized(a, r, total, seed, par).map(|f| f.keep(r))
            }
        }
        Want::Energy(e) => {
            if small {
                let f = exact(a.as_ref(), total, par)?;
                let r = rank_for_energy(&f.s, total, e).unwrap_or(f.rank());
                return Ok(f.keep(r));
            }
            // grow the sketch until it holds the energy, then fall back to the full SVD
            let mut k = 64.min(full);
            loop {
                if k + OVERSAMPLE >= full / 2 {
                    let f = exact(a.as_ref(), total, par)?;
                    let r = rank_for_energy(&f.s, total, e).unwrap_or(f.rank());
                    return Ok(f.keep(r));
                }
                let f = randomized(a, k, total, seed, par)?;
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

/// Full thin SVD (faer sorts the singular values largest first).
fn exact(a: MatRef<'_, f64>, total: f64, par: Par) -> Result<Factors, String> {
    let (m, n) = a.shape();
    let k = m.min(n);
    let mut s = faer::diag::Diag::<f64>::zeros(k);
    let mut u = Mat::<f64>::zeros(m, k);
    let mut v = Mat::<f64>::zeros(n, k);
    let mut mem = MemBuffer::new(faer::linalg::svd::svd_scratch::<f64>(
        m,
        n,
        ComputeSvdVectors::Thin,
        ComputeSvdVectors::Thin,
        par,
        Default::default(),
    ));
    let r = faer::linalg::svd::svd(
        a,
        s.as_mut(),
        Some(u.as_mut()),
        Some(v.as_mut()),
        par,
        MemStack::new(&mut mem),
        Default::default(),
    )
    .map_err(|e| format!("the SVD did not converge ({e:?})"));
    super::simd::settle(par);
    r?;
    Ok(Factors {
        u,
        s: s.column_vector().iter().copied().collect(),
        v,
        total_energy: total,
    })
}

/// `a × b`.
fn mul(a: MatRef<'_, f64>, b: MatRef<'_, f64>, par: Par) -> Mat<f64> {
    let mut out = Mat::<f64>::zeros(a.nrows(), b.ncols());
    faer::linalg::matmul::matmul(out.as_mut(), Accum::Replace, a, b, 1.0, par);
    super::simd::settle(par);
    out
}

/// An orthonormal basis of the columns of `y` (the thin Q of its QR decomposition).
fn orthonormal(y: Mat<f64>, par: Par) -> Mat<f64> {
    use faer::linalg::{householder, qr::no_pivoting::factor};
    let (m, n) = y.shape();
    let size = m.min(n);
    let block = factor::recommended_block_size::<f64>(m, n);
    let mut qr = y;
    let mut coeff = Mat::<f64>::zeros(block, size);
    let mut mem = MemBuffer::new(factor::qr_in_place_scratch::<f64>(
        m,
        n,
        block,
        par,
        Default::default(),
    ));
    factor::qr_in_place(
        qr.as_mut(),
        coeff.as_mut(),
        par,
        MemStack::new(&mut mem),
        Default::default(),
    );
    let mut q = Mat::<f64>::identity(m, size);
    let mut mem = MemBuffer::new(
        householder::apply_block_householder_sequence_on_the_left_in_place_scratch::<f64>(
            m, block, size,
        ),
    );
    householder::apply_block_householder_sequence_on_the_left_in_place_with_conj(
        qr.as_ref(),
        coeff.as_ref(),
        faer::Conj::No,
        q.as_mut(),
        par,
        MemStack::new(&mut mem),
    );
    super::simd::settle(par);
    q
}

/// Randomized SVD keeping `k` singular triplets (Halko et al. 2011, algorithms 4.4 and 5.1).
fn randomized(a: &Mat<f64>, k: usize, total: f64, seed: u64, par: Par) -> Result<Factors, String> {
    let (m, n) = (a.nrows(), a.ncols());
    let l = (k + OVERSAMPLE).min(m.min(n));
    let g = normals(seed, n * l);
    let omega = Mat::from_fn(n, l, |i, j| g[i * l + j]);
    let mut q = orthonormal(mul(a.as_ref(), omega.as_ref(), par), par);
    for _ in 0..POWER_ITERS {
        let z = orthonormal(mul(a.transpose(), q.as_ref(), par), par);
        q = orthonormal(mul(a.as_ref(), z.as_ref(), par), par);
    }
    let b = mul(q.transpose(), a.as_ref(), par); // l × n
    let f = exact(b.as_ref(), total, par)?;
    let u = mul(q.as_ref(), f.u.as_ref(), par);
    Ok(Factors { u, ..f }.keep(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A matrix with known singular values: U diag(s) Vᵀ from orthonormal factors.
    fn with_spectrum(m: usize, n: usize, s: &[f64]) -> Mat<f64> {
        let (gu, gv) = (normals(1, m * s.len()), normals(2, n * s.len()));
        let qu = orthonormal(
            Mat::from_fn(m, s.len(), |i, j| gu[i * s.len() + j]),
            Par::Seq,
        );
        let qv = orthonormal(
            Mat::from_fn(n, s.len(), |i, j| gv[i * s.len() + j]),
            Par::Seq,
        );
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
        let f = truncated(&a, Want::Rank(7), 0, Par::Seq).unwrap();
        let d = Mat::from_fn(7, 7, |i, j| if i == j { f.s[i] } else { 0.0 });
        let back = &f.u * &d * f.v.transpose();
        let err = (&back - &a).norm_max();
        assert!(err < 1e-12, "{err}");
        assert!((f.s[0] - 5.0).abs() < 1e-12 && (f.s[6] - 0.1).abs() < 1e-12);
        assert!((f.kept_energy() - 1.0).abs() < 1e-12);
        let s = singular_values(a.as_ref(), Par::Seq).unwrap();
        assert!((s[0] - 5.0).abs() < 1e-12 && (s[6] - 0.1).abs() < 1e-12);
    }

    #[test]
    fn randomized_matches_the_optimal_error() {
        // 400 x 300 with a decaying spectrum: the rank-10 truncation's error is the 11th value
        let s: Vec<f64> = (0..300).map(|i| 0.8f64.powi(i)).collect();
        let a = with_spectrum(400, 300, &s);
        let f = randomized(&a, 10, a.squared_norm_l2(), 7, Par::rayon(0)).unwrap();
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
        let f = truncated(&a, Want::Energy(0.99), 3, Par::Seq).unwrap();
        let total: f64 = s.iter().map(|x| x * x).sum();
        assert_eq!(Some(f.rank()), rank_for_energy(&s, total, 0.99));
    }
}
