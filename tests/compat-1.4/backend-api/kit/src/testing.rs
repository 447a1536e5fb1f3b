//! For plugins' unit tests (feature `testing`): a seeded pseudo-random generator, so that a
//! test's inputs are the same on every run and machine.

/// A deterministic generator: a 64-bit linear congruential generator (Knuth's MMIX
/// constants), each value from the state's top 24 bits. Seeded by its field.
#[derive(Debug, Clone)]
pub struct Lcg(pub u64);

impl Lcg {
    /// The next value in `[lo, hi)`.
    pub fn next_in(&mut self, lo: f32, hi: f32) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lo + (hi - lo) * ((self.0 >> 40) as f32 / (1u64 << 24) as f32)
    }

    /// The next `n` values in `[lo, hi)`.
    pub fn vec_in(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_in(lo, hi)).collect()
    }

    /// The next `n` values in `[-1, 1)`.
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        self.vec_in(n, -1.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first state from seed 0 is the increment; its top 24 bits, 0x1405_7b, scaled to
    /// `[0, 1)`: 1_312_123 / 16_777_216.
    #[test]
    fn known_first_values() {
        let mut g = Lcg(0);
        assert_eq!(g.next_in(0.0, 1.0), 1_312_123.0 / 16_777_216.0);
        assert_eq!(g.0, 1_442_695_040_888_963_407);
        let (mut a, mut b) = (Lcg(42), Lcg(42));
        assert_eq!(a.vec(5), b.vec_in(5, -1.0, 1.0));
        assert!(Lcg(7).vec(1000).iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
