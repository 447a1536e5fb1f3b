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
/// floats (rounded to the input's float type); ones for the integer types and Boolean (valid
/// token ids and "attend" for a language model's ids and masks); the zero point for a quantized
/// type (the real value 0). `None` when the tensor's size overflows.
pub fn input_bytes(info: &TensorInfo, seed: u64) -> Option<Vec<u8>> {
    let n = info.num_elements()?;
    let size = info.data_type.size_in_bytes();
    let floats = || uniform(n, seed);
    Some(match info.data_type {
        DataType::Float32 => floats().iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Float64 => floats()
            .iter()
            .flat_map(|&v| f64::from(v).to_le_bytes())
            .collect(),
        // Converted here: `seeded` imports nothing of the host (`onnx::half_bytes` is above it).
        DataType::Float16 => floats()
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        DataType::BFloat16 => floats()
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        t if t.is_quantized() => {
            let zero = info
                .quantization
                .as_ref()
                .into_option()
                .map_or(0, |q| q.offset);
            // The zero point's low byte is the stored value of the real 0.
            vec![zero.to_le_bytes()[0]; n]
        }
        // One, little-endian, in the element's width (integers and Boolean).
        _ => {
            let mut one = vec![0u8; size];
            one[0] = 1;
            one.repeat(n)
        }
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

    /// Every type gets bytes of its own size: ones for the integers, the zero point for a
    /// quantized type, floats of the uniform sequence in the input's float type.
    #[test]
    fn every_type_gets_its_own_size() {
        use backplane_api::Quantization;
        for dt in DataType::ALL {
            let info = TensorInfo::new(&[3], dt);
            let bytes = input_bytes(&info, 1).unwrap();
            assert_eq!(bytes.len(), 3 * dt.size_in_bytes(), "{dt}");
        }
        let ids = input_bytes(&TensorInfo::new(&[2], DataType::Signed64), 1).unwrap();
        assert_eq!(
            ids,
            [1i64, 1]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        let q = TensorInfo::new(&[2], DataType::QAsymmU8)
            .with_quantization(Quantization::per_tensor(0.5, 128));
        assert_eq!(input_bytes(&q, 1).unwrap(), [128, 128]);
        let wide = input_bytes(&TensorInfo::new(&[1], DataType::Float64), 1).unwrap();
        assert_eq!(
            f64::from_le_bytes(wide.try_into().unwrap()),
            f64::from(uniform(1, 1)[0])
        );
    }
}
