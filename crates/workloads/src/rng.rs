//! The random choices the benchmark specifications prescribe.

use crate::WorkloadError;
use rand::Rng;
use rand_distr::{Distribution, Zipf};

/// TPC-C's and TATP's non-uniform random number: `NURand(A, x, y) = (((random(0, A) |
/// random(x, y)) + C) % (y - x + 1)) + x`.
pub fn nurand(rng: &mut impl Rng, a: u64, c: u64, x: u64, y: u64) -> u64 {
    (((rng.random_range(0..=a) | rng.random_range(x..=y)) + c) % (y - x + 1)) + x
}

/// A stateless 64-bit mix (splitmix64's finalizer): initial values derived from a key and
/// the seed, so that `--verify` recomputes them instead of storing them.
pub fn mix(seed: u64, x: u64) -> u64 {
    let mut z = seed ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Picks one of `weights.len()` choices with the given integer weights (a transaction mix).
pub fn pick(rng: &mut impl Rng, weights: &[u32]) -> usize {
    let total: u32 = weights.iter().sum();
    let mut r = rng.random_range(0..total.max(1));
    for (i, &w) in weights.iter().enumerate() {
        if r < w {
            return i;
        }
        r -= w;
    }
    weights.len() - 1
}

/// Ranks `0..n` drawn from a zipf distribution of parameter `theta`, rank 0 the hottest
/// (YCSB's skew: 0.99 its default). One type for every workload's `--theta`, so that they
/// check and draw alike.
#[derive(Debug, Clone)]
pub struct Zipfian {
    n: u64,
    zipf: Zipf<f64>,
}

impl Zipfian {
    /// `None` for `theta == 0` (uniform: the workload draws it itself); a one-line error
    /// naming `what` (e.g. `kv: --theta`) for a negative or non-finite `theta`, or one the
    /// distribution refuses.
    pub fn new(what: &str, n: u64, theta: f64) -> Result<Option<Zipfian>, WorkloadError> {
        if !(theta >= 0.0 && theta.is_finite()) {
            return Err(WorkloadError::Options(format!(
                "{what} must be 0 (uniform) or positive, got {theta}"
            )));
        }
        if theta == 0.0 {
            return Ok(None);
        }
        let zipf = Zipf::new(n as f64, theta)
            .map_err(|e| WorkloadError::Options(format!("{what}: zipf over {n}: {e}")))?;
        Ok(Some(Zipfian { n, zipf }))
    }

    /// A rank in `0..n`.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        // Zipf's ranks are 1..=n (a float: clamped against rounding).
        (self.zipf.sample(rng) as u64).clamp(1, self.n) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(1);
        let mut hits = vec![0u32; 3000];
        for _ in 0..300_000 {
            let v = nurand(&mut rng, 1023, 259, 1, 3000);
            assert!((1..=3000).contains(&v));
            hits[v as usize - 1] += 1;
        }
        let max = *hits.iter().max().unwrap();
        let min = *hits.iter().min().unwrap();
        assert!(max > 4 * (min + 1), "NURand is non-uniform: {min}..{max}");
    }

    #[test]
    fn the_mix_follows_its_weights() {
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(2);
        let w = [25, 15, 15, 15, 15, 15];
        let mut n = [0u32; 6];
        for _ in 0..100_000 {
            n[pick(&mut rng, &w)] += 1;
        }
        for (i, &c) in n.iter().enumerate() {
            let want = 1000 * w[i];
            assert!(c.abs_diff(want) < want / 10, "{i}: {c} vs {want}");
        }
        assert_eq!(pick(&mut rng, &[0, 0, 7]), 2);
    }

    #[test]
    fn zipfian_is_skewed_in_range_and_refuses_bad_thetas() {
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(3);
        let z = Zipfian::new("t", 1000, 0.99).unwrap().unwrap();
        let mut hits = vec![0u32; 1000];
        for _ in 0..100_000 {
            hits[z.sample(&mut rng) as usize] += 1;
        }
        // Uniform would give each rank about 100; zipf 0.99 over 1,000 gives rank 0 about 13%.
        assert!(hits[0] > 10_000, "{}", hits[0]);
        assert!(hits[0] > hits[1] && hits[1] > hits[10] && hits[10] > hits[999]);
        assert!(Zipfian::new("t", 1000, 0.0).unwrap().is_none());
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = Zipfian::new("kv: --theta", 1000, bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains("kv: --theta"), "{e}");
        }
    }

    #[test]
    fn mix_is_a_function_of_seed_and_input() {
        assert_eq!(mix(1, 2), mix(1, 2));
        assert_ne!(mix(1, 2), mix(2, 2));
        assert_ne!(mix(1, 2), mix(1, 3));
    }
}
