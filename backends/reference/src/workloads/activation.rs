//! Activation: an element-wise function of one tensor, see
//! [`ActivationFunction`](backplane_api::ActivationFunction) for the meaning of the parameters
//! `a` and `b`.
//!
//! The Float32 kernel is [`ActivationDescriptor::apply_in_place`], the API's shared
//! definition; Float64 runs [`apply_f64`], the same definitions in f64. NaN inputs propagate to
//! NaN outputs for every function.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendResult, DataType, LayerDescriptor, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, invalid_layer};

/// Creates the workload of an `Activation` layer (one input, one output of the same shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Activation(d) = desc.layer else {
        return Err(invalid_layer(desc, "not an Activation layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if desc.inputs[0].shape != desc.outputs[0].shape {
        return Err(invalid_layer(
            desc,
            format_args!("activation of {} into {}", desc.inputs[0], desc.outputs[0]),
        ));
    }
    Ok(Box::new(ActivationWorkload {
        desc: *d,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Applies one activation function element by element.
#[derive(Debug)]
pub struct ActivationWorkload {
    desc: ActivationDescriptor,
    shapes: ExpectedShapes,
}

impl Workload for ActivationWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        if inputs[0].info.data_type == DataType::Float64 {
            let src = inputs[0].as_slice::<f64>()?;
            let dst = outputs[0].as_mut_slice::<f64>()?;
            for (y, &x) in dst.iter_mut().zip(src) {
                *y = apply_f64(&self.desc, x);
            }
            return Ok(());
        }
        let src = inputs[0].as_f32()?;
        let dst = outputs[0].as_f32_mut()?;
        dst.copy_from_slice(src);
        self.desc.apply_in_place(dst);
        Ok(())
    }
}

/// Activation `d` of `x` in f64 (Float64 tensors), the definitions of [`ActivationFunction`]
/// written for comparisons that a NaN fails (so a NaN selects no bound and propagates).
fn apply_f64(d: &ActivationDescriptor, x: f64) -> f64 {
    let (a, b) = (f64::from(d.a), f64::from(d.b));
    match d.function {
        ActivationFunction::ReLU => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        ActivationFunction::BoundedReLU => {
            let y = if x < b { b } else { x };
            if y > a { a } else { y }
        }
        ActivationFunction::Sigmoid => {
            // An exponent that is never positive.
            if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                let e = x.exp();
                e / (1.0 + e)
            }
        }
        ActivationFunction::TanH => a * (b * x).tanh(),
        ActivationFunction::LeakyReLU => {
            if x > 0.0 {
                x
            } else {
                a * x
            }
        }
        ActivationFunction::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        ActivationFunction::Elu => {
            if x > 0.0 {
                x
            } else {
                a * x.exp_m1()
            }
        }
        ActivationFunction::Gelu if d.a == 0.0 => {
            0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
        }
        ActivationFunction::Gelu => {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::ActivationFunction;
    use backplane_api::{RSlice, WorkloadFactory};

    use super::*;
    use crate::workload_factory::CpuRefWorkloadFactory;
    use crate::workloads::test_support::{
        Lcg, assert_close, assert_invalid_argument, desc, execute, f32t, try_run,
    };

    /// Runs activation `d` through the factory on `x` of `shape` (the output's shape too).
    fn run(d: ActivationDescriptor, shape: &[u32], x: &[f32]) -> BackendResult<Vec<f32>> {
        try_run(&LayerDescriptor::Activation(d), &[(shape, x)], shape)
    }

    fn act(function: ActivationFunction, a: f32, b: f32) -> ActivationDescriptor {
        ActivationDescriptor { function, a, b }
    }

    /// Relative tolerance of the comparisons with the f64 oracle.
    const REL_TOL: f64 = 1e-6;

    const ALL: [ActivationDescriptor; 14] = [
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
        ActivationDescriptor {
            function: ActivationFunction::Gelu,
            a: 0.0,
            b: 0.0,
        },
        ActivationDescriptor {
            function: ActivationFunction::Gelu,
            a: 1.0,
            b: 0.0,
        },
    ];

    /// Every function on random inputs of several shapes against the f64 oracle.
    #[test]
    fn every_function_matches_oracle() {
        let shapes: [&[u32]; 4] = [&[7], &[2, 3, 4], &[1, 3, 5, 5], &[]];
        for (k, d) in ALL.into_iter().enumerate() {
            for (s, shape) in shapes.iter().enumerate() {
                let n = shape.iter().product::<u32>() as usize;
                let x = Lcg(17 + (k * 10 + s) as u64).vec_in(n, -8.0, 8.0);
                let got = run(d, shape, &x).unwrap();
                let want: Vec<f64> = x.iter().map(|&v| d.reference_f64(v)).collect();
                assert_close(&got, &want, REL_TOL, &format!("{d:?} on {shape:?}"));
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
            let want: Vec<f64> = x.iter().map(|&v| d.reference_f64(v)).collect();
            assert_close(&got, &want, REL_TOL, &format!("{d:?} at extremes"));
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
        // Φ(1) = 0.841344746..., and the tanh form's value at 1.
        let gelu = f(act(ActivationFunction::Gelu, 0.0, 0.0), &[1.0, -1.0, 0.0]);
        assert!((gelu[0] - 0.841_344_7).abs() < 1e-6 && (gelu[1] + 0.158_655_25).abs() < 1e-6);
        assert_eq!(gelu[2], 0.0);
        let tanh_form = f(act(ActivationFunction::Gelu, 1.0, 0.0), &[1.0]);
        assert!((tanh_form[0] - 0.841_192).abs() < 1e-6);
        // NaN propagates.
        for d in ALL {
            assert!(f(d, &[f32::NAN])[0].is_nan(), "{d:?}");
        }
    }

    /// Wrong tensor counts, buffer lengths and shapes are errors, not panics.
    #[test]
    fn bad_tensors_are_errors() {
        let ins = [f32t(&[4])];
        let outs = [f32t(&[4])];
        let layer = LayerDescriptor::Activation(act(ActivationFunction::ReLU, 0.0, 0.0));
        let desc = desc(&layer, &ins, &outs);
        let w = create(&desc).unwrap();
        let x = [1.0f32; 4];
        let mut out = [0f32; 4];
        assert_invalid_argument(execute(&*w, &[], &outs[0], &mut out));
        let short = [(&ins[0], &x[..3])];
        assert_invalid_argument(execute(&*w, &short, &outs[0], &mut out));
        let other = f32t(&[2, 2]);
        let reshaped = [(&other, &x[..])];
        assert_invalid_argument(execute(&*w, &reshaped, &outs[0], &mut out));
        execute(&*w, &[(&ins[0], &x)], &outs[0], &mut out).unwrap();
        assert_eq!(out, [1.0; 4]);
        // A wrong output shape is refused at creation.
        let bad_outs = [f32t(&[5])];
        let bad = WorkloadDesc {
            outputs: RSlice::from_slice(&bad_outs),
            ..desc
        };
        assert!(CpuRefWorkloadFactory.create_workload(&bad).is_err());
    }

    /// Float64 in its own precision: every function agrees with the f32 kernel within f32's
    /// precision, and a value an f32 cannot hold keeps its digits (ReLU of 1 + 1e-12, the
    /// sigmoid of 1e-12 = 0.5 + 2.5e-13).
    #[test]
    fn float64_in_its_own_precision() {
        use crate::workloads::test_support::{Bytes, try_run_typed};
        use backplane_api::{DataType, TensorInfo};
        let xs = [-3.5f64, -1.0, -1e-3, 0.0, 0.25, 1.5, 4.0, f64::NAN];
        for d in ALL {
            let t = TensorInfo::new(&[8], DataType::Float64);
            let got = try_run_typed(
                &LayerDescriptor::Activation(d),
                &[(t.clone(), Bytes::of(&xs))],
                &t,
            )
            .unwrap()
            .to_vec::<f64>();
            let narrow: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
            let want = run(d, &[8], &narrow).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g.is_nan() && w.is_nan())
                        || (g - f64::from(*w)).abs() <= 1e-5 * (1.0 + g.abs()),
                    "{d:?}: {got:?} vs {want:?}"
                );
            }
        }
        let t = TensorInfo::new(&[1], DataType::Float64);
        let one = |f, x: f64| {
            try_run_typed(
                &LayerDescriptor::Activation(act(f, 0.0, 0.0)),
                &[(t.clone(), Bytes::of(&[x]))],
                &t,
            )
            .unwrap()
            .to_vec::<f64>()[0]
        };
        assert_eq!(one(ActivationFunction::ReLU, 1.0 + 1e-12), 1.0 + 1e-12);
        assert!((one(ActivationFunction::Sigmoid, 1e-12) - (0.5 + 2.5e-13)).abs() < 1e-16);
    }
}
