//! The tables from an ONNX operator (its domain and `op_type`) to its converter, as in
//! tract's `onnx/src/ops/`: [`Importer::node`] asks [`converter`] both whether an operator is
//! mapped at all and which function turns its nodes into values. `ai.onnx` has one table,
//! onnxruntime's `com.microsoft` domain (the quantised operators its quantiser writes)
//! another. The converters live in one file per operator family; the entries here only pick
//! the function and its fixed parameters (the binary operation, the activation function, the
//! pooling type).

use backplane_api::{
    ActivationFunction as F, ArgMinMaxFunction, BinaryOperation as B, ComparisonOperation as C,
    PoolingType, ReduceOperation, UnaryOperation,
};

use super::{Importer, NResult, Node, Value, queue::Pending};

/// Turns one node, whose inputs are all defined, into the values of its outputs.
pub(super) type Converter = fn(&mut Importer, &Node<'_>) -> NResult<Vec<Value>>;

/// Turns one node into simpler ONNX nodes, imported in its place ([`super::expand`]).
pub(super) type Expander = fn(&mut Importer, &Node<'_>) -> NResult<Vec<Pending>>;

/// The operators imported as graphs of simpler ones ([`super::expand`]), sorted by name in
/// byte order.
static EXPANSIONS: &[(&str, Expander)] = &[
    ("AffineGrid", Importer::affine_grid),
    ("Attention", Importer::attention),
    ("BlackmanWindow", Importer::window),
    ("CenterCropPad", Importer::center_crop_pad),
    ("Col2Im", Importer::col2im),
    ("Compress", Importer::compress),
    ("DFT", Importer::dft),
    ("DepthToSpace", Importer::depth_space),
    ("Einsum", Importer::einsum),
    ("GRU", Importer::recurrent),
    ("GatherND", Importer::gather_nd),
    ("GridSample", Importer::grid_sample),
    ("GroupNormalization", Importer::group_normalization),
    ("HammingWindow", Importer::window),
    ("HannWindow", Importer::window),
    ("LpPool", Importer::lp_pool),
    ("MaxUnpool", Importer::max_unpool),
    (
        "MeanVarianceNormalization",
        Importer::mean_variance_normalization,
    ),
    ("OneHot", Importer::one_hot),
    ("RNN", Importer::recurrent),
    ("ReverseSequence", Importer::reverse_sequence),
    ("RotaryEmbedding", Importer::rotary_embedding),
    ("STFT", Importer::stft),
    // onnxruntime's, registered in the default domain.
    (
        "SimplifiedLayerNormalization",
        Importer::simplified_layer_norm,
    ),
    ("SpaceToDepth", Importer::depth_space),
    ("TensorScatter", Importer::tensor_scatter),
    ("TfIdfVectorizer", Importer::tfidf_vectorizer),
];

/// onnxruntime's `com.microsoft` operators imported as graphs of simpler ones.
static MICROSOFT_EXPANSIONS: &[(&str, Expander)] = &[
    ("Attention", Importer::ms_attention),
    ("DynamicQuantizeLSTM", Importer::dynamic_quantize_lstm),
    ("EmbedLayerNormalization", Importer::embed_layer_norm),
    ("FusedConv", Importer::fused_conv),
    ("FusedMatMul", Importer::fused_matmul),
    ("MultiHeadAttention", Importer::multi_head_attention),
    ("RotaryEmbedding", Importer::rotary_embedding),
    ("SkipLayerNormalization", Importer::skip_layer_norm),
    (
        "SkipSimplifiedLayerNormalization",
        Importer::skip_layer_norm,
    ),
];

/// Every operator the importer maps (whether an instance is supported can still depend on
/// its attributes and inputs), sorted by name in byte order for [`converter`]'s binary
/// search.
static CONVERTERS: &[(&str, Converter)] = &[
    ("Abs", |im, n| im.unary(n, UnaryOperation::Abs)),
    ("Acos", |im, n| im.unary(n, UnaryOperation::Acos)),
    ("Acosh", |im, n| im.unary(n, UnaryOperation::Acosh)),
    ("Add", |im, n| im.binary(n, B::Add)),
    ("And", |im, n| im.logic(n, super::logic::Logic::And)),
    ("ArgMax", |im, n| im.arg_min_max(n, ArgMinMaxFunction::Max)),
    ("ArgMin", |im, n| im.arg_min_max(n, ArgMinMaxFunction::Min)),
    ("Asin", |im, n| im.unary(n, UnaryOperation::Asin)),
    ("Asinh", |im, n| im.unary(n, UnaryOperation::Asinh)),
    ("Atan", |im, n| im.unary(n, UnaryOperation::Atan)),
    ("Atanh", |im, n| im.unary(n, UnaryOperation::Atanh)),
    ("AveragePool", |im, n| {
        im.pool_1d_or_2d(n, PoolingType::Average)
    }),
    ("BatchNormalization", Importer::batch_norm),
    ("BitCast", Importer::bit_cast),
    ("BitShift", Importer::bit_shift),
    ("BitwiseAnd", |im, n| im.binary(n, B::BitwiseAnd)),
    ("BitwiseNot", Importer::bitwise_not),
    ("BitwiseOr", |im, n| im.binary(n, B::BitwiseOr)),
    ("BitwiseXor", |im, n| im.binary(n, B::BitwiseXor)),
    ("Cast", Importer::cast),
    ("CastLike", Importer::cast_like),
    ("Ceil", |im, n| im.unary(n, UnaryOperation::Ceil)),
    ("Celu", Importer::composite_activation),
    ("Clip", Importer::clip),
    ("Concat", Importer::concat),
    ("Constant", Importer::constant),
    ("ConstantOfShape", Importer::constant_of_shape),
    ("Conv", Importer::conv_1d_or_2d),
    ("ConvInteger", Importer::matmul_integer),
    ("ConvTranspose", Importer::conv_transpose_1d_or_2d),
    ("Cos", |im, n| im.unary(n, UnaryOperation::Cos)),
    ("Cosh", |im, n| im.unary(n, UnaryOperation::Cosh)),
    ("CumProd", Importer::cumulative),
    ("CumSum", Importer::cumulative),
    ("DeformConv", Importer::deform_conv),
    ("DequantizeLinear", Importer::dequantize_linear),
    ("Det", Importer::det),
    ("Div", |im, n| im.binary(n, B::Div)),
    ("Dropout", Importer::dropout),
    ("DynamicQuantizeLinear", Importer::dynamic_quantize_linear),
    ("Elu", Importer::elu),
    ("Equal", |im, n| im.comparison(n, C::Equal)),
    ("Erf", |im, n| im.unary(n, UnaryOperation::Erf)),
    ("Exp", |im, n| im.unary(n, UnaryOperation::Exp)),
    ("Expand", Importer::expand),
    ("EyeLike", Importer::eye_like),
    ("Flatten", Importer::flatten),
    ("Floor", |im, n| im.unary(n, UnaryOperation::Floor)),
    ("Gather", Importer::gather),
    ("GatherElements", Importer::gather_elements),
    ("Gelu", Importer::gelu),
    ("Gemm", Importer::gemm),
    ("GlobalAveragePool", Importer::global_average_pool),
    ("GlobalMaxPool", Importer::global_max_pool),
    ("Greater", |im, n| im.comparison(n, C::Greater)),
    ("GreaterOrEqual", |im, n| {
        im.comparison(n, C::GreaterOrEqual)
    }),
    ("HardSigmoid", Importer::hard_sigmoid),
    ("HardSwish", |im, n| {
        im.activation(n, F::HardSwish, 0.0, 0.0)
    }),
    ("Hardmax", Importer::hardmax),
    ("Identity", Importer::identity),
    // Imported by [`Importer::control`] (its branch inlined), never through this entry.
    ("If", |_, _| {
        Err(super::unsupported("If is a control operator"))
    }),
    ("InstanceNormalization", Importer::instance_norm),
    ("IsInf", Importer::composite_activation),
    ("IsNaN", Importer::composite_activation),
    ("LRN", Importer::lrn),
    ("LSTM", Importer::lstm),
    ("LayerNormalization", Importer::layer_norm),
    ("LeakyRelu", Importer::leaky_relu),
    ("Less", |im, n| im.comparison(n, C::Less)),
    ("LessOrEqual", |im, n| im.comparison(n, C::LessOrEqual)),
    ("Log", |im, n| im.unary(n, UnaryOperation::Log)),
    ("LogSoftmax", Importer::log_softmax),
    // Imported by [`Importer::control`] (unrolled), never through this entry.
    ("Loop", |_, _| {
        Err(super::unsupported("Loop is a control operator"))
    }),
    ("LpNormalization", Importer::lp_normalization),
    ("MatMul", Importer::matmul),
    ("MatMulInteger", Importer::matmul_integer),
    ("Max", |im, n| Ok(vec![im.fold(n, B::Maximum)?])),
    ("MaxPool", |im, n| im.pool_1d_or_2d(n, PoolingType::Max)),
    ("Mean", Importer::mean),
    ("MelWeightMatrix", Importer::mel_weight_matrix),
    ("Min", |im, n| Ok(vec![im.fold(n, B::Minimum)?])),
    ("Mish", Importer::composite_activation),
    ("Mod", Importer::modulo),
    ("Mul", |im, n| im.binary(n, B::Mul)),
    ("Neg", |im, n| im.unary(n, UnaryOperation::Neg)),
    ("NegativeLogLikelihoodLoss", Importer::nll_loss),
    // Imported by [`Importer::control`] (a layer, then its count read), never through these
    // entries.
    ("NonMaxSuppression", |_, _| {
        Err(super::unsupported("NonMaxSuppression is imported in steps"))
    }),
    ("NonZero", |_, _| {
        Err(super::unsupported("NonZero is imported in steps"))
    }),
    ("Not", Importer::not),
    ("Optional", Importer::optional),
    ("OptionalGetElement", Importer::optional),
    ("OptionalHasElement", Importer::optional),
    ("Or", |im, n| im.logic(n, super::logic::Logic::Or)),
    ("PRelu", Importer::composite_activation),
    ("Pad", Importer::pad),
    ("Pow", |im, n| im.binary(n, B::Power)),
    ("QLinearConv", Importer::qlinear_conv),
    ("QLinearMatMul", Importer::qlinear_matmul),
    ("QuantizeLinear", Importer::quantize_linear),
    ("RMSNormalization", Importer::rms_normalization),
    ("Range", Importer::range),
    ("Reciprocal", |im, n| {
        im.unary(n, UnaryOperation::Reciprocal)
    }),
    ("ReduceL1", Importer::reduce_composite),
    ("ReduceL2", Importer::reduce_composite),
    ("ReduceLogSum", Importer::reduce_composite),
    ("ReduceLogSumExp", Importer::reduce_composite),
    ("ReduceMax", |im, n| im.reduce(n, ReduceOperation::Max)),
    ("ReduceMean", Importer::reduce_mean),
    ("ReduceMin", |im, n| im.reduce(n, ReduceOperation::Min)),
    ("ReduceProd", |im, n| im.reduce(n, ReduceOperation::Prod)),
    ("ReduceSum", |im, n| im.reduce(n, ReduceOperation::Sum)),
    ("ReduceSumSquare", Importer::reduce_composite),
    ("Relu", |im, n| im.activation(n, F::ReLU, 0.0, 0.0)),
    ("Reshape", Importer::reshape),
    ("Resize", Importer::resize),
    ("RoiAlign", Importer::roi_align),
    ("Round", |im, n| im.unary(n, UnaryOperation::Round)),
    // Imported by [`Importer::control`] (unrolled), never through this entry.
    ("Scan", |_, _| {
        Err(super::unsupported("Scan is a control operator"))
    }),
    ("Scatter", Importer::scatter),
    ("ScatterElements", Importer::scatter),
    ("ScatterND", Importer::scatter),
    ("Selu", Importer::composite_activation),
    ("Shape", Importer::shape_op),
    ("Shrink", Importer::composite_activation),
    ("Sigmoid", |im, n| im.activation(n, F::Sigmoid, 0.0, 0.0)),
    ("Sign", Importer::composite_activation),
    ("Sin", |im, n| im.unary(n, UnaryOperation::Sin)),
    ("Sinh", |im, n| im.unary(n, UnaryOperation::Sinh)),
    ("Size", Importer::size_op),
    ("Slice", Importer::slice),
    ("Softmax", Importer::softmax),
    ("SoftmaxCrossEntropyLoss", Importer::softmax_cross_entropy),
    ("Softplus", Importer::composite_activation),
    ("Softsign", Importer::composite_activation),
    ("Split", Importer::split),
    ("Sqrt", |im, n| im.unary(n, UnaryOperation::Sqrt)),
    ("Squeeze", Importer::squeeze),
    ("Sub", |im, n| im.binary(n, B::Sub)),
    ("Sum", |im, n| Ok(vec![im.fold(n, B::Add)?])),
    ("Swish", Importer::composite_activation),
    ("Tan", |im, n| im.unary(n, UnaryOperation::Tan)),
    ("Tanh", |im, n| im.activation(n, F::TanH, 1.0, 1.0)),
    ("ThresholdedRelu", Importer::composite_activation),
    ("Tile", Importer::tile),
    ("TopK", Importer::top_k),
    ("Transpose", Importer::transpose),
    ("Trilu", Importer::trilu),
    // Imported by [`Importer::control`] (a layer, then its count read), never through this
    // entry.
    ("Unique", |_, _| {
        Err(super::unsupported("Unique is imported in steps"))
    }),
    ("Unsqueeze", Importer::unsqueeze),
    ("Upsample", Importer::upsample),
    ("Where", Importer::where_op),
    ("Xor", |im, n| im.logic(n, super::logic::Logic::Xor)),
];

/// onnxruntime's `com.microsoft` operators the importer maps, sorted as [`CONVERTERS`] is.
static MICROSOFT: &[(&str, Converter)] = &[
    ("BiasGelu", Importer::ms_gelu),
    ("FastGelu", Importer::ms_gelu),
    ("Gelu", Importer::ms_gelu),
    ("QGemm", Importer::qgemm),
    ("QLinearAdd", |im, n| im.qlinear_binary(n, "Add")),
    ("QLinearAveragePool", |im, n| {
        im.qlinear_unary(n, "AveragePool")
    }),
    ("QLinearConcat", Importer::qlinear_concat),
    ("QLinearGlobalAveragePool", |im, n| {
        im.qlinear_unary(n, "GlobalAveragePool")
    }),
    ("QLinearLeakyRelu", |im, n| im.qlinear_unary(n, "LeakyRelu")),
    ("QLinearMul", |im, n| im.qlinear_binary(n, "Mul")),
    ("QLinearSigmoid", |im, n| im.qlinear_unary(n, "Sigmoid")),
    ("QLinearSoftmax", |im, n| im.qlinear_unary(n, "Softmax")),
    ("QuickGelu", Importer::ms_gelu),
];

/// Whether `op_type` of `domain` is a control operator ([`Importer::control`]).
pub(super) fn is_control(domain: &str, op_type: &str) -> bool {
    matches!(domain, "" | "ai.onnx")
        && matches!(
            op_type,
            "If" | "Loop" | "Scan" | "NonZero" | "NonMaxSuppression" | "Unique"
        )
}

/// The expander of `op_type` of `domain`, when it is imported as simpler nodes.
pub(super) fn expander(domain: &str, op_type: &str) -> Option<Expander> {
    let table = match domain {
        "" | "ai.onnx" => EXPANSIONS,
        "com.microsoft" => MICROSOFT_EXPANSIONS,
        _ => return None,
    };
    table
        .binary_search_by(|(name, _)| (*name).cmp(op_type))
        .ok()
        .map(|i| table[i].1)
}

/// Whether a node's form (not only its operator) is imported as simpler nodes.
type FormTest = fn(&Importer, &Node<'_>) -> bool;

/// Operators some of whose forms are expanded ([`super::expand`]): 3-D convolution and
/// pooling (a 5-D input) into 2-D ones, `Resize` in the forms its layer lacks, training-mode
/// `BatchNormalization`, `Pad` in `wrap` mode. Their other
/// forms are converted as [`CONVERTERS`] says. Sorted by name.
static FORM_EXPANSIONS: &[(&str, FormTest, Expander)] = &[
    ("AveragePool", super::expand::is_volume, Importer::pool_3d),
    (
        "BatchNormalization",
        super::expand::is_training_batch_norm,
        Importer::batch_norm_training,
    ),
    ("Conv", super::expand::is_volume, Importer::conv_3d),
    (
        "ConvInteger",
        super::expand::is_integer_form_alone,
        Importer::integer_form_alone,
    ),
    (
        "ConvTranspose",
        super::expand::is_volume,
        Importer::conv_transpose_3d,
    ),
    (
        "DequantizeLinear",
        super::expand::is_float_quantization,
        Importer::quantization_in_floats,
    ),
    (
        "DynamicQuantizeLinear",
        super::expand::is_integer_form_alone,
        Importer::integer_form_alone,
    ),
    (
        "LSTM",
        super::recurrent::is_unrolled_lstm,
        Importer::recurrent,
    ),
    ("LpPool", super::expand::is_volume, Importer::pool_3d),
    (
        "MatMulInteger",
        super::expand::is_integer_form_alone,
        Importer::integer_form_alone,
    ),
    ("MaxPool", is_volume_or_small_integers, max_pool_form),
    ("Pad", super::expand::is_wrap_pad, Importer::pad_wrap),
    (
        "QuantizeLinear",
        super::expand::is_float_quantization,
        Importer::quantization_in_floats,
    ),
    (
        "Resize",
        super::expand::needs_general_resize,
        Importer::resize_general,
    ),
];

/// A 3-D `MaxPool`, or one of 8- or 16-bit integers.
fn is_volume_or_small_integers(im: &Importer, n: &Node<'_>) -> bool {
    super::expand::is_volume(im, n)
        || super::expand::is_small_integer_pool(im, n)
        || super::expand::has_pool_indices(n)
}

/// The expansion of [`is_volume_or_small_integers`]'s `MaxPool` (one whose `Indices` are used
/// finds them tap by tap; an integer one is widened to Float32 first, which a 3-D one then
/// pools as 2-D layers).
fn max_pool_form(im: &mut Importer, n: &Node<'_>) -> NResult<Vec<Pending>> {
    if super::expand::has_pool_indices(n) && !super::expand::is_volume(im, n) {
        im.max_pool_with_indices(n)
    } else if super::expand::is_small_integer_pool(im, n) {
        im.pool_small_integers(n)
    } else {
        im.pool_3d(n)
    }
}

/// The expander of node `n` when it is imported as simpler nodes: its form's, else its
/// operator's.
pub(super) fn expander_of(im: &Importer, domain: &str, n: &Node<'_>) -> Option<Expander> {
    if matches!(domain, "" | "ai.onnx")
        && let Ok(i) = FORM_EXPANSIONS.binary_search_by(|(name, _, _)| (*name).cmp(n.op()))
        && (FORM_EXPANSIONS[i].1)(im, n)
    {
        return Some(FORM_EXPANSIONS[i].2);
    }
    expander(domain, n.op())
}

/// Whether the importer maps `op_type` of `domain` at all (a converter, an expansion or a
/// control operator).
pub(super) fn is_known(domain: &str, op_type: &str) -> bool {
    converter(domain, op_type).is_some() || expander(domain, op_type).is_some()
}

/// The domains the importer reads: `""` and `"ai.onnx"` (the same), and `"com.microsoft"`.
pub(super) fn known_domain(domain: &str) -> bool {
    matches!(domain, "" | "ai.onnx" | "com.microsoft")
}

/// The converter of the ONNX operator `op_type` of `domain` (`None` when the importer does
/// not map it).
pub(super) fn converter(domain: &str, op_type: &str) -> Option<Converter> {
    let table = match domain {
        "" | "ai.onnx" => CONVERTERS,
        "com.microsoft" => MICROSOFT,
        _ => return None,
    };
    table
        .binary_search_by(|(name, _)| (*name).cmp(op_type))
        .ok()
        .map(|i| table[i].1)
}

/// Whether a converter runs on quantised data itself (`QuantizeLinear`, `DequantizeLinear`,
/// the QOperator operators), rather than on float values ([`Importer::convert_float_node`]).
pub(super) fn is_quantized_operator(domain: &str, op_type: &str) -> bool {
    (domain == "com.microsoft" && op_type.starts_with('Q') && op_type != "QuickGelu")
        || matches!(
            op_type,
            "QuantizeLinear"
                | "DequantizeLinear"
                | "QLinearConv"
                | "QLinearMatMul"
                | "DynamicQuantizeLinear"
                | "MatMulInteger"
                | "ConvInteger"
        )
}

#[cfg(test)]
mod tests {
    use super::{CONVERTERS, converter};

    #[test]
    fn table_is_sorted_without_duplicates() {
        let expansions = super::EXPANSIONS
            .windows(2)
            .chain(super::MICROSOFT_EXPANSIONS.windows(2))
            .map(|p| (p[0].0, p[1].0));
        for (a, b) in expansions {
            assert!(
                a < b,
                "{b:?} must come before {a:?} (sorted, each operator once)"
            );
        }
        for (name, _) in super::EXPANSIONS {
            assert!(
                converter("", name).is_none(),
                "{name} is a converter and an expansion"
            );
        }
        for pair in CONVERTERS.windows(2).chain(super::MICROSOFT.windows(2)) {
            assert!(
                pair[0].0 < pair[1].0,
                "{:?} must come before {:?} (sorted, each operator once)",
                pair[1].0,
                pair[0].0
            );
        }
    }

    #[test]
    fn every_entry_is_found_and_nothing_else() {
        for (name, _) in CONVERTERS {
            assert!(converter("", name).is_some(), "{name} is not found");
            assert!(converter("ai.onnx", name).is_some(), "{name} is not found");
            // onnxruntime's domain has its own Gelu; no other name is in both.
            let also_microsoft = super::MICROSOFT.iter().any(|(m, _)| m == name);
            assert_eq!(
                converter("com.microsoft", name).is_some(),
                also_microsoft,
                "{name}"
            );
        }
        for (name, _) in super::MICROSOFT {
            assert!(
                converter("com.microsoft", name).is_some(),
                "{name} is not found"
            );
            let also_onnx = CONVERTERS.iter().any(|(m, _)| m == name);
            assert_eq!(converter("", name).is_some(), also_onnx, "{name}");
        }
        for name in ["", "conv", "Conv2d", "GRU", "Zzz"] {
            assert!(converter("", name).is_none(), "{name:?} is found");
        }
        assert!(converter("com.example", "Conv").is_none());
    }
}
