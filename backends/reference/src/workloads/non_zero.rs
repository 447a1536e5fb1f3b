//! NonZero (Backend API 1.5): the indices of the non-zero elements of a tensor of any plain
//! type, with their count, in the layout the API defines (`LayerDescriptor::NonZero`):
//! `[rank + 1, n]` Signed64, the count in row 0, the indices in the first `count` columns of
//! the rows after it.

use backplane_api::{
    BackendResult, DataType, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, invalid_layer, raw_mut};

/// Creates the workload of a `NonZero` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    if !matches!(desc.layer, LayerDescriptor::NonZero) {
        return Err(invalid_layer(desc, "not a NonZero layer"));
    }
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let input = &desc.inputs[0];
    if input.data_type.is_quantized() {
        return Err(invalid_layer(desc, "the input must be of a plain type"));
    }
    Ok(Box::new(NonZeroWorkload {
        shapes: ExpectedShapes::of(desc),
        dims: input.shape.iter().map(|&d| d as usize).collect(),
        data_type: input.data_type,
    }))
}

/// Finds the non-zero elements.
#[derive(Debug)]
pub struct NonZeroWorkload {
    shapes: ExpectedShapes,
    dims: Vec<usize>,
    data_type: DataType,
}

impl NonZeroWorkload {
    /// Whether the element `bytes` (little-endian, of the input's type) is not zero: any bit
    /// set, except a float's sign bit (-0 is zero; NaN is not).
    fn is_non_zero(&self, bytes: &[u8]) -> bool {
        let last = bytes.len() - 1;
        let sign_masked = self.data_type.is_float();
        bytes.iter().enumerate().any(|(i, &b)| {
            let b = if sign_masked && i == last {
                b & 0x7f
            } else {
                b
            };
            b != 0
        })
    }
}

impl Workload for NonZeroWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let size = self.data_type.size_in_bytes();
        let data = inputs[0].data.as_slice();
        let n: usize = self.dims.iter().product();
        let rank = self.dims.len();
        let out = raw_mut::<i64>(&mut outputs[0])?;
        out.fill(0);
        let mut count = 0usize;
        let mut index = vec![0usize; rank];
        for element in data.chunks_exact(size).take(n) {
            if self.is_non_zero(element) {
                for (d, &i) in index.iter().enumerate() {
                    // Indices are below u32::MAX (the shape's limit): exact in i64.
                    out[(d + 1) * n + count] = i as i64;
                }
                count += 1;
            }
            // The next index in row-major order.
            for d in (0..rank).rev() {
                index[d] += 1;
                if index[d] < self.dims[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        out[0] = count as i64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, LayerDescriptor, TensorInfo};

    use crate::workloads::test_support::{Bytes, try_run_typed};

    /// The output of NonZero on `x` (as the API lays it out); the expected values are
    /// written out by hand in each test.
    fn run(info: TensorInfo, x: Bytes) -> Vec<i64> {
        let rows = info.shape.len() as u32 + 1;
        let n = info.num_elements().unwrap() as u32;
        let out = TensorInfo::new(&[rows, n], DataType::Signed64);
        try_run_typed(&LayerDescriptor::NonZero, &[(info, x)], &out)
            .unwrap()
            .to_vec::<i64>()
    }

    #[test]
    fn indices_in_row_major_order_with_the_count_first() {
        // [[1, 0], [0, 3], [5, 0]]: non-zero at (0,0), (1,1), (2,0).
        let x = Bytes::of(&[1i32, 0, 0, 3, 5, 0]);
        let got = run(TensorInfo::new(&[3, 2], DataType::Signed32), x);
        #[rustfmt::skip]
        let want = [
            3, 0, 0, 0, 0, 0, // the count
            0, 1, 2, 0, 0, 0, // rows
            0, 1, 0, 0, 0, 0, // columns
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn negative_zero_is_zero_and_nan_is_not() {
        let x = Bytes::of(&[-0.0f32, f32::NAN, 0.0, 2.5]);
        let got = run(TensorInfo::new(&[4], DataType::Float32), x);
        assert_eq!(got, [2, 0, 0, 0, 1, 3, 0, 0]);
        // float16 bits: -0, 1.0, +0, the smallest subnormal.
        let h = Bytes::of(&[0x8000u16, 0x3c00, 0x0000, 0x0001]);
        let got = run(TensorInfo::new(&[4], DataType::Float16), h);
        assert_eq!(got, [2, 0, 0, 0, 1, 3, 0, 0]);
    }

    #[test]
    fn bools_and_all_zero() {
        let got = run(
            TensorInfo::new(&[3], DataType::Boolean),
            Bytes::of(&[0u8, 0, 0]),
        );
        assert_eq!(got, [0, 0, 0, 0, 0, 0]);
        let got = run(
            TensorInfo::new(&[1, 3], DataType::Boolean),
            Bytes::of(&[0u8, 1, 1]),
        );
        assert_eq!(got, [2, 0, 0, 0, 0, 0, 1, 2, 0]);
    }
}
