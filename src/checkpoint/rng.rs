//! [`StageRng`]: a counter-based generator keyed by (seed, step, stage), so a recomputed
//! forward draws exactly the numbers its first run drew.
//!
//! Checkpointing runs a stage's forward more than once in one step; a stateful generator
//! would hand the rerun different numbers (a different dropout mask) and the gradients would
//! no longer be those of the first sweep. Here the numbers are a pure function of the key and
//! a counter, as in Philox (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2,
//! 3"); the mixing function is SplitMix64's finalizer (Steele et al. 2014), which is cheap and
//! passes BigCrush when fed a counter.

/// A deterministic stream of random numbers for one stage in one training step.
///
/// Every stream with the same `(seed, step, stage)` yields the same numbers, in the same
/// order, however many times it is created.
///
/// ```
/// use blockpool::checkpoint::StageRng;
///
/// let mut first = StageRng::new(7, 3, 2);
/// let mut rerun = StageRng::new(7, 3, 2);
/// let a: Vec<u64> = (0..4).map(|_| first.next_u64()).collect();
/// let b: Vec<u64> = (0..4).map(|_| rerun.next_u64()).collect();
/// assert_eq!(a, b);
/// assert_ne!(StageRng::new(7, 3, 1).next_u64(), a[0]); // another stage, another stream
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageRng {
    key: u64,
    counter: u64,
}

/// SplitMix64's output function: a bijection of `u64` with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl StageRng {
    /// The stream of stage `stage` in training step `step` under `seed`.
    pub fn new(seed: u64, step: u64, stage: usize) -> StageRng {
        // Chained mixing keeps (step, stage) pairs apart: (1, 0) and (0, 1) get unrelated keys.
        let stage = stage as u64;
        let key = mix(mix(mix(seed) ^ step) ^ stage);
        StageRng { key, counter: 0 }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let value = mix(self.key ^ mix(self.counter));
        self.counter = self.counter.wrapping_add(1);
        value
    }

    /// A float uniform in `[0, 1)`, from the top 24 bits (every value is exact in `f32`).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// How many numbers this stream has handed out.
    pub fn drawn(&self) -> u64 {
        self.counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_pure_functions_of_their_key() {
        let draw = |seed, step, stage| {
            let mut rng = StageRng::new(seed, step, stage);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, 2, 3), draw(1, 2, 3));
        assert_ne!(draw(1, 2, 3), draw(1, 3, 2));
        assert_ne!(draw(1, 0, 1), draw(1, 1, 0));
        assert_ne!(draw(0, 2, 3), draw(1, 2, 3));
        let values = draw(5, 5, 5);
        let mut unique = values.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), values.len(), "no repeats in a short stream");
    }

    #[test]
    fn floats_are_in_the_unit_interval_and_roughly_uniform() {
        let mut rng = StageRng::new(0, 0, 0);
        let samples: Vec<f32> = (0..10_000).map(|_| rng.next_f32()).collect();
        assert!(samples.iter().all(|&x| (0.0..1.0).contains(&x)));
        let below_half = samples.iter().filter(|&&x| x < 0.5).count();
        assert!((4_700..5_300).contains(&below_half), "{below_half}");
        assert_eq!(rng.drawn(), 10_000);
    }
}
