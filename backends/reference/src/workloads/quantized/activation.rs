//! Quantised `Activation`: a 256-entry table built when the workload is created, entry `q`
//! being `quantize(f(dequantize(q)))` with the input's and the output's parameters and
//! CpuRef's Float32 definition of `f` (`ActivationDescriptor::apply_in_place`). This is how
//! onnxruntime runs `QLinearSigmoid` and `QLinearLeakyRelu` (`qlinear_lookup_table.cc`:
//! a table of dequantise, compute in f32, quantise with round half to even).

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{QParams, check_buffers, dequantize};
use crate::workloads::{ExpectedShapes, expect_counts, invalid_layer};

/// A quantised activation as a table look-up.
#[derive(Debug)]
pub struct QActivationWorkload {
    /// The output byte of each input byte.
    table: [u8; 256],
    shapes: ExpectedShapes,
}

/// Creates the workload of a quantised `Activation` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Activation(a) = desc.layer else {
        return Err(invalid_layer(desc, "not an Activation layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let (x, y) = (
        QParams::per_tensor(desc, &desc.inputs[0])?,
        QParams::per_tensor(desc, &desc.outputs[0])?,
    );
    let mut real: Vec<f32> = (0..=255u8)
        .map(|b| dequantize(x.qtype.read(b), x.scale(), x.offset))
        .collect();
    a.apply_in_place(&mut real);
    let mut table = [0u8; 256];
    for (t, &v) in table.iter_mut().zip(&real) {
        *t = y.qtype.write(y.qtype.quantize(v, y.scale(), y.offset));
    }
    Ok(Box::new(QActivationWorkload {
        table,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl Workload for QActivationWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        check_buffers(&self.shapes, inputs, outputs)?;
        for (o, &b) in outputs[0]
            .data
            .as_mut_slice()
            .iter_mut()
            .zip(inputs[0].data.as_slice())
        {
            *o = self.table[usize::from(b)];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{ActivationDescriptor, ActivationFunction as F, DataType, LayerDescriptor};

    use super::super::test_support::{assert_rounded, qt, range, run_bytes, value};

    /// The f64 definitions of the functions.
    fn f(d: &ActivationDescriptor, x: f64) -> f64 {
        let (a, b) = (f64::from(d.a), f64::from(d.b));
        match d.function {
            F::ReLU => x.max(0.0),
            F::BoundedReLU => x.max(b).min(a),
            F::LeakyReLU => {
                if x > 0.0 {
                    x
                } else {
                    a * x
                }
            }
            F::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            F::TanH => a * (b * x).tanh(),
            F::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
            _ => unreachable!("not a tested function"),
        }
    }

    /// Every input byte of u8 and s8, each function, against the f64 definition.
    #[test]
    fn quantized_activations_match_definition_for_every_byte() {
        let functions = [
            (F::ReLU, 0.0, 0.0),
            (F::BoundedReLU, 6.0, 0.0),
            (F::LeakyReLU, 0.1, 0.0),
            (F::Sigmoid, 0.0, 0.0),
            (F::TanH, 1.0, 1.0),
            (F::HardSwish, 0.0, 0.0),
        ];
        for dt in [DataType::QAsymmU8, DataType::QAsymmS8] {
            let (lo, hi) = range(dt);
            for &(function, a, b) in &functions {
                let d = ActivationDescriptor { function, a, b };
                let (xs, xz) = (0.05f32, if dt == DataType::QAsymmU8 { 128 } else { 3 });
                let (ys, yz) = match function {
                    F::Sigmoid => (1.0 / 256.0, lo),
                    F::TanH => (1.0 / 128.0, (lo + hi + 1) / 2),
                    _ => (0.04f32, lo + 20),
                };
                let xb: Vec<u8> = (0..=255u8).collect();
                let got = run_bytes(
                    &LayerDescriptor::Activation(d),
                    &[(qt(&[256], dt, xs, xz), xb.clone())],
                    &qt(&[256], dt, ys, yz),
                )
                .unwrap();
                for (&g, &b) in got.iter().zip(&xb) {
                    let x = f64::from(value(dt, b) - xz) * f64::from(xs);
                    let v = f(&d, x) / f64::from(ys);
                    assert_rounded(value(dt, g), v, yz, (lo, hi), &format!("{function:?} {dt}"));
                }
            }
        }
    }

    /// ReLU with scales 0.5 and 1: `q - offset = 5` is 2.5, which rounds to 2, 7 to 4 (3.5);
    /// values past the range saturate.
    #[test]
    fn quantized_relu_ties_round_to_even_and_saturate() {
        let d = ActivationDescriptor {
            function: F::ReLU,
            a: 0.0,
            b: 0.0,
        };
        let dt = DataType::QAsymmU8;
        let got = run_bytes(
            &LayerDescriptor::Activation(d),
            &[(qt(&[4], dt, 0.5, 10), vec![15, 17, 0, 255])],
            &qt(&[4], dt, 1.0, 200),
        )
        .unwrap();
        assert_eq!(got, vec![202, 204, 200, 255]);
    }
}
