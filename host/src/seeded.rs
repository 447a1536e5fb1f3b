//! Seeded data: the same pseudo-random values on every machine, for the inputs a caller of
//! `backplane run` or `bench` did not give and for the conformance kit's cases.
//!
//! Imports: nothing.

use backplane_api::{DataType, TensorInfo};

/// `n` values, uniform in [-1, 1), from a fixed 64-bit LCG started at `seed`.
pub fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The bytes of an input of `info` that its caller did not give: [`uniform`] values for
/// floats; ones for Signed32 and Boolean (valid token ids and "attend" for a language model's
/// ids and masks). `None` when the tensor's size overflows.
pub fn input_bytes(info: &TensorInfo, seed: u64) -> Option<Vec<u8>> {
    let n = info.num_elements()?;
    Some(match info.data_type {
        DataType::Signed32 => 1i32.to_le_bytes().repeat(n),
        DataType::Boolean => vec![1u8; n],
        _ => uniform(n, seed)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sequence is fixed: these are the LCG's first values from seed 1, worked out by
    /// hand from its definition (state * 6364136223846793005 + 1442695040888963407, top 24
    /// bits of the state as a fraction, scaled to [-1, 1)).
    #[test]
    fn values_are_fixed_and_in_range() {
        let v = uniform(1000, 1);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
        let s1 = 1u64
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        assert_eq!(v[0], ((s1 >> 40) as f32 / 16_777_216.0) * 2.0 - 1.0);
        assert_eq!(uniform(3, 7), uniform(3, 7));
        assert_ne!(uniform(3, 7), uniform(3, 8));
    }

    #[test]
    fn integer_inputs_are_ones() {
        let ids = TensorInfo::new(&[2, 3], DataType::Signed32);
        assert_eq!(input_bytes(&ids, 5), Some(1i32.to_le_bytes().repeat(6)));
        let mask = TensorInfo::new(&[4], DataType::Boolean);
        assert_eq!(input_bytes(&mask, 5), Some(vec![1; 4]));
        let x = TensorInfo::new(&[2], DataType::Float32);
        assert_eq!(input_bytes(&x, 5).map(|b| b.len()), Some(8));
    }
}
