//! What each minor version of the Backend API added, and the one rule that follows from it:
//! nothing a minor added is ever handed to a plugin built against an older minor.
//!
//! A minor appends (DESIGN §3.6): vtable entries after the last one of the previous minor,
//! enum variants after the last variant, new layer kinds and descriptors. It never changes the
//! size, alignment or field order of anything an earlier minor had (each minor has its own
//! frozen-layout test in [`crate::ffi`]). A plugin built against `1.0` was compiled with enums
//! that end where 1.0 ended: a `LayerDescriptor` of a later kind, or a `BinaryOperation` it
//! has no variant for, would be a discriminant its code cannot represent. So the host never
//! passes one: [`gate`] is checked wherever a descriptor crosses to a plugin (the support
//! query, `optimize_subgraph`, workload creation), and a refused layer's reason names both
//! versions (`OldAlpha implements Backend API 1.0; Erf needs 1.1`).
//!
//! [`ADDITIONS`] is the table; everything not in it is 1.0.
//!
//! Tensors are gated too: 1.0's `DataType` already listed the quantised types, but no 1.0 or
//! 1.1 plugin was ever given their meaning (1.2 defines it), so [`gate_tensors`] refuses a
//! quantised tensor for a plugin older than [`Addition::QuantizedTensors`]. Likewise a tensor
//! of a type 1.5 appended, or a `Float16` one, never reaches a plugin older than 1.5
//! ([`Addition::NumericTypes`]): its enum has no such discriminant.

use crate::{
    ActivationFunction, ApiVersion, BinaryOperation, DataType, LayerDescriptor, LayerKind,
    TensorInfo, UnaryOperation,
};

/// Backend API 1.1.
pub const V1_1: ApiVersion = ApiVersion::new(1, 1);

/// Backend API 1.2.
pub const V1_2: ApiVersion = ApiVersion::new(1, 2);

/// Backend API 1.3.
pub const V1_3: ApiVersion = ApiVersion::new(1, 3);

/// Backend API 1.4.
pub const V1_4: ApiVersion = ApiVersion::new(1, 4);

/// Backend API 1.5.
pub const V1_5: ApiVersion = ApiVersion::new(1, 5);

/// One thing a minor version added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addition {
    /// A layer kind (with its descriptor and, for an operation layer, all its operations).
    Layer(LayerKind),
    /// A variant of [`BinaryOperation`].
    BinaryOperation(BinaryOperation),
    /// A variant of [`UnaryOperation`] added after its layer kind (`ElementwiseUnary`, 1.1).
    UnaryOperation(UnaryOperation),
    /// A variant of [`ActivationFunction`].
    ActivationFunction(ActivationFunction),
    /// An entry appended to a vtable.
    Entry(Entry),
    /// Tensors of the quantised types (`QAsymmU8`, `QAsymmS8`, `QSymmS8`) or with
    /// quantisation parameters, with the meaning the layers' documentation gives them.
    QuantizedTensors,
    /// Tensors of the numeric types 1.5 appended to [`DataType`] (`Signed64`, `Float64`, the
    /// plain 8/16/32/64-bit integers, `BFloat16`) and of `Float16`, which 1.5 gave its meaning.
    NumericTypes,
    /// A `Convolution2d` with a Float32 input and quantised weights: dynamically quantised
    /// (the layers doc; `FullyConnected` and `BatchMatMul` had that form from 1.2).
    DynamicConvolution,
}

/// Vtable entries added after 1.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Entry {
    /// `BackendVTable::create_workload_factory_with_options` (backend options per network).
    CreateWorkloadFactoryWithOptions,
    /// `BackendVTable::optimize_subgraph_with_options` (backend options per network).
    OptimizeSubgraphWithOptions,
    /// The device-memory entries of `MemoryManagerVTable` (`allocate_buffer`,
    /// `release_buffer`, `copy_to_device`, `copy_to_host`, `import_host`, `finish`) and
    /// `WorkloadVTable::execute_device` ([`crate::device`]).
    DeviceMemory,
    /// `WorkloadFactoryVTable::prepare_workload` and `restore_workload` (workloads prepared
    /// ahead of time and stored in a compiled network).
    PreparedWorkloads,
}

/// Every addition, by the minor that introduced it, oldest first.
pub const ADDITIONS: &[(ApiVersion, &[Addition])] = &[
    (
        V1_1,
        &[
            Addition::Layer(LayerKind::ElementwiseUnary),
            Addition::Layer(LayerKind::Normalization),
            Addition::Layer(LayerKind::BatchMatMul),
            Addition::Layer(LayerKind::Slice),
            Addition::Layer(LayerKind::Resize),
            Addition::Layer(LayerKind::TransposeConvolution2d),
            Addition::Layer(LayerKind::Gather),
            Addition::Layer(LayerKind::Reduce),
            Addition::Layer(LayerKind::ArgMinMax),
            Addition::Layer(LayerKind::LayerNormalization),
            Addition::Layer(LayerKind::InstanceNormalization),
            Addition::Layer(LayerKind::Cast),
            Addition::Layer(LayerKind::Comparison),
            Addition::Layer(LayerKind::Where),
            Addition::Layer(LayerKind::BroadcastTo),
            Addition::Layer(LayerKind::DilatedPooling2d),
            Addition::BinaryOperation(BinaryOperation::Power),
            Addition::BinaryOperation(BinaryOperation::SquaredDifference),
            Addition::ActivationFunction(ActivationFunction::Gelu),
            Addition::Entry(Entry::CreateWorkloadFactoryWithOptions),
            Addition::Entry(Entry::OptimizeSubgraphWithOptions),
        ],
    ),
    (
        V1_2,
        &[
            Addition::QuantizedTensors,
            Addition::Layer(LayerKind::Quantize),
            Addition::Layer(LayerKind::Dequantize),
            Addition::Layer(LayerKind::Requantize),
        ],
    ),
    (V1_3, &[Addition::Entry(Entry::DeviceMemory)]),
    (V1_4, &[Addition::Entry(Entry::PreparedWorkloads)]),
    (
        V1_5,
        &[
            Addition::NumericTypes,
            Addition::DynamicConvolution,
            Addition::Layer(LayerKind::NonZero),
            Addition::Layer(LayerKind::ScatterElements),
            Addition::Layer(LayerKind::ScatterNd),
            Addition::Layer(LayerKind::NonMaxSuppression),
            Addition::Layer(LayerKind::RoiAlign),
            Addition::Layer(LayerKind::BitCast),
            Addition::Layer(LayerKind::Determinant),
            Addition::Layer(LayerKind::Unique),
            Addition::Layer(LayerKind::DeformableConvolution2d),
            Addition::Layer(LayerKind::Lstm),
            Addition::BinaryOperation(BinaryOperation::BitwiseAnd),
            Addition::BinaryOperation(BinaryOperation::BitwiseOr),
            Addition::BinaryOperation(BinaryOperation::BitwiseXor),
            Addition::BinaryOperation(BinaryOperation::ShiftLeft),
            Addition::BinaryOperation(BinaryOperation::ShiftRight),
            Addition::UnaryOperation(UnaryOperation::Tan),
            Addition::UnaryOperation(UnaryOperation::Asin),
            Addition::UnaryOperation(UnaryOperation::Acos),
            Addition::UnaryOperation(UnaryOperation::Atan),
            Addition::UnaryOperation(UnaryOperation::Sinh),
            Addition::UnaryOperation(UnaryOperation::Cosh),
            Addition::UnaryOperation(UnaryOperation::Asinh),
            Addition::UnaryOperation(UnaryOperation::Acosh),
            Addition::UnaryOperation(UnaryOperation::Atanh),
            Addition::UnaryOperation(UnaryOperation::Round),
        ],
    ),
];

/// The version that introduced `addition` (1.0 for anything not in [`ADDITIONS`]).
pub fn introduced_in(addition: Addition) -> ApiVersion {
    ADDITIONS
        .iter()
        .find(|(_, added)| added.contains(&addition))
        .map_or(ApiVersion::new(1, 0), |(version, _)| *version)
}

/// The newest part of the API a descriptor uses: its version and a name for it (the
/// operation for an operation layer, `Erf`; else the layer kind).
pub fn requirement(layer: &LayerDescriptor) -> (ApiVersion, String) {
    let kind = layer.kind();
    let of_kind = (introduced_in(Addition::Layer(kind)), kind.to_string());
    match layer {
        LayerDescriptor::ElementwiseUnary(op) => {
            let added = introduced_in(Addition::UnaryOperation(*op));
            (added.max(of_kind.0), format!("{op:?}"))
        }
        LayerDescriptor::ElementwiseBinary(op) => {
            let of_op = (
                introduced_in(Addition::BinaryOperation(*op)),
                format!("{op:?}"),
            );
            if of_op.0 > of_kind.0 { of_op } else { of_kind }
        }
        LayerDescriptor::Activation(d) => {
            let of_function = (
                introduced_in(Addition::ActivationFunction(d.function)),
                format!("{:?}", d.function),
            );
            if of_function.0 > of_kind.0 {
                of_function
            } else {
                of_kind
            }
        }
        _ => of_kind,
    }
}

/// `Err` with the refusal when `layer` uses anything newer than `plugin`, the Backend API
/// version backend `backend` was built against.
pub fn gate(plugin: ApiVersion, backend: &str, layer: &LayerDescriptor) -> Result<(), String> {
    let (needed, what) = requirement(layer);
    if needed > plugin {
        Err(format!(
            "{backend} implements Backend API {plugin}; {what} needs {needed}"
        ))
    } else {
        Ok(())
    }
}

/// `Err` with the refusal when one of `tensors` uses a type or parameters newer than
/// `plugin`, the Backend API version backend `backend` was built against: a quantised tensor (a
/// quantised type, or quantisation parameters on any type) before 1.2, a type 1.5 appended (or
/// `Float16`) before 1.5. The first such tensor is named.
pub fn gate_tensors<'a>(
    plugin: ApiVersion,
    backend: &str,
    tensors: impl IntoIterator<Item = &'a TensorInfo>,
) -> Result<(), String> {
    let quantized = introduced_in(Addition::QuantizedTensors);
    let numeric = introduced_in(Addition::NumericTypes);
    if quantized <= plugin && numeric <= plugin {
        return Ok(());
    }
    for t in tensors {
        if quantized > plugin && (t.data_type.is_quantized() || t.quantization.is_some()) {
            return Err(format!(
                "{backend} implements Backend API {plugin}; quantized tensors ({}) need \
                 {quantized}",
                t.data_type
            ));
        }
        if numeric > plugin && t.data_type.is_from_1_5() {
            return Err(format!(
                "{backend} implements Backend API {plugin}; {} tensors need {numeric}",
                t.data_type
            ));
        }
    }
    Ok(())
}

/// `Err` with the refusal when `layer` over `inputs` is a form of its kind newer than `plugin`
/// (the kind itself is [`gate`]'s): a dynamically quantised `Convolution2d` (a Float32 input,
/// quantised weights) before 1.5.
pub fn gate_form(
    plugin: ApiVersion,
    backend: &str,
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
) -> Result<(), String> {
    let dynamic_convolution = matches!(layer, LayerDescriptor::Convolution2d(_))
        && matches!(inputs, [x, w, ..] if x.data_type == DataType::Float32 && w.data_type.is_quantized());
    let needed = introduced_in(Addition::DynamicConvolution);
    if dynamic_convolution && needed > plugin {
        Err(format!(
            "{backend} implements Backend API {plugin}; a dynamically quantized Convolution2d \
             needs {needed}"
        ))
    } else {
        Ok(())
    }
}

/// `true` when a plugin built against `plugin` knows data type `data_type` (it was in its
/// minor's enum and had a meaning there).
pub fn knows_type(plugin: ApiVersion, data_type: DataType) -> bool {
    (!data_type.is_quantized() || introduced_in(Addition::QuantizedTensors) <= plugin)
        && (!data_type.is_from_1_5() || introduced_in(Addition::NumericTypes) <= plugin)
}

/// `true` when a plugin built against `plugin` has vtable entry `entry`.
pub fn has_entry(plugin: ApiVersion, entry: Entry) -> bool {
    introduced_in(Addition::Entry(entry)) <= plugin
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_0: ApiVersion = ApiVersion::new(1, 0);

    /// 1.0 had 19 layer kinds and 6 binary operations: everything after them is in the table,
    /// at a version after 1.0, and nothing in the table is newer than this crate.
    #[test]
    fn everything_after_1_0_is_in_the_table() {
        for kind in LayerKind::ALL {
            let added = introduced_in(Addition::Layer(kind));
            assert_eq!(added > V1_0, kind as u8 >= 19, "{kind}");
        }
        for op in BinaryOperation::ALL {
            let added = introduced_in(Addition::BinaryOperation(op));
            assert_eq!(added > V1_0, op as u8 >= 6, "{op:?}");
        }
        for f in ActivationFunction::ALL {
            let added = introduced_in(Addition::ActivationFunction(f));
            assert_eq!(added > V1_0, f as u8 >= 7, "{f:?}");
        }
        // 1.1 had 12 unary operations, 1.4 had 8 binary ones: the rest came with 1.5.
        for op in UnaryOperation::ALL {
            let added = introduced_in(Addition::UnaryOperation(op));
            assert_eq!(added == V1_5, op as u8 >= 12, "{op:?}");
        }
        for op in BinaryOperation::ALL {
            let added = introduced_in(Addition::BinaryOperation(op));
            assert_eq!(added == V1_5, op as u8 >= 8, "{op:?}");
        }
        for (version, _) in ADDITIONS {
            assert!(*version <= ApiVersion::CURRENT);
        }
    }

    #[test]
    fn quantized_tensors_are_gated() {
        use crate::{DataType, Quantization};
        let float = TensorInfo::new(&[2], DataType::Float32);
        let u8q = TensorInfo::new(&[2], DataType::QAsymmU8)
            .with_quantization(Quantization::per_tensor(0.5, 3));
        let bias = TensorInfo::new(&[2], DataType::Signed32)
            .with_quantization(Quantization::per_tensor(0.25, 0));
        assert_eq!(gate_tensors(V1_0, "OldAlpha", [&float, &float]), Ok(()));
        assert_eq!(
            gate_tensors(V1_1, "NewOptions", [&float, &u8q]),
            Err(
                "NewOptions implements Backend API 1.1; quantized tensors (QAsymmU8) need 1.2"
                    .to_owned()
            )
        );
        assert_eq!(
            gate_tensors(V1_0, "OldAlpha", [&bias]),
            Err(
                "OldAlpha implements Backend API 1.0; quantized tensors (Signed32) need 1.2"
                    .to_owned()
            )
        );
        // Even without parameters, a quantised type means nothing before 1.2.
        let bare = TensorInfo::new(&[2], DataType::QSymmS8);
        assert!(gate_tensors(V1_1, "NewOptions", [&bare]).is_err());
        assert_eq!(gate_tensors(V1_2, "New", [&u8q, &bias, &bare]), Ok(()));
    }

    #[test]
    fn dynamic_convolution_is_gated() {
        use crate::{Convolution2dDescriptor, DataType, Quantization};
        let conv = LayerDescriptor::Convolution2d(Convolution2dDescriptor::default());
        let x = TensorInfo::new(&[1, 2, 4, 4], DataType::Float32);
        let w = TensorInfo::new(&[3, 2, 1, 1], DataType::QAsymmU8)
            .with_quantization(Quantization::per_tensor(0.5, 3));
        let wf = TensorInfo::new(&[3, 2, 1, 1], DataType::Float32);
        assert_eq!(
            gate_form(V1_4, "OldPrepared", &conv, &[x.clone(), w.clone()]),
            Err(
                "OldPrepared implements Backend API 1.4; a dynamically quantized Convolution2d \
                 needs 1.5"
                    .to_owned()
            )
        );
        assert_eq!(
            gate_form(V1_5, "New", &conv, &[x.clone(), w.clone()]),
            Ok(())
        );
        // The float form, and the dynamic products of 1.2, pass.
        assert_eq!(gate_form(V1_0, "OldAlpha", &conv, &[x.clone(), wf]), Ok(()));
        let fc = LayerDescriptor::FullyConnected(crate::FullyConnectedDescriptor::default());
        assert_eq!(gate_form(V1_2, "New", &fc, &[x, w]), Ok(()));
    }

    #[test]
    fn numeric_types_are_gated() {
        use crate::DataType;
        let int64 = TensorInfo::new(&[2], DataType::Signed64);
        let half = TensorInfo::new(&[2], DataType::Float16);
        let float = TensorInfo::new(&[2], DataType::Float32);
        assert_eq!(
            gate_tensors(V1_4, "OldPrepared", [&float, &int64]),
            Err("OldPrepared implements Backend API 1.4; Signed64 tensors need 1.5".to_owned())
        );
        assert_eq!(
            gate_tensors(V1_0, "OldAlpha", [&half]),
            Err("OldAlpha implements Backend API 1.0; Float16 tensors need 1.5".to_owned())
        );
        assert_eq!(gate_tensors(V1_5, "New", [&float, &int64, &half]), Ok(()));
        for dt in DataType::ALL {
            let t = TensorInfo::new(&[1], dt);
            assert_eq!(gate_tensors(V1_5, "New", [&t]), Ok(()), "{dt}");
            // Exactly the 1.0 types that are neither quantised nor Float16 reach a 1.0 plugin.
            let old = DataType::V1_0.contains(&dt) && !dt.is_quantized() && dt != DataType::Float16;
            assert_eq!(gate_tensors(V1_0, "OldAlpha", [&t]).is_ok(), old, "{dt}");
            assert_eq!(knows_type(V1_0, dt), old, "{dt}");
            assert_eq!(
                knows_type(V1_4, dt),
                DataType::V1_0.contains(&dt) && dt != DataType::Float16,
                "{dt}"
            );
            assert!(knows_type(V1_5, dt), "{dt}");
        }
    }

    #[test]
    fn gate_names_both_versions() {
        let erf = LayerDescriptor::ElementwiseUnary(UnaryOperation::Erf);
        assert_eq!(
            gate(V1_0, "OldAlpha", &erf),
            Err("OldAlpha implements Backend API 1.0; Erf needs 1.1".to_owned())
        );
        assert_eq!(gate(V1_1, "New", &erf), Ok(()));
        let tan = LayerDescriptor::ElementwiseUnary(UnaryOperation::Tan);
        assert_eq!(
            gate(V1_4, "OldPrepared", &tan),
            Err("OldPrepared implements Backend API 1.4; Tan needs 1.5".to_owned())
        );
        assert_eq!(gate(V1_5, "New", &tan), Ok(()));
        let and = LayerDescriptor::ElementwiseBinary(BinaryOperation::BitwiseAnd);
        assert_eq!(
            gate(V1_1, "NewOptions", &and),
            Err("NewOptions implements Backend API 1.1; BitwiseAnd needs 1.5".to_owned())
        );
        let pow = LayerDescriptor::ElementwiseBinary(BinaryOperation::Power);
        assert_eq!(
            gate(V1_0, "OldAlpha", &pow),
            Err("OldAlpha implements Backend API 1.0; Power needs 1.1".to_owned())
        );
        let gelu = LayerDescriptor::Activation(crate::ActivationDescriptor {
            function: ActivationFunction::Gelu,
            a: 0.0,
            b: 0.0,
        });
        assert_eq!(
            gate(V1_0, "OldAlpha", &gelu),
            Err("OldAlpha implements Backend API 1.0; Gelu needs 1.1".to_owned())
        );
        let relu = LayerDescriptor::Activation(crate::ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        });
        assert_eq!(gate(V1_0, "OldAlpha", &relu), Ok(()));
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        assert_eq!(gate(V1_0, "OldAlpha", &add), Ok(()));
        assert_eq!(gate(V1_0, "OldAlpha", &LayerDescriptor::MemCopy), Ok(()));
        let quantize = LayerDescriptor::Quantize(crate::DataType::QAsymmU8);
        assert_eq!(
            gate(V1_1, "NewOptions", &quantize),
            Err("NewOptions implements Backend API 1.1; Quantize needs 1.2".to_owned())
        );
        assert_eq!(gate(V1_2, "New", &LayerDescriptor::Dequantize), Ok(()));
        assert!(!has_entry(V1_0, Entry::CreateWorkloadFactoryWithOptions));
        assert!(has_entry(V1_1, Entry::OptimizeSubgraphWithOptions));
        assert!(!has_entry(V1_2, Entry::DeviceMemory));
        assert!(has_entry(V1_3, Entry::DeviceMemory));
        assert!(!has_entry(V1_3, Entry::PreparedWorkloads));
        assert!(has_entry(V1_4, Entry::PreparedWorkloads));
    }
}
