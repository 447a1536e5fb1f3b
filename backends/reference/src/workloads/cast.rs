//! Cast (Backend API 1.1): each element converted to another data type (ONNX `Cast`), between
//! every plain type (Backend API 1.5: the integers, the floats, Boolean). Rust's `as` decides:
//! a float to an integer rounds toward zero and saturates, NaN giving 0; an integer to a
//! narrower integer keeps the low bits; to a float rounds to nearest. To Boolean anything but
//! zero is true, NaN included; Boolean reads as 0 or 1. The 16-bit floats read exactly as `f32`
//! and are written by one rounding to nearest even from `f64`.

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc,
};
use num_traits::AsPrimitive;

use super::numeric::{by_numeric_type, half_bits, is_half, widen_half};
use super::{ExpectedShapes, expect_counts, invalid_layer};

/// Creates the workload of a `Cast` layer (one input, one output of its shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Cast(to) = desc.layer else {
        return Err(invalid_layer(desc, "not a Cast layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if desc.outputs[0].data_type != *to || desc.inputs[0].shape != desc.outputs[0].shape {
        return Err(invalid_layer(
            desc,
            format_args!(
                "Cast to {to} of {} into {}",
                desc.inputs[0], desc.outputs[0]
            ),
        ));
    }
    Ok(Box::new(CastWorkload {
        shapes: ExpectedShapes::of(desc),
        from: desc.inputs[0].data_type,
        to: *to,
    }))
}

/// Converts element by element.
#[derive(Debug)]
pub struct CastWorkload {
    shapes: ExpectedShapes,
    from: DataType,
    to: DataType,
}

/// What a cast reads: a plain numeric element, converted to every other with Rust's `as`.
trait Source:
    Copy
    + Default
    + PartialEq
    + AsPrimitive<f32>
    + AsPrimitive<f64>
    + AsPrimitive<i8>
    + AsPrimitive<i16>
    + AsPrimitive<i32>
    + AsPrimitive<i64>
    + AsPrimitive<u8>
    + AsPrimitive<u16>
    + AsPrimitive<u32>
    + AsPrimitive<u64>
{
}

impl<T> Source for T where
    T: Copy
        + Default
        + PartialEq
        + AsPrimitive<f32>
        + AsPrimitive<f64>
        + AsPrimitive<i8>
        + AsPrimitive<i16>
        + AsPrimitive<i32>
        + AsPrimitive<i64>
        + AsPrimitive<u8>
        + AsPrimitive<u16>
        + AsPrimitive<u32>
        + AsPrimitive<u64>
{
}

/// Writes `src` converted to `to` into `output`.
fn cast_from<S: Source>(
    src: &[S],
    to: DataType,
    output: &mut TensorViewMut<'_>,
) -> BackendResult<()> {
    match to {
        DataType::Boolean => {
            for (d, &s) in output.as_mut_slice::<u8>()?.iter_mut().zip(src) {
                *d = u8::from(s != S::default());
            }
            Ok(())
        }
        to if is_half(to) => {
            for (d, &s) in output.as_mut_slice::<u16>()?.iter_mut().zip(src) {
                *d = half_bits(to, AsPrimitive::<f64>::as_(s));
            }
            Ok(())
        }
        to => by_numeric_type!(
            to,
            |D| {
                for (d, &s) in output.as_mut_slice::<D>()?.iter_mut().zip(src) {
                    *d = AsPrimitive::<D>::as_(s);
                }
                Ok(())
            },
            Err(BackendError::unsupported(format!(
                "CpuRef casts to no {to}"
            )))
        ),
    }
}

impl Workload for CastWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let (x, y) = (&inputs[0], &mut outputs[0]);
        match self.from {
            DataType::Boolean => {
                let bits: Vec<u8> = x
                    .as_slice::<u8>()?
                    .iter()
                    .map(|&b| u8::from(b != 0))
                    .collect();
                cast_from(&bits, self.to, y)
            }
            from if is_half(from) => cast_from(&widen_half(from, x.as_slice::<u16>()?), self.to, y),
            from => by_numeric_type!(
                from,
                |S| cast_from(x.as_slice::<S>()?, self.to, y),
                Err(BackendError::unsupported(format!(
                    "CpuRef casts from no {from}"
                )))
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};

    fn cast(from: (DataType, Bytes), to: DataType, n: u32) -> Bytes {
        try_run_typed(
            &LayerDescriptor::Cast(to),
            &[(typed(&[n], from.0), from.1)],
            &typed(&[n], to),
        )
        .unwrap()
    }

    #[test]
    fn every_pair_with_its_edges() {
        let f = [1.9f32, -1.9, 0.0, -0.0, f32::NAN, 3e9, -3e9, 0.5];
        let fb = || (DataType::Float32, Bytes::of(&f));
        assert_eq!(
            cast(fb(), DataType::Signed32, 8).to_vec::<i32>(),
            [1, -1, 0, 0, 0, i32::MAX, i32::MIN, 0]
        );
        assert_eq!(
            cast(fb(), DataType::Boolean, 8).to_vec::<u8>(),
            [1, 1, 0, 0, 1, 1, 1, 1]
        );
        let i = [16_777_217i32, -3, 0, 1];
        let ib = || (DataType::Signed32, Bytes::of(&i));
        assert_eq!(
            cast(ib(), DataType::Float32, 4).to_vec::<f32>(),
            [16_777_216.0, -3.0, 0.0, 1.0]
        );
        assert_eq!(
            cast(ib(), DataType::Boolean, 4).to_vec::<u8>(),
            [1, 1, 0, 1]
        );
        let b = [1u8, 0];
        let bb = || (DataType::Boolean, Bytes::of(&b));
        assert_eq!(cast(bb(), DataType::Float32, 2).to_vec::<f32>(), [1.0, 0.0]);
        assert_eq!(cast(bb(), DataType::Signed32, 2).to_vec::<i32>(), [1, 0]);
        assert_eq!(cast(bb(), DataType::Boolean, 2).to_vec::<u8>(), [1, 0]);
        assert_eq!(cast(ib(), DataType::Signed32, 4).to_vec::<i32>(), i);
    }

    /// Backend API 1.5's types, each value worked out by hand from the rules in the module doc.
    #[test]
    fn the_1_5_types_with_their_edges() {
        use DataType::*;
        let wide = [i64::from(i32::MAX) + 1, -1, 300, -129];
        let w = || (Signed64, Bytes::of(&wide));
        // Low bits: 2^31 is i32::MIN; 300 is 44 in u8; -129 is 127 in i8.
        assert_eq!(
            cast(w(), Signed32, 4).to_vec::<i32>(),
            [i32::MIN, -1, 300, -129]
        );
        assert_eq!(cast(w(), UnsignedInt8, 4).to_vec::<u8>(), [0, 255, 44, 127]);
        assert_eq!(cast(w(), Signed8, 4).to_vec::<i8>(), [0, -1, 44, 127]);
        assert_eq!(
            cast(w(), UnsignedInt16, 4).to_vec::<u16>(),
            [0, 65535, 300, 65407]
        );
        assert_eq!(
            cast(w(), UnsignedInt64, 4).to_vec::<u64>(),
            [1 << 31, u64::MAX, 300, u64::MAX - 128]
        );
        assert_eq!(
            cast(w(), Float64, 4).to_vec::<f64>(),
            [2_147_483_648.0, -1.0, 300.0, -129.0]
        );
        // Floats to unsigned saturate at 0 and the maximum.
        let f = [-1.5f64, 255.9, 1e300, f64::NAN];
        assert_eq!(
            cast((Float64, Bytes::of(&f)), UnsignedInt8, 4).to_vec::<u8>(),
            [0, 255, 255, 0]
        );
        assert_eq!(
            cast((Float64, Bytes::of(&f)), Signed16, 4).to_vec::<i16>(),
            [-1, 255, i16::MAX, 0]
        );
        // To Float16: 1 + 2^-11 ties to even (1.0, 0x3c00); 65520 overflows to infinity;
        // 2^-24 is the smallest subnormal (0x0001). From it: exact.
        let h = [1.0f32 + 2f32.powi(-11), 65520.0, 2f32.powi(-24), -2.0];
        let half = cast((Float32, Bytes::of(&h)), Float16, 4).to_vec::<u16>();
        assert_eq!(half, [0x3c00, 0x7c00, 0x0001, 0xc000]);
        assert_eq!(
            cast((Float16, Bytes::of(&half)), Float32, 4).to_vec::<f32>(),
            [1.0, f32::INFINITY, 2f32.powi(-24), -2.0]
        );
        assert_eq!(
            cast((Float16, Bytes::of(&half)), Signed64, 4).to_vec::<i64>(),
            [1, i64::MAX, 0, -2]
        );
        // BFloat16 is the upper half of a binary32, rounded: 3.0 is 0x4040.
        let bf = cast((Signed32, Bytes::of(&[3i32, -1])), BFloat16, 2).to_vec::<u16>();
        assert_eq!(bf, [0x4040, 0xbf80]);
        assert_eq!(
            cast((UnsignedInt8, Bytes::of(&[0u8, 7])), Boolean, 2).to_vec::<u8>(),
            [0, 1]
        );
        assert_eq!(
            cast((Boolean, Bytes::of(&[1u8, 0])), Float64, 2).to_vec::<f64>(),
            [1.0, 0.0]
        );
    }
}
