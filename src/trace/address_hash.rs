//! A hasher for maps keyed by the address of an `Arc`: the pickle writer's memo (objects
//! already written) and the PyTorch importer's converted frame lists, which look up an address
//! for every shared object they meet.

use std::hash::Hasher;

/// A hasher for addresses: one folded multiply, mixing every bit of the address into the low
/// bits the table indexes by (addresses are aligned, so their own low bits are zero).
/// Addresses come from our allocator, not from input, so no seed is needed against
/// collisions chosen by an attacker.
#[derive(Default)]
pub(crate) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, word: u64) {
        // The multiplier of FxHash; folding the 128-bit product brings high bits down.
        let product = u128::from(self.0 ^ word) * 0x517c_c1b7_2722_0a95;
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }

    fn write_usize(&mut self, word: usize) {
        // usize -> u64 is lossless on every platform Rust supports.
        self.write_u64(word as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn hash(address: usize) -> u64 {
        let mut hasher = AddressHasher::default();
        hasher.write_usize(address);
        hasher.finish()
    }

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        // 4096 addresses 16 bytes apart, as small `Arc`s lie. A hash that left their zero low
        // bits alone would reach at most 256 of the 4096 values of the low 12 bits.
        let low_bits: HashSet<u64> = (0..4096)
            .map(|i| hash(0x7f00_0000_0000 + 16 * i) & 0xfff)
            .collect();
        assert!(
            low_bits.len() > 2048,
            "only {} of 4096 low-bit values reached: aligned addresses would crowd few buckets",
            low_bits.len()
        );
    }

    #[test]
    fn usize_and_u64_writes_hash_alike() {
        let mut hasher = AddressHasher::default();
        hasher.write_u64(0x7f00_0000_1230);
        assert_eq!(hasher.finish(), hash(0x7f00_0000_1230));
        assert_ne!(hash(0x7f00_0000_1230), hash(0x7f00_0000_1240));
    }
}
