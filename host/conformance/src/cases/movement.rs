//! The cases of the layers that move values: `Slice`, `Pad`, `NonZero`, `ScatterElements`,
//! `ScatterNd`; quantised `Concat`, `Reshape`, `Transpose`.

use backplane_api::{
    DataType, LayerDescriptor, PadDescriptor, PadMode, PadPair, Quantization, SliceDescriptor,
    TensorInfo,
};

use super::{Case, FloatCase, qtensor};

/// `Slice` with steps, one of them backwards.
pub(super) fn slice() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    vec![(
        "layer/Slice/strided_backwards".into(),
        LayerDescriptor::Slice(SliceDescriptor {
            begin: vec![1, 4, 0].into(),
            step: vec![1, -2, 3].into(),
            size: vec![2, 3, 2].into(),
        }),
        vec![t(&[3, 5, 6])],
    )]
}

/// `Pad`: constant, reflect and edge.
pub(super) fn pad() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let mut v: Vec<FloatCase> = Vec::new();
    for (name, mode) in [
        ("constant", PadMode::Constant),
        ("reflect", PadMode::Reflect),
        ("edge", PadMode::Edge),
    ] {
        let d = PadDescriptor {
            padding: vec![
                PadPair {
                    before: 0,
                    after: 0,
                },
                PadPair {
                    before: 2,
                    after: 1,
                },
            ]
            .into(),
            value: 0.5,
            mode,
        };
        v.push((
            format!("layer/Pad/{name}"),
            LayerDescriptor::Pad(d),
            vec![t(&[2, 4])],
        ));
    }
    v
}

/// `Concat` (with differing and with equal parameters), `Reshape` and `Transpose` of quantised
/// tensors: stored values moved.
pub(super) fn quantized() -> Vec<Case> {
    let u8q = DataType::QAsymmU8;
    let s8q = DataType::QAsymmS8;
    let per_tensor = Quantization::per_tensor;
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
    push(
        "Concat/q_differing_parameters",
        LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 }),
        vec![
            qtensor(&[1, 2, 3], u8q, 0.02, 128),
            qtensor(&[1, 3, 3], u8q, 0.05, 100),
        ],
        Some(per_tensor(0.03, 110)),
    );
    push(
        "Concat/q_same_parameters",
        LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 }),
        vec![
            qtensor(&[1, 2, 3], s8q, 0.02, -3),
            qtensor(&[1, 3, 3], s8q, 0.02, -3),
        ],
        None,
    );
    push(
        "Reshape/q_u8",
        LayerDescriptor::Reshape(backplane_api::ReshapeDescriptor {
            target_shape: vec![6, 4].into(),
        }),
        vec![qtensor(&[2, 3, 4], u8q, 0.02, 128)],
        None,
    );
    push(
        "Transpose/q_s8",
        LayerDescriptor::Transpose(backplane_api::TransposeDescriptor {
            permutation: vec![2, 0, 1].into(),
        }),
        vec![qtensor(&[2, 3, 4], s8q, 0.02, -3)],
        None,
    );
    v
}

/// `NonZero` (Backend API 1.5) of Boolean and Signed32 data, whose seeded values hold zeros
/// (the `basic` case's Float32 data has none).
pub(super) fn non_zero() -> Vec<FloatCase> {
    vec![
        (
            "layer/NonZero/bool".into(),
            LayerDescriptor::NonZero,
            vec![TensorInfo::new(&[3, 4], DataType::Boolean)],
        ),
        (
            "layer/NonZero/int32_rank3".into(),
            LayerDescriptor::NonZero,
            vec![TensorInfo::new(&[2, 3, 2], DataType::Signed32)],
        ),
    ]
}

/// `ScatterElements` and `ScatterNd` (Backend API 1.5) with reductions, Signed32 indices in
/// `[0, 3)` (the suite's seeded indices; repeated ones meet, combined in order).
pub(super) fn scatter() -> Vec<FloatCase> {
    use backplane_api::{ScatterElementsDescriptor, ScatterReduction as R};
    let f = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let i = |s: &[u32]| TensorInfo::new(s, DataType::Signed32);
    let mut v: Vec<FloatCase> = Vec::new();
    for (name, axis, reduction) in [("add_axis1", 1, R::Add), ("max_axis0", 0, R::Max)] {
        v.push((
            format!("layer/ScatterElements/{name}"),
            LayerDescriptor::ScatterElements(ScatterElementsDescriptor { axis, reduction }),
            vec![f(&[3, 4]), i(&[3, 2]), f(&[3, 2])],
        ));
    }
    for (name, reduction) in [("mul_slices", R::Mul), ("min_elements", R::Min)] {
        let tuple = if reduction == R::Mul { 1 } else { 2 };
        let updates: Vec<u32> = if tuple == 1 {
            vec![4, 4, 2]
        } else {
            vec![4, 2]
        };
        v.push((
            format!("layer/ScatterNd/{name}"),
            LayerDescriptor::ScatterNd(reduction),
            vec![f(&[3, 4, 2]), i(&[4, tuple]), f(&updates)],
        ));
    }
    v
}
