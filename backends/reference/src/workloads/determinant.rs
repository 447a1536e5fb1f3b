//! Determinant (Backend API 1.5; ONNX `Det`): of each `[m, m]` matrix in the last two
//! dimensions, by LU decomposition with partial pivoting (the largest remaining magnitude in
//! the column as pivot), in f64 whatever the tensors' type (Float32 or Float64), rounded once
//! on store. A zero pivot column gives 0; a matrix of size 0 has determinant 1.

use backplane_api::{
    BackendResult, DataType, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, expect_rule_output, invalid_layer};

/// Creates the workload of a `Determinant` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    if !matches!(desc.layer, LayerDescriptor::Determinant) {
        return Err(invalid_layer(desc, "not a Determinant layer"));
    }
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    expect_rule_output(desc)?;
    let shape = &desc.inputs[0].shape;
    Ok(Box::new(DeterminantWorkload {
        m: shape[shape.len() - 1] as usize,
        data_type: desc.inputs[0].data_type,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Computes determinants.
#[derive(Debug)]
pub struct DeterminantWorkload {
    m: usize,
    data_type: DataType,
    shapes: ExpectedShapes,
}

/// The determinant of the `m x m` row-major matrix `a` (overwritten by its factors).
fn determinant(a: &mut [f64], m: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..m {
        let pivot = (col..m)
            .max_by(|&i, &j| a[i * m + col].abs().total_cmp(&a[j * m + col].abs()))
            .unwrap_or(col);
        if a[pivot * m + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for k in 0..m {
                a.swap(pivot * m + k, col * m + k);
            }
            det = -det;
        }
        let p = a[col * m + col];
        det *= p;
        for row in col + 1..m {
            let f = a[row * m + col] / p;
            for k in col..m {
                a[row * m + k] -= f * a[col * m + k];
            }
        }
    }
    det
}

impl Workload for DeterminantWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let m = self.m;
        let mut matrix = vec![0f64; m * m];
        match self.data_type {
            DataType::Float64 => {
                let x = inputs[0].as_slice::<f64>()?;
                let out = outputs[0].as_mut_slice::<f64>()?;
                for (i, o) in out.iter_mut().enumerate() {
                    matrix.copy_from_slice(&x[i * m * m..][..m * m]);
                    *o = determinant(&mut matrix, m);
                }
            }
            _ => {
                let x = inputs[0].as_f32()?;
                let out = outputs[0].as_f32_mut()?;
                for (i, o) in out.iter_mut().enumerate() {
                    for (d, &v) in matrix.iter_mut().zip(&x[i * m * m..][..m * m]) {
                        *d = f64::from(v);
                    }
                    // Rounded once to the output's type.
                    #[allow(clippy::cast_possible_truncation)]
                    // reason: the result is an f32 tensor's value, rounded to nearest
                    {
                        *o = determinant(&mut matrix, m) as f32;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, LayerDescriptor, TensorInfo};

    use crate::workloads::test_support::{Bytes, try_run_typed};

    /// Worked by hand: [[2, 1], [5, 3]] = 1; a 3x3 needing a row swap, [[0, 2, 1], [1, 1, 1],
    /// [2, 0, 3]] = 0*(3-0) - 2*(3-2) + 1*(0-2) = -4; a singular one = 0.
    #[test]
    fn by_hand() {
        let run = |shape: &[u32], x: &[f64]| {
            let out: Vec<u32> = shape[..shape.len() - 2].to_vec();
            try_run_typed(
                &LayerDescriptor::Determinant,
                &[(TensorInfo::new(shape, DataType::Float64), Bytes::of(x))],
                &TensorInfo::new(&out, DataType::Float64),
            )
            .unwrap()
            .to_vec::<f64>()
        };
        let got = run(&[2, 2], &[2.0, 1.0, 5.0, 3.0]);
        assert!((got[0] - 1.0).abs() < 1e-12, "{got:?}");
        let got = run(
            &[2, 3, 3],
            &[
                0.0, 2.0, 1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 3.0, //
                1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 1.0, 0.0, 1.0,
            ],
        );
        assert!((got[0] + 4.0).abs() < 1e-12 && got[1] == 0.0, "{got:?}");
    }
}
