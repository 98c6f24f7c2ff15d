//! The vector registers' state after faer's matrix kernels.
//!
//! faer's f64 matrix products run AVX-512 microkernels that return with the upper halves of the
//! vector registers dirty (no `vzeroupper`). Until those are cleared, every legacy-SSE instruction
//! on that thread (all scalar f64 code built for baseline x86-64, and libm's `log` and `sincos`)
//! runs with a false dependency on the upper halves: measured on this project's 2-core Xeon, libm
//! ran 26× slower after one 300×300 product, and the checker's seeded inputs took 250 ns per value
//! instead of 27. [`settle`] clears the state on the calling thread and, after a parallel call, on
//! every thread of the pool, where faer's tasks ran.

use faer::Par;

/// Clears the upper halves of the vector registers on this thread (`vzeroupper`), where the CPU
/// has AVX; nothing elsewhere.
#[inline]
pub fn clear_upper() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU supports AVX, checked just above; `vzeroupper` only zeroes the upper
        // halves of the vector registers, which hold nothing live across this call
        unsafe { zero_upper() }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn zero_upper() {
    std::arch::x86_64::_mm256_zeroupper();
}

/// What follows a faer call made with parallelism `par`: [`clear_upper`] here, and on every
/// thread of the rayon pool when the call may have run there.
pub fn settle(par: Par) {
    clear_upper();
    if !matches!(par, Par::Seq) {
        rayon::broadcast(|_| clear_upper());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn settling_inside_parallel_work_returns() {
        // a rule thread of `lint` runs a parallel SVD and settles the pool from inside it
        let n = (0..16)
            .into_par_iter()
            .map(|i| {
                settle(Par::rayon(0));
                i
            })
            .sum::<usize>();
        assert_eq!(n, 120);
        settle(Par::Seq);
    }
}
