//! The subset of ONNX's protobuf messages (`onnx.proto`, proto2 syntax) that the importer
//! reads, defined with `prost`'s derive. Field numbers are ONNX's; fields that are not
//! declared here are skipped when decoding. Repeated scalars decode whether packed or not.
//!
//! Enumerations (`TensorProto.DataType`, `AttributeProto.AttributeType`) are kept as raw
//! `i32`s; the constants in [`data_type`] and [`attribute_type`] name the values used.

/// ONNX `TensorProto.DataType` values.
pub mod data_type {
    /// Not set.
    pub const UNDEFINED: i32 = 0;
    /// `float` (IEEE 754 binary32).
    pub const FLOAT: i32 = 1;
    /// `uint8_t`.
    pub const UINT8: i32 = 2;
    /// `int8_t`.
    pub const INT8: i32 = 3;
    /// `uint16_t`.
    pub const UINT16: i32 = 4;
    /// `int16_t`.
    pub const INT16: i32 = 5;
    /// `int32_t`.
    pub const INT32: i32 = 6;
    /// `int64_t`.
    pub const INT64: i32 = 7;
    /// A string.
    pub const STRING: i32 = 8;
    /// `bool`.
    pub const BOOL: i32 = 9;
    /// IEEE 754 binary16.
    pub const FLOAT16: i32 = 10;
    /// `double`.
    pub const DOUBLE: i32 = 11;
    /// `uint32_t`.
    pub const UINT32: i32 = 12;
    /// `uint64_t`.
    pub const UINT64: i32 = 13;
    /// bfloat16: the upper half of an IEEE 754 binary32.
    pub const BFLOAT16: i32 = 16;

    /// The ONNX element type of a tensor of `t` (what onnxruntime's and backplane's C API call
    /// a tensor's `dtype`). The quantised types have no ONNX type of their own: they are
    /// their storage type (`UINT8`, `INT8`).
    pub fn of(t: backplane_api::DataType) -> i32 {
        t.onnx_code()
    }

    /// The API's codes agree with `onnx.proto`'s, named here.
    #[test]
    fn codes_match_onnx_proto() {
        use backplane_api::DataType as D;
        let want = [
            (D::Float32, FLOAT),
            (D::Float16, FLOAT16),
            (D::QAsymmU8, UINT8),
            (D::QAsymmS8, INT8),
            (D::QSymmS8, INT8),
            (D::Signed32, INT32),
            (D::Boolean, BOOL),
            (D::Signed64, INT64),
            (D::Float64, DOUBLE),
            (D::UnsignedInt8, UINT8),
            (D::Signed8, INT8),
            (D::Signed16, INT16),
            (D::UnsignedInt16, UINT16),
            (D::UnsignedInt32, UINT32),
            (D::UnsignedInt64, UINT64),
            (D::BFloat16, BFLOAT16),
        ];
        assert_eq!(want.len(), D::ALL.len());
        for (t, code) in want {
            assert_eq!(of(t), code, "{t}");
            if !t.is_quantized() {
                assert_eq!(plain(code), Some(t), "{t}");
            }
        }
        assert_eq!(plain(STRING), None);
    }

    /// The API's plain type for an ONNX element type (`INT64` → `Signed64`, `DOUBLE` →
    /// `Float64`, …), or `None` for a type the API has no tensor of (strings, complex numbers,
    /// the 8-bit and 4-bit floats).
    pub fn plain(code: i32) -> Option<backplane_api::DataType> {
        use backplane_api::DataType as D;
        Some(match code {
            FLOAT => D::Float32,
            DOUBLE => D::Float64,
            FLOAT16 => D::Float16,
            BFLOAT16 => D::BFloat16,
            INT8 => D::Signed8,
            INT16 => D::Signed16,
            INT32 => D::Signed32,
            INT64 => D::Signed64,
            UINT8 => D::UnsignedInt8,
            UINT16 => D::UnsignedInt16,
            UINT32 => D::UnsignedInt32,
            UINT64 => D::UnsignedInt64,
            BOOL => D::Boolean,
            _ => return None,
        })
    }

    /// A name for an element type, for error messages.
    pub fn name(t: i32) -> String {
        let known = match t {
            UNDEFINED => "UNDEFINED",
            FLOAT => "FLOAT",
            UINT8 => "UINT8",
            INT8 => "INT8",
            UINT16 => "UINT16",
            INT16 => "INT16",
            INT32 => "INT32",
            INT64 => "INT64",
            STRING => "STRING",
            BOOL => "BOOL",
            FLOAT16 => "FLOAT16",
            DOUBLE => "DOUBLE",
            UINT32 => "UINT32",
            UINT64 => "UINT64",
            14 => "COMPLEX64",
            15 => "COMPLEX128",
            BFLOAT16 => "BFLOAT16",
            _ => return format!("data type {t}"),
        };
        known.to_owned()
    }
}

/// ONNX `AttributeProto.AttributeType` values.
pub mod attribute_type {
    /// Not set (very old models): the populated field tells the type.
    pub const UNDEFINED: i32 = 0;
    /// `f`.
    pub const FLOAT: i32 = 1;
    /// `i`.
    pub const INT: i32 = 2;
    /// `s`.
    pub const STRING: i32 = 3;
    /// `t`.
    pub const TENSOR: i32 = 4;
    /// `g` (a sub-graph: a branch of `If`).
    pub const GRAPH: i32 = 5;
    /// `floats`.
    pub const FLOATS: i32 = 6;
    /// `ints`.
    pub const INTS: i32 = 7;
    /// `strings`.
    pub const STRINGS: i32 = 8;

    /// A name for an attribute type, for error messages.
    pub fn name(t: i32) -> String {
        let known = match t {
            UNDEFINED => "UNDEFINED",
            FLOAT => "FLOAT",
            INT => "INT",
            STRING => "STRING",
            TENSOR => "TENSOR",
            GRAPH => "GRAPH",
            FLOATS => "FLOATS",
            INTS => "INTS",
            STRINGS => "STRINGS",
            9 => "TENSORS",
            10 => "GRAPHS",
            11 => "SPARSE_TENSOR",
            12 => "SPARSE_TENSORS",
            13 => "TYPE_PROTO",
            14 => "TYPE_PROTOS",
            _ => return format!("attribute type {t}"),
        };
        known.to_owned()
    }
}

/// `ModelProto`: the top-level message of an `.onnx` file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// The IR version the model was written with.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// The operator sets the model uses (`domain` `""` / `"ai.onnx"` is the default one).
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// The graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// The tool that wrote the model.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// That tool's version.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// The model's namespace (reverse DNS, by convention).
    #[prost(string, tag = "4")]
    pub domain: String,
    /// The model's own version.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// Free text about the model.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// Named strings the model carries (onnxruntime's `custom_metadata_map`).
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// `StringStringEntryProto`: one named string of a model's metadata.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    /// The name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `OperatorSetIdProto`: one operator set and its version.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// The domain (`""` or `"ai.onnx"` for the default operator set).
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The operator set version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `GraphProto`: nodes in topological order, constants, inputs and outputs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// The nodes, in topological order.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// The graph's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// The graph's description.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// Constant tensors (weights), by name.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// The graph inputs (which may include initializers).
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// The graph outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Types of intermediate values (informational).
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// `NodeProto`: one operator application.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Input tensor names (`""` for an omitted optional input).
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output tensor names (`""` for an omitted optional output).
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// The node's name (may be empty).
    #[prost(string, tag = "3")]
    pub name: String,
    /// The operator, for example `"Conv"`.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// The operator's domain (`""` or `"ai.onnx"` for the default one).
    #[prost(string, tag = "7")]
    pub domain: String,
    /// The node's attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
}

/// `AttributeProto`: a named attribute value of a node.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// The attribute's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// A float value.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// An integer value.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// A string value (bytes).
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    /// A tensor value.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// A list of floats.
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    /// A list of integers.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    /// A list of strings (bytes; the recurrent operators' `activations`).
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    /// A graph value (the branches of `If`, the body of `Loop` and `Scan`).
    #[prost(message, optional, boxed, tag = "6")]
    pub g: Option<Box<GraphProto>>,
    /// A list of graphs.
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
    /// Which field holds the value (see [`attribute_type`]).
    #[prost(int32, tag = "20")]
    pub r#type: i32,
}

/// `TensorProto`: a constant tensor.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// The dimensions.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// The element type (see [`data_type`]).
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// FLOAT values.
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// INT32, INT16, INT8, UINT16, UINT8, BOOL and FLOAT16 values.
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// INT64 values.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// The tensor's name.
    #[prost(string, tag = "8")]
    pub name: String,
    /// The values as little-endian bytes (instead of a typed field).
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// DOUBLE values.
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// UINT32 and UINT64 values.
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
}

/// `ValueInfoProto`: a named, typed value (graph input or output).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// The value's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

/// `TypeProto`: only the tensor case of the `value` oneof is modelled.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// The tensor type (absent for sequences, maps, ...).
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
}

/// `TypeProto.Tensor`: element type and (optional) shape.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoTensor {
    /// The element type (see [`data_type`]).
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// The shape; absent when even the rank is unknown.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `TensorShapeProto`: a list of dimensions.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// The dimensions, outermost first.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// `TensorShapeProto.Dimension`: a fixed size, a symbolic name, or neither (unknown).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    /// A fixed size.
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    /// A symbolic size (for example `"batch"`).
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
}
