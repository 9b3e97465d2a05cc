//! numpy's legacy global RNG, as far as BigBird uses it: MT19937 seeded with
//! `init_genrand`, and `permutation` (Fisher–Yates from the end with masked rejection).

/// MT19937 with numpy's `np.random.seed(int)` seeding.
pub struct LegacyRandomState {
    mt: [u32; 624],
    index: usize,
}

impl LegacyRandomState {
    /// `np.random.seed(seed)`.
    pub fn new(seed: u32) -> Self {
        let mut mt = [0u32; 624];
        mt[0] = seed;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32.wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_add(i as u32);
        }
        Self { mt, index: 624 }
    }

    fn twist(&mut self) {
        for i in 0..624 {
            let y = (self.mt[i] & 0x8000_0000) | (self.mt[(i + 1) % 624] & 0x7fff_ffff);
            let mut next = self.mt[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= 0x9908_b0df;
            }
            self.mt[i] = next;
        }
        self.index = 0;
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// Uniform integer in `0..=max` (numpy's `random_interval`).
    fn interval(&mut self, max: u32) -> u32 {
        if max == 0 {
            return 0;
        }
        let mask = u32::MAX >> max.leading_zeros();
        loop {
            let v = self.next_u32() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `np.random.permutation(values)` on a copy.
    pub fn permutation<T: Copy>(&mut self, values: &[T]) -> Vec<T> {
        let mut out = values.to_vec();
        for i in (1..out.len()).rev() {
            let j = self.interval(i as u32) as usize;
            out.swap(i, j);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vectors from numpy's `np.random.RandomState(s)`: its first raw outputs and `permutation`.
    #[test]
    fn matches_numpy() {
        let mut r = LegacyRandomState::new(0);
        let first: Vec<u32> = (0..5).map(|_| r.next_u32()).collect();
        assert_eq!(first, [2357136044, 2546248239, 3071714933, 3626093760, 2588848963]);
        let mut r = LegacyRandomState::new(0);
        assert_eq!(r.permutation(&(0..11).collect::<Vec<i64>>()), [4, 9, 2, 10, 6, 1, 7, 8, 3, 0, 5]);
        let mut r = LegacyRandomState::new(3);
        assert_eq!(r.permutation(&(3..16).collect::<Vec<i64>>()), [9, 7, 4, 5, 15, 8, 10, 3, 14, 6, 12, 11, 13]);
    }
}
