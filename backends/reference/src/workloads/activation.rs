//! Activation: an element-wise function of one tensor, see [`ActivationFunction`] for the
//! meaning of the parameters `a` and `b`.
//!
//! NaN inputs propagate to NaN outputs for every function (the comparisons are written so that
//! a NaN never selects a bound).

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendError, BackendResult, LayerDescriptor,
    TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::expect_counts;

/// Creates the workload of an `Activation` layer (one input, one output of the same shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Activation(d) = desc.layer else {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: not an Activation layer",
            desc.name
        )));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if desc.inputs[0].shape != desc.outputs[0].shape {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: activation of {} into {}",
            desc.name, desc.inputs[0], desc.outputs[0]
        )));
    }
    Ok(Box::new(ActivationWorkload {
        desc: *d,
        shape: desc.inputs[0].shape.to_vec(),
    }))
}

/// Applies one activation function element by element.
#[derive(Debug)]
pub struct ActivationWorkload {
    desc: ActivationDescriptor,
    shape: Vec<u32>,
}

/// `1 / (1 + e^-x)`, without overflow for large `|x|`: `e^-|x|` is at most 1.
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Writes `f(x)` for every element; one monomorphised loop per function.
fn map(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = f(x);
    }
}

impl Workload for ActivationWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 1, 1)?;
        if inputs[0].info.shape.as_slice() != self.shape.as_slice()
            || outputs[0].info.shape.as_slice() != self.shape.as_slice()
        {
            return Err(BackendError::invalid_argument(format!(
                "activation of {} into {}, the workload was created for {:?}",
                inputs[0].info, outputs[0].info, self.shape
            )));
        }
        let src = inputs[0].as_f32()?;
        let dst = outputs[0].as_f32_mut()?;
        let (a, b) = (self.desc.a, self.desc.b);
        match self.desc.function {
            ActivationFunction::ReLU => map(src, dst, |x| if x < 0.0 { 0.0 } else { x }),
            ActivationFunction::BoundedReLU => map(src, dst, |x| {
                // min(a, max(b, x))
                let y = if x < b { b } else { x };
                if y > a { a } else { y }
            }),
            ActivationFunction::Sigmoid => map(src, dst, sigmoid),
            ActivationFunction::TanH => map(src, dst, |x| a * (b * x).tanh()),
            ActivationFunction::LeakyReLU => map(src, dst, |x| if x > 0.0 { x } else { a * x }),
            // `clamp` propagates NaN.
            ActivationFunction::HardSwish => map(src, dst, |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0),
            ActivationFunction::Elu => map(src, dst, |x| if x > 0.0 { x } else { a * x.exp_m1() }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        DataType, ErrorCode, ROption, RSlice, RStr, TensorInfo, WorkloadFactory, bytemuck,
    };

    use super::*;
    use crate::workload_factory::CpuRefWorkloadFactory;

    /// A deterministic pseudo-random sequence in `[lo, hi)`.
    fn lcg(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let u = (s >> 40) as f32 / (1u64 << 24) as f32;
                lo + (hi - lo) * u
            })
            .collect()
    }

    /// Builds the layer's workload through the factory (layer support included) and runs it
    /// on `x`; the output starts as NaN so an unwritten element fails every comparison.
    fn run(d: ActivationDescriptor, shape: &[u32], x: &[f32]) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Activation(d);
        let ins = [TensorInfo::new(shape, DataType::Float32)];
        let outs = [TensorInfo::new(shape, DataType::Float32)];
        let constants = [ROption::RNone];
        let desc = WorkloadDesc {
            name: RStr::from("act"),
            layer: &layer,
            inputs: RSlice::from_slice(&ins),
            outputs: RSlice::from_slice(&outs),
            constants: RSlice::from_slice(&constants),
        };
        let w = CpuRefWorkloadFactory.create_workload(&desc)?;
        let mut out = vec![f32::NAN; x.len()];
        let views = [TensorView::new(&ins[0], bytemuck::cast_slice(x))];
        let mut out_views = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        w.execute(&views, &mut out_views)?;
        Ok(out)
    }

    fn act(function: ActivationFunction, a: f32, b: f32) -> ActivationDescriptor {
        ActivationDescriptor { function, a, b }
    }

    /// The definitions of `layers.rs` / ONNX, in f64.
    fn oracle(d: ActivationDescriptor, x: f32) -> f64 {
        let (x, a, b) = (f64::from(x), f64::from(d.a), f64::from(d.b));
        match d.function {
            ActivationFunction::ReLU => x.max(0.0),
            ActivationFunction::BoundedReLU => a.min(b.max(x)),
            ActivationFunction::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            ActivationFunction::TanH => a * (b * x).tanh(),
            ActivationFunction::LeakyReLU => {
                if x > 0.0 {
                    x
                } else {
                    a * x
                }
            }
            // ONNX HardSwish: x * max(0, min(1, x / 6 + 1 / 2)).
            ActivationFunction::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            ActivationFunction::Elu => {
                if x > 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
        }
    }

    fn assert_close(got: &[f32], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let g = f64::from(g);
            assert!(
                (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                "{what}: element {i}: got {g}, want {w}"
            );
        }
    }

    const ALL: [ActivationDescriptor; 12] = [
        ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::BoundedReLU,
            a: 6.0,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::BoundedReLU,
            a: 1.0,
            b: -1.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::Sigmoid,
            a: 0.0,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::TanH,
            a: 1.0,
            b: 1.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::TanH,
            a: 1.7159,
            b: 0.6667,
        },
        ActivationDescriptor {
            function: ActivationFunction::LeakyReLU,
            a: 0.01,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::LeakyReLU,
            a: 0.2,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::HardSwish,
            a: 0.0,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::Elu,
            a: 1.0,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::Elu,
            a: 0.5,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 3.0,
            b: 3.0,
        },
    ];

    /// Every function on random inputs of several shapes against the f64 oracle.
    #[test]
    fn every_function_matches_oracle() {
        let shapes: [&[u32]; 4] = [&[7], &[2, 3, 4], &[1, 3, 5, 5], &[]];
        for (k, d) in ALL.into_iter().enumerate() {
            for (s, shape) in shapes.iter().enumerate() {
                let n = shape.iter().product::<u32>() as usize;
                let x = lcg(17 + (k * 10 + s) as u64, n, -8.0, 8.0);
                let got = run(d, shape, &x).unwrap();
                let want: Vec<f64> = x.iter().map(|&v| oracle(d, v)).collect();
                assert_close(&got, &want, &format!("{d:?} on {shape:?}"));
            }
        }
    }

    /// Sigmoid, TanH and Elu stay finite and exact at the extremes.
    #[test]
    fn large_magnitudes_are_stable() {
        let x = [
            -f32::MAX,
            -1e30,
            -1e4,
            -500.0,
            -104.0,
            -88.8,
            -87.0,
            -20.0,
            0.0,
            20.0,
            87.0,
            88.8,
            104.0,
            500.0,
            1e4,
            1e30,
            f32::MAX,
        ];
        for d in [
            act(ActivationFunction::Sigmoid, 0.0, 0.0),
            act(ActivationFunction::TanH, 1.0, 1.0),
            act(ActivationFunction::TanH, 2.0, 3.0),
            act(ActivationFunction::Elu, 1.0, 0.0),
            act(ActivationFunction::Elu, 0.3, 0.0),
        ] {
            let got = run(d, &[x.len() as u32], &x).unwrap();
            assert!(got.iter().all(|v| !v.is_nan()), "{d:?}: {got:?}");
            let want: Vec<f64> = x.iter().map(|&v| oracle(d, v)).collect();
            assert_close(&got, &want, &format!("{d:?} at extremes"));
        }
        let s = run(
            act(ActivationFunction::Sigmoid, 0.0, 0.0),
            &[4],
            &[-1e4, -100.0, 100.0, 1e4],
        )
        .unwrap();
        assert_eq!(s[0], 0.0);
        assert!(s[1] > 0.0 && s[1] < 1e-40);
        assert_eq!(s[2], 1.0);
        assert_eq!(s[3], 1.0);
    }

    /// Small exact values written by hand.
    #[test]
    fn hand_written_values() {
        let x = [-4.0f32, -3.0, -1.0, 0.0, 1.0, 3.0, 7.0];
        let f = |d, x: &[f32]| run(d, &[x.len() as u32], x).unwrap();
        assert_eq!(
            f(act(ActivationFunction::ReLU, 0.0, 0.0), &x),
            [0.0, 0.0, 0.0, 0.0, 1.0, 3.0, 7.0]
        );
        assert_eq!(
            f(act(ActivationFunction::BoundedReLU, 6.0, 0.0), &x),
            [0.0, 0.0, 0.0, 0.0, 1.0, 3.0, 6.0]
        );
        assert_eq!(
            f(act(ActivationFunction::HardSwish, 0.0, 0.0), &x),
            [-0.0, -0.0, -1.0 / 3.0, 0.0, 4.0 / 6.0, 3.0, 7.0]
        );
        assert_eq!(
            f(act(ActivationFunction::LeakyReLU, 0.5, 0.0), &x),
            [-2.0, -1.5, -0.5, 0.0, 1.0, 3.0, 7.0]
        );
        assert_eq!(f(act(ActivationFunction::Sigmoid, 0.0, 0.0), &[0.0]), [0.5]);
        assert_eq!(
            f(act(ActivationFunction::Elu, 2.0, 0.0), &[0.0, 5.0]),
            [0.0, 5.0]
        );
        // NaN propagates.
        for d in ALL {
            assert!(f(d, &[f32::NAN])[0].is_nan(), "{d:?}");
        }
    }

    /// Wrong tensor counts, buffer lengths and shapes are errors, not panics.
    #[test]
    fn bad_tensors_are_errors() {
        let ins = [TensorInfo::new(&[4], DataType::Float32)];
        let outs = [TensorInfo::new(&[4], DataType::Float32)];
        let layer = LayerDescriptor::Activation(act(ActivationFunction::ReLU, 0.0, 0.0));
        let constants = [ROption::RNone];
        let desc = WorkloadDesc {
            name: RStr::from("act"),
            layer: &layer,
            inputs: RSlice::from_slice(&ins),
            outputs: RSlice::from_slice(&outs),
            constants: RSlice::from_slice(&constants),
        };
        let w = create(&desc).unwrap();
        let x = [1.0f32; 4];
        let mut out = [0f32; 4];
        let views = [TensorView::new(&ins[0], bytemuck::cast_slice(&x))];
        let mut ov = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        assert_eq!(
            w.execute(&[], &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let short = [TensorView::new(&ins[0], bytemuck::cast_slice(&x[..3]))];
        assert_eq!(
            w.execute(&short, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let other = TensorInfo::new(&[2, 2], DataType::Float32);
        let reshaped = [TensorView::new(&other, bytemuck::cast_slice(&x))];
        assert_eq!(
            w.execute(&reshaped, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        w.execute(&views, &mut ov).unwrap();
        assert_eq!(out, [1.0; 4]);
        // A wrong output shape is refused at creation.
        let bad_outs = [TensorInfo::new(&[5], DataType::Float32)];
        let bad = WorkloadDesc {
            outputs: RSlice::from_slice(&bad_outs),
            ..desc
        };
        assert!(CpuRefWorkloadFactory.create_workload(&bad).is_err());
    }
}
