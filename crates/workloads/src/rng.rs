//! The random choices the benchmark specifications prescribe.

use rand::Rng;

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
    fn mix_is_a_function_of_seed_and_input() {
        assert_eq!(mix(1, 2), mix(1, 2));
        assert_ne!(mix(1, 2), mix(2, 2));
        assert_ne!(mix(1, 2), mix(1, 3));
    }
}
