//! The session's unit tests: plans per shape, the cache, shape errors, options.

use super::*;
use crate::{graph::network::NetworkBuilder, runtime::CreationOptions};
use backplane_api::{ActivationDescriptor, ActivationFunction, DataType, LayerDescriptor};

fn relu_network() -> Network {
    let mut b = NetworkBuilder::new();
    let x = b
        .add_input("x", TensorInfo::new(&[1, 4], DataType::Float32))
        .unwrap();
    let relu = ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    };
    let y = b
        .add_layer("relu", LayerDescriptor::Activation(relu), &[x])
        .unwrap();
    b.add_output("y", y).unwrap();
    b.build().unwrap()
}

fn cpu_ref_only() -> Arc<Runtime> {
    Arc::new(Runtime::with_path_list(
        CreationOptions::default(),
        crate::plugins::paths::PathSource::Option,
        "",
    ))
}

#[test]
fn runs_and_unloads_when_dropped() {
    let runtime = cpu_ref_only();
    let session =
        Session::from_network(runtime.clone(), &relu_network(), &SessionOptions::default())
            .unwrap();
    let plan = session.current().unwrap();
    assert_eq!(plan.layers_per_backend().get("CpuRef"), Some(&3));
    let info = TensorInfo::new(&[1, 4], DataType::Float32);
    let data: Vec<u8> = [-1.0f32, 2.0, -3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let out = session
        .run_alloc(&[InputTensor {
            name: "x",
            info: &info,
            data: &data,
        }])
        .unwrap();
    assert_eq!(floats(&out[0].data), [0.0, 2.0, 0.0, 4.0]);
    let id = plan.id();
    drop(plan);
    drop(session);
    assert_eq!(runtime.network_memory(id), None);
}

#[test]
fn a_wrong_shape_runs_nothing() {
    let session =
        Session::from_network(cpu_ref_only(), &relu_network(), &SessionOptions::default()).unwrap();
    let info = TensorInfo::new(&[1, 3], DataType::Float32);
    let err = session
        .run_alloc(&[InputTensor {
            name: "x",
            info: &info,
            data: &[0; 12],
        }])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "input x: dimension 1 is 3, the model requires 4 (declared [1, 4])"
    );
    assert_eq!(session.cache_stats().entries, 1);
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A value info of float32 with these dimensions: a number is fixed, a name symbolic.
fn declared(name: &str, dims: &[&str]) -> onnx::proto::ValueInfoProto {
    use onnx::proto::{Dimension, TensorShapeProto, TypeProto, TypeProtoTensor, data_type};
    onnx::proto::ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: data_type::FLOAT,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| match d.parse::<i64>() {
                            Ok(v) => Dimension {
                                dim_value: Some(v),
                                dim_param: None,
                            },
                            Err(_) => Dimension {
                                dim_value: None,
                                dim_param: Some((*d).to_owned()),
                            },
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

fn node(
    op: &str,
    inputs: &[&str],
    output: &str,
    attribute: Vec<onnx::proto::AttributeProto>,
) -> onnx::proto::NodeProto {
    onnx::proto::NodeProto {
        op_type: op.into(),
        name: output.into(),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: vec![output.into()],
        attribute,
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> onnx::proto::AttributeProto {
    onnx::proto::AttributeProto {
        name: name.into(),
        ints: v.to_vec(),
        r#type: onnx::proto::attribute_type::INTS,
        ..Default::default()
    }
}

fn tensor(name: &str, dims: &[i64], f: &[f32], i: &[i64]) -> onnx::proto::TensorProto {
    onnx::proto::TensorProto {
        dims: dims.to_vec(),
        data_type: if f.is_empty() {
            onnx::proto::data_type::INT64
        } else {
            onnx::proto::data_type::FLOAT
        },
        float_data: f.to_vec(),
        int64_data: i.to_vec(),
        name: name.into(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<onnx::proto::NodeProto>,
    init: Vec<onnx::proto::TensorProto>,
    inputs: Vec<onnx::proto::ValueInfoProto>,
    outputs: Vec<onnx::proto::ValueInfoProto>,
) -> onnx::Model {
    use onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto};
    onnx::Model::new(ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "symbolic".into(),
            initializer: init,
            input: inputs,
            output: outputs,
            ..GraphProto::default()
        }),
        ..ModelProto::default()
    })
    .unwrap()
}

/// `x [N, 2, H, W]` + bias, ReLU, 2×2 max pooling of stride 2, then reshaped to
/// `[N, -1]` through a shape sub-graph (Shape, Gather, Unsqueeze, Concat): a model whose
/// every size, the Reshape's target included, follows the input's.
fn pooled_model() -> onnx::Model {
    let pool = vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])];
    model(
        vec![
            node("Add", &["x", "bias"], "a", vec![]),
            node("Relu", &["a"], "r", vec![]),
            node("MaxPool", &["r"], "p", pool),
            node("Shape", &["p"], "s", vec![]),
            node("Gather", &["s", "zero"], "n", vec![]),
            node("Unsqueeze", &["n", "axes"], "nu", vec![]),
            node("Concat", &["nu", "minus_one"], "target", {
                let mut axis = ints("axis", &[]);
                axis.i = 0;
                axis.r#type = onnx::proto::attribute_type::INT;
                vec![axis]
            }),
            node("Reshape", &["p", "target"], "y", vec![]),
        ],
        vec![
            tensor("bias", &[2, 1, 1], &[0.5, -1.0], &[]),
            tensor("zero", &[], &[], &[0]),
            tensor("axes", &[1], &[], &[0]),
            tensor("minus_one", &[1], &[], &[-1]),
        ],
        vec![declared("x", &["N", "2", "H", "W"])],
        vec![declared("y", &["N", "F"])],
    )
}

/// The oracle of [`pooled_model`], written out.
fn pooled(x: &[f32], [n, h, w]: [usize; 3]) -> Vec<f32> {
    let bias = [0.5f32, -1.0];
    let mut out = Vec::new();
    for b in 0..n {
        for c in 0..2 {
            for i in 0..h / 2 {
                for j in 0..w / 2 {
                    let mut m = f32::MIN;
                    for (di, dj) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        let v = x[((b * 2 + c) * h + 2 * i + di) * w + 2 * j + dj];
                        m = m.max((v + bias[c]).max(0.0));
                    }
                    out.push(m);
                }
            }
        }
    }
    out
}

fn run_pooled(session: &Session, n: u32, h: u32, w: u32) -> Result<OwnedTensor, SessionError> {
    let info = TensorInfo::new(&[n, 2, h, w], DataType::Float32);
    let x: Vec<f32> = (0..n * 2 * h * w)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = session.run_alloc(&[InputTensor {
        name: "x",
        info: &info,
        data: &data,
    }])?;
    assert_eq!(
        floats(&out[0].data),
        pooled(&x, [n as usize, h as usize, w as usize]),
        "shape {n}x2x{h}x{w}"
    );
    Ok(out.remove(0))
}

/// One session runs any shape that fits, each through its own plan, with the
/// initializers' constant shared by every plan.
#[test]
fn runs_any_fitting_shape_with_shared_constants() {
    let session =
        Session::from_model(cpu_ref_only(), pooled_model(), &SessionOptions::default()).unwrap();
    assert_eq!(session.inputs()[0].dims_text(), "[N, 2, H, W]");
    // H and W are symbolic: nothing could be planned at load.
    assert!(session.current().is_none());
    assert_eq!(
        session.current_or_shapes_needed().unwrap_err().to_string(),
        "input x is declared [N, 2, H, W] and its shape was not given: give it with \
         --shape x=D1,D2,... or --input x=FILE.npy (the library's \
         ImportOptions::input_shapes, Python's shapes=)"
    );
    for (n, h, w, features) in [(1, 4, 6, 12), (3, 2, 2, 2), (2, 8, 4, 16), (1, 4, 6, 12)] {
        let y = run_pooled(&session, n, h, w).unwrap();
        assert_eq!(y.info.shape.as_slice(), [n, features]);
    }
    let stats = session.cache_stats();
    assert_eq!(stats.entries, 3);
    assert_eq!(
        stats.shapes[0],
        [("x".to_owned(), vec![1, 2, 4, 6])],
        "the latest run's plan comes first"
    );
    // The bias's Constant descriptor is one allocation, held by every plan.
    let plans: Vec<Arc<Plan>> = [[1, 2, 4, 6], [3, 2, 2, 2]]
        .iter()
        .map(|s| session.plan(&[("x", s)]).unwrap())
        .collect();
    let bias = |p: &Plan| {
        p.optimized()
            .network()
            .layers()
            .iter()
            .find(|l| l.name == "bias")
            .map(|l| Arc::clone(&l.descriptor))
            .unwrap()
    };
    assert!(Arc::ptr_eq(&bias(&plans[0]), &bias(&plans[1])));
}

/// The cache keeps at most its entries; the plans it drops are unloaded.
#[test]
fn the_cache_drops_the_least_recently_used_plan() {
    let runtime = cpu_ref_only();
    let mut options = SessionOptions::default();
    options.set_cache_limits(2, u64::MAX);
    let session = Session::from_model(runtime.clone(), pooled_model(), &options).unwrap();
    let mut ids = Vec::new();
    for w in [2, 4, 6, 8, 10] {
        run_pooled(&session, 1, 2, w).unwrap();
        ids.push(session.current().unwrap().id());
    }
    assert_eq!(session.cache_stats().entries, 2);
    let loaded: Vec<bool> = ids
        .iter()
        .map(|&id| runtime.network_memory(id).is_some())
        .collect();
    assert_eq!(loaded, [false, false, false, true, true]);
    // A byte limit below one plan keeps only the latest.
    let mut options = SessionOptions::default();
    options.set_cache_limits(8, 1);
    let session = Session::from_model(runtime, pooled_model(), &options).unwrap();
    for w in [2, 4, 6] {
        run_pooled(&session, 1, 2, w).unwrap();
    }
    assert_eq!(session.cache_stats().entries, 1);
}

/// Shapes that do not fit are refused by name and dimension, nothing is loaded for them,
/// and the session goes on.
#[test]
fn shapes_that_do_not_fit_are_named() {
    let session =
        Session::from_model(cpu_ref_only(), pooled_model(), &SessionOptions::default()).unwrap();
    let err = |shape: &[u32]| session.plan(&[("x", shape)]).unwrap_err().to_string();
    assert_eq!(
        err(&[1, 2, 4]),
        "input x: got rank 3 ([1, 2, 4]), the model requires rank 4: [N, 2, H, W]"
    );
    assert_eq!(
        err(&[1, 3, 4, 4]),
        "input x: dimension 1 is 3, the model requires 2 (declared [N, 2, H, W])"
    );
    // A size that makes a layer invalid: the pooling window is larger than the input.
    let e = err(&[1, 2, 1, 4]);
    assert!(
        e.starts_with("at input shapes x=[1, 2, 1, 4]: ") && e.contains('p'),
        "{e}"
    );
    assert_eq!(
        session.plan(&[("y", &[1])]).unwrap_err().to_string(),
        "no network input named \"y\" (the network has [\"x\"])"
    );
    assert_eq!(
        session.plan(&[]).unwrap_err().to_string(),
        "network input x is not bound"
    );
    assert_eq!(session.cache_stats().entries, 0);
    run_pooled(&session, 1, 2, 2).unwrap();
    assert_eq!(session.cache_stats().entries, 1);
}

/// One symbolic name is one size across inputs; `input_shapes` fixes shapes at load.
#[test]
fn a_symbolic_name_has_one_size_and_given_shapes_load_now() {
    let two_inputs = || {
        model(
            vec![node("Add", &["a", "b"], "y", vec![])],
            vec![],
            vec![declared("a", &["N", "3"]), declared("b", &["N", "3"])],
            vec![declared("y", &["N", "3"])],
        )
    };
    let session =
        Session::from_model(cpu_ref_only(), two_inputs(), &SessionOptions::default()).unwrap();
    // Only the batch is symbolic: a plan for N = 1 is made at load.
    assert_eq!(
        session.cache_stats().shapes,
        [vec![
            ("a".to_owned(), vec![1, 3]),
            ("b".to_owned(), vec![1, 3])
        ]]
    );
    assert_eq!(
        session
            .plan(&[("a", &[2, 3]), ("b", &[4, 3])])
            .unwrap_err()
            .to_string(),
        "input b: dimension 0 (N) is 4, but input a has N = 2"
    );
    session.plan(&[("a", &[4, 3]), ("b", &[4, 3])]).unwrap();
    // A shape given for a sizes N in b too.
    let mut options = SessionOptions::default();
    options.set_input_shape("a", &[5, 3]).unwrap();
    let session = Session::from_model(cpu_ref_only(), two_inputs(), &options).unwrap();
    assert_eq!(session.inputs()[0].dims_text(), "[5, 3]");
    assert_eq!(session.inputs()[1].dims_text(), "[5, 3]");
    assert_eq!(
        session
            .plan(&[("a", &[4, 3]), ("b", &[4, 3])])
            .unwrap_err()
            .to_string(),
        "input a: dimension 0 is 4, the model requires 5 (declared [5, 3])"
    );
    options.set_input_shape("a", &[5, 4]).unwrap();
    assert_eq!(
        Session::from_model(cpu_ref_only(), two_inputs(), &options)
            .unwrap_err()
            .to_string(),
        "node a (Input): the given shape [5, 4] does not match the declared one [N, 3]"
    );
}

/// The builder the CLI, C and Python share: each kind of option, how text is read, and
/// what is refused (exact messages).
#[test]
fn options_are_built_and_checked_in_one_place() {
    use backplane_api::Value;
    let mut o = SessionOptions::default();
    o.set_backends(" CpuFast, ,CpuRef ".split(','))
        .set_fusion(false);
    assert_eq!(o.backends, ["CpuFast", "CpuRef"]);
    assert!(o.optimizer.no_subgraph_optimization);
    o.add_backend_option_text("CpuFast:Threads=2").unwrap();
    assert_eq!(
        o.optimizer.options_for("CpuFast").get("Threads"),
        Some(&Value::Int(2))
    );
    // A typed value is kept as given: text "2" stays text.
    o.set_backend_option("CpuFast", "Threads", Value::Str("2".into()))
        .unwrap();
    assert_eq!(
        o.optimizer.options_for("CpuFast").get("Threads"),
        Some(&Value::Str("2".into()))
    );
    assert_eq!(o.optimizer.options_for("CpuFast").entries.len(), 1);
    assert_eq!(
        o.add_backend_option_text("CpuFast").unwrap_err(),
        "backend option \"CpuFast\" is not ID:KEY=VALUE"
    );
    assert_eq!(
        o.set_backend_option("", "K", Value::Bool(true))
            .unwrap_err(),
        "backend option \"\":\"K\": the backend id and the key must not be empty"
    );
    o.add_input_shape_text("x=1, 3,48,192").unwrap();
    assert_eq!(o.input_shapes["x"], [1, 3, 48, 192]);
    assert_eq!(
        o.add_input_shape_text("x=1,-3").unwrap_err(),
        "shape \"x=1,-3\": each dimension must be a whole number in 0..=4294967295"
    );
    assert_eq!(
        o.add_input_shape_text("x").unwrap_err(),
        "shape \"x\" is not NAME=D1,D2,..."
    );
    assert_eq!(
        o.set_input_shape("y", &[65536, 32768]).unwrap_err(),
        "input y: shape [65536, 32768] has more than 2147483647 elements"
    );
    o.set_input_shape("y", &[65536, 32767]).unwrap();
    o.set_input_shape("z", &[0, 7]).unwrap();
    assert_eq!(
        o.set_input_shape("", &[1]).unwrap_err(),
        "input shape [1]: the input name is empty"
    );
}

/// A layer whose output has more bytes than a `usize` holds (here `BroadcastTo` a
/// 2^32-per-side cube of floats) fails the load with an error naming it, where its size
/// used to be read as 0 bytes.
#[test]
fn an_output_too_large_to_address_fails_the_load() {
    let mut b = NetworkBuilder::new();
    let x = b
        .add_input("x", TensorInfo::new(&[1], DataType::Float32))
        .unwrap();
    let huge = b
        .add_layer(
            "huge",
            LayerDescriptor::BroadcastTo(backplane_api::BroadcastToDescriptor {
                shape: vec![u32::MAX; 3].into(),
            }),
            &[x],
        )
        .expect("shape inference takes it: only the size overflows");
    b.add_output("y", huge).unwrap();
    let err = Session::from_network(
        cpu_ref_only(),
        &b.build().unwrap(),
        &SessionOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.ends_with(
            "layer huge: its output [4294967295, 4294967295, 4294967295] Float32 has more \
             bytes than this machine can address"
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// Dynamic models: shapes and branches decided by values computed at run time

/// A value info of ONNX element type `elem` and fixed dimensions.
fn typed(name: &str, elem: i32, dims: &[i64]) -> onnx::proto::ValueInfoProto {
    let mut v = declared(name, &[]);
    if let Some(t) = v.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
        t.elem_type = elem;
        t.shape = Some(onnx::proto::TensorShapeProto {
            dim: dims
                .iter()
                .map(|&d| onnx::proto::Dimension {
                    dim_value: Some(d),
                    dim_param: None,
                })
                .collect(),
        });
    }
    v
}

fn bytes_of<T: backplane_api::bytemuck::Pod>(values: &[T]) -> Vec<u8> {
    backplane_api::bytemuck::cast_slice(values).to_vec()
}

fn session_of(m: onnx::Model) -> Session {
    Session::from_model(cpu_ref_only(), m, &SessionOptions::default()).unwrap()
}

/// `y = Reshape(x, s + 0)`: the target shape is an int64 input, added to at run time.
fn reshape_by_input() -> onnx::Model {
    model(
        vec![
            node("Add", &["s", "zero"], "target", vec![]),
            node("Reshape", &["x", "target"], "y", vec![]),
        ],
        vec![tensor("zero", &[1], &[], &[0])],
        vec![
            declared("x", &["2", "6"]),
            typed("s", onnx::proto::data_type::INT64, &[2]),
        ],
        vec![declared("y", &["A", "B"])],
    )
}

#[test]
fn a_shape_computed_at_run_time_is_a_segment_planned_per_value() {
    let session = session_of(reshape_by_input());
    let x: Vec<f32> = (0..12u8).map(f32::from).collect();
    let x_info = TensorInfo::new(&[2, 6], DataType::Float32);
    let s_info = TensorInfo::new(&[2], DataType::Signed64);
    let x_bytes = bytes_of(&x);
    let run = |shape: [i64; 2]| {
        let s = bytes_of(&shape);
        session
            .run_alloc(&[
                InputTensor {
                    name: "x",
                    info: &x_info,
                    data: &x_bytes,
                },
                InputTensor {
                    name: "s",
                    info: &s_info,
                    data: &s,
                },
            ])
            .unwrap()
    };
    for shape in [[3, 4], [4, 3], [3, 4], [12, 1]] {
        let out = run(shape);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].name, "y");
        let want: Vec<u32> = shape.iter().map(|&d| u32::try_from(d).unwrap()).collect();
        assert_eq!(out[0].info.shape.as_slice(), want.as_slice());
        // A reshape keeps the elements in order.
        assert_eq!(floats(&out[0].data), x);
    }
    let plan = session.current().unwrap();
    assert!(plan.is_dynamic());
    let text = plan.explain();
    // Three values seen: three plans of the second segment, none made twice.
    assert!(
        text.contains("then node y (Reshape) needs values computed at run time: the next segment is made per value (3 made so far)"),
        "{text}"
    );
    assert_eq!(text.matches("segment 2:").count(), 3, "{text}");
    // A wrong size is the import's error at those values, and the session goes on.
    let err = session
        .run_alloc(&[
            InputTensor {
                name: "x",
                info: &x_info,
                data: &x_bytes,
            },
            InputTensor {
                name: "s",
                info: &s_info,
                data: &bytes_of(&[5i64, 5]),
            },
        ])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "at node y (Reshape), for the values computed at run time: layer y_1 (Reshape): \
             cannot reshape [2, 6] into [5, 5]"
        ),
        "{err}"
    );
    assert_eq!(floats(&run([6, 2])[0].data), x);
}

#[test]
fn a_static_import_reports_the_run_time_shape_as_before() {
    let err = reshape_by_input()
        .instantiate(&onnx::ImportOptions::default())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 unsupported node(s): y (Reshape): shape (target) must be a constant (or fold to one)"
    );
}

/// A branch of `If` with one output `out` computed by `op` from `x` and `operand`.
fn branch(
    op: &str,
    operand: &str,
    inits: Vec<onnx::proto::TensorProto>,
) -> onnx::proto::GraphProto {
    onnx::proto::GraphProto {
        node: vec![node(op, &["x", operand], "out", vec![])],
        name: op.into(),
        initializer: inits,
        output: vec![declared("out", &["3"])],
        ..Default::default()
    }
}

fn graph_attr(name: &str, g: onnx::proto::GraphProto) -> onnx::proto::AttributeProto {
    onnx::proto::AttributeProto {
        name: name.into(),
        g: Some(Box::new(g)),
        r#type: onnx::proto::attribute_type::GRAPH,
        ..Default::default()
    }
}

#[test]
fn if_on_an_input_runs_the_branch_the_value_chooses() {
    // then: x + 1 (a constant of the branch); else: x * 2 (a constant of the outer graph).
    let m = model(
        vec![node(
            "If",
            &["cond"],
            "y",
            vec![
                graph_attr(
                    "then_branch",
                    branch("Add", "one", vec![tensor("one", &[1], &[1.0], &[])]),
                ),
                graph_attr("else_branch", branch("Mul", "two", vec![])),
            ],
        )],
        vec![tensor("two", &[1], &[2.0], &[])],
        vec![
            typed("cond", onnx::proto::data_type::BOOL, &[]),
            declared("x", &["3"]),
        ],
        vec![declared("y", &["3"])],
    );
    let session = session_of(m);
    let x_info = TensorInfo::new(&[3], DataType::Float32);
    let c_info = TensorInfo::new(&[], DataType::Boolean);
    let x = bytes_of(&[1.0f32, -2.0, 3.5]);
    let run = |cond: u8| {
        let out = session
            .run_alloc(&[
                InputTensor {
                    name: "cond",
                    info: &c_info,
                    data: &[cond],
                },
                InputTensor {
                    name: "x",
                    info: &x_info,
                    data: &x,
                },
            ])
            .unwrap();
        floats(&out[0].data)
    };
    assert_eq!(run(1), [2.0, -1.0, 4.5]);
    assert_eq!(run(0), [2.0, -4.0, 7.0]);
    assert_eq!(run(1), [2.0, -1.0, 4.5]);
    let text = session.current().unwrap().explain();
    assert!(text.contains("(2 made so far)"), "{text}");
    // The branch's layers are named after the If node.
    assert!(text.contains("y/out "), "{text}");
}

#[test]
fn range_to_a_value_computed_at_run_time() {
    // y = Range(0, int64(ReduceMax(x)), 1)
    let keep = onnx::proto::AttributeProto {
        name: "keepdims".into(),
        i: 0,
        r#type: onnx::proto::attribute_type::INT,
        ..Default::default()
    };
    let to = onnx::proto::AttributeProto {
        name: "to".into(),
        i: i64::from(onnx::proto::data_type::INT64),
        r#type: onnx::proto::attribute_type::INT,
        ..Default::default()
    };
    let m = model(
        vec![
            node("ReduceMax", &["x"], "m", vec![keep]),
            node("Cast", &["m"], "n", vec![to]),
            node("Range", &["start", "n", "delta"], "y", vec![]),
        ],
        vec![
            tensor("start", &[], &[], &[0]),
            tensor("delta", &[], &[], &[1]),
        ],
        vec![declared("x", &["2"])],
        vec![typed("y", onnx::proto::data_type::INT64, &[-1])],
    );
    let session = session_of(m);
    let info = TensorInfo::new(&[2], DataType::Float32);
    for (x, want) in [([2.5f32, 4.0], vec![0i64, 1, 2, 3]), ([1.0, 0.5], vec![0])] {
        let data = bytes_of(&x);
        let out = session
            .run_alloc(&[InputTensor {
                name: "x",
                info: &info,
                data: &data,
            }])
            .unwrap();
        assert_eq!(out[0].info.data_type, DataType::Signed64);
        assert_eq!(out[0].data, bytes_of(&want));
    }
}

/// A model of a few hundred bytes that declares `elements × 4 × (outputs + 1)` bytes:
/// `ConstantOfShape` of `elements` floats, then `outputs` graph outputs each an `Identity`
/// of it (issue 40's bomb, at a size a test can choose).
fn constant_bomb(elements: i64, outputs: usize) -> onnx::Model {
    let value = onnx::proto::AttributeProto {
        name: "value".into(),
        t: Some(tensor("", &[1], &[1.5], &[])),
        r#type: onnx::proto::attribute_type::TENSOR,
        ..Default::default()
    };
    let mut nodes = vec![node("ConstantOfShape", &["shape"], "big", vec![value])];
    let mut outs = Vec::new();
    let n = elements.to_string();
    for k in 0..outputs {
        let y = format!("y{k}");
        nodes.push(node("Identity", &["big"], &y, vec![]));
        outs.push(declared(&y, &[&n]));
    }
    model(
        nodes,
        vec![tensor("shape", &[1], &[], &[elements])],
        vec![],
        outs,
    )
}

/// The error of a session that `model` cannot make under `options`, which must come within
/// 5 s (a bomb is refused before its sizes are allocated, not after).
fn refused_quickly(model: onnx::Model, options: &SessionOptions) -> String {
    let started = std::time::Instant::now();
    let e = Session::from_model(cpu_ref_only(), model, options)
        .unwrap_err()
        .to_string();
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{e}");
    e
}

/// The bomb within a budget: the import charges the folded constant and its one descriptor
/// (eight names, one copy), then the load refuses the eight outputs before allocating
/// them, naming the largest tensor and every size; the same model runs within a budget that
/// holds it, every output the constant.
#[test]
fn a_constant_bomb_is_refused_by_the_memory_budget() {
    let elements = 1 << 24; // 64 MiB of floats
    let mut options = SessionOptions::default();
    options.set_max_memory("256M").unwrap();
    let e = refused_quickly(constant_bomb(elements, 8), &options);
    // 128 MiB charged by the import (the fold and its descriptor), 512 MiB of outputs asked.
    assert!(
        e.contains("outputs 536870912 bytes; the largest tensor: layer y0"),
        "{e}"
    );
    assert!(
        e.contains("'s output [16777216] Float32, 67108864 bytes) needs "),
        "{e}"
    );
    assert!(
        e.contains("over the memory budget of 268435456 bytes (134217728 bytes already charged)"),
        "{e}"
    );
    // The importer's own copies count too: a budget below the fold and its copy stops the
    // import, naming the constant.
    options.set_max_memory("100M").unwrap();
    let e = refused_quickly(constant_bomb(elements, 8), &options);
    assert!(
        e.contains("constant y0 [16777216] Float32 needs 67108864 bytes, over the memory budget of 104857600 bytes (67108864 bytes already charged)"),
        "{e}"
    );
    // A small one runs: every output is the constant.
    options.set_max_memory("1G").unwrap();
    let s = Session::from_model(cpu_ref_only(), constant_bomb(1000, 3), &options).unwrap();
    let out = s.run_alloc(&[]).unwrap();
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|o| floats(&o.data) == vec![1.5; 1000]));
}

/// A later segment's folds count against its own load's budget (issue 40), as the first
/// segment's do: `ConstantOfShape` of a size an input gives at run time, 2²⁴ floats under a
/// 100 MB budget, fails that run in the importer (the fold and its copy, before any plan
/// allocates them), naming the sizes; a small size then runs.
#[test]
fn a_later_segment_folds_within_the_memory_budget() {
    let value = onnx::proto::AttributeProto {
        name: "value".into(),
        t: Some(tensor("", &[1], &[1.5], &[])),
        r#type: onnx::proto::attribute_type::TENSOR,
        ..Default::default()
    };
    let m = model(
        vec![
            node("Add", &["s", "zero"], "n", vec![]),
            node("ConstantOfShape", &["n"], "y", vec![value]),
        ],
        vec![tensor("zero", &[1], &[], &[0])],
        vec![typed("s", onnx::proto::data_type::INT64, &[1])],
        vec![declared("y", &["N"])],
    );
    let mut options = SessionOptions::default();
    options.set_max_memory("100M").unwrap();
    let session = Session::from_model(cpu_ref_only(), m, &options).unwrap();
    let s_info = TensorInfo::new(&[1], DataType::Signed64);
    let run = |n: i64| {
        let s = bytes_of(&[n]);
        session.run_alloc(&[InputTensor {
            name: "s",
            info: &s_info,
            data: &s,
        }])
    };
    let started = std::time::Instant::now();
    let e = run(1 << 24).unwrap_err().to_string();
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{e}");
    assert!(
        e.contains(
            "[16777216] Float32 needs 67108864 bytes, over the memory budget of 104857600 \
             bytes (67108864 bytes already charged)"
        ),
        "{e}"
    );
    let out = run(1000).unwrap();
    assert_eq!(floats(&out[0].data), vec![1.5; 1000]);
}

/// A `Resize` of a 1×1×1×1 input to 2²⁰ × 2¹⁸ (1 TiB of floats, more than any machine here
/// has): refused at load by the default budget (physical memory), naming the layer, instead
/// of a lazily zeroed arena that the first run would fault in until the kernel kills the
/// process.
#[test]
fn a_resize_bomb_is_refused_by_the_default_budget() {
    let m = model(
        vec![node("Resize", &["x", "", "", "sizes"], "y", vec![])],
        vec![tensor("sizes", &[4], &[], &[1, 1, 1 << 20, 1 << 18])],
        vec![declared("x", &["1", "1", "1", "1"])],
        vec![declared("y", &["1", "1", "1048576", "262144"])],
    );
    let e = refused_quickly(m, &SessionOptions::default());
    assert!(
        e.contains("'s output [1, 1, 1048576, 262144] Float32, 1099511627776 bytes)"),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "over the memory budget of {} bytes",
            crate::memory::budget::physical_memory()
        )),
        "{e}"
    );
}

/// `MaxPool` with its `Indices` output, against the definition written out here: each
/// window's largest value and the flat input position of its first occurrence in row-major
/// order among the positions inside the input (row-major within each plane, or column-major
/// with `storage_order` 1), on values with many ties, with padding and a ceil-mode window.
#[test]
fn max_pool_indices_are_the_first_largest_tap() {
    use onnx::proto::{AttributeProto, NodeProto, attribute_type, data_type};
    let (n, c, h, w) = (1usize, 2usize, 5usize, 6usize);
    let x: Vec<f32> = (0..n * c * h * w)
        .map(|i| ((i * 5 / 3) % 3) as f32)
        .collect();
    let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    for storage_order in [0i64, 1] {
        let int_attr = |name: &str, v: i64| AttributeProto {
            name: name.into(),
            i: v,
            r#type: attribute_type::INT,
            ..Default::default()
        };
        let pool = NodeProto {
            op_type: "MaxPool".into(),
            name: "pool".into(),
            input: vec!["x".into()],
            output: vec!["y".into(), "i".into()],
            attribute: vec![
                ints("kernel_shape", &[3, 3]),
                ints("strides", &[2, 2]),
                ints("pads", &[1, 1, 0, 0]),
                int_attr("ceil_mode", 1),
                int_attr("storage_order", storage_order),
            ],
            ..Default::default()
        };
        let mut indices = declared("i", &["1", "2", "3", "3"]);
        if let Some(t) = indices.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
            t.elem_type = data_type::INT64;
        }
        let m = model(
            vec![pool],
            vec![],
            vec![declared("x", &["1", "2", "5", "6"])],
            vec![declared("y", &["1", "2", "3", "3"]), indices],
        );
        let session = Session::from_model(cpu_ref_only(), m, &SessionOptions::default()).unwrap();
        let info = TensorInfo::new(&[1, 2, 5, 6], DataType::Float32);
        let out = session
            .run_alloc(&[InputTensor {
                name: "x",
                info: &info,
                data: &data,
            }])
            .unwrap();
        // 3 rows: ceil((5 + 1 - 3) / 2) + 1 in ceil mode (the last window half outside), 3 columns.
        let (mut want_y, mut want_i) = (Vec::new(), Vec::new());
        for plane in 0..n * c {
            for oy in 0..3i64 {
                for ox in 0..3i64 {
                    let mut best: Option<(f32, i64)> = None;
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (iy, ix) = (oy * 2 + ky - 1, ox * 2 + kx - 1);
                            if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                continue;
                            }
                            let v = x[plane * h * w + iy as usize * w + ix as usize];
                            let at = if storage_order == 1 {
                                ix * h as i64 + iy
                            } else {
                                iy * w as i64 + ix
                            };
                            if best.is_none_or(|(b, _)| v > b) {
                                best = Some((v, (plane * h * w) as i64 + at));
                            }
                        }
                    }
                    let (v, at) = best.unwrap();
                    want_y.push(v);
                    want_i.push(at);
                }
            }
        }
        assert_eq!(floats(&out[0].data), want_y);
        let got_i: Vec<i64> = out[1]
            .data
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(got_i, want_i, "storage_order {storage_order}");
    }
}

/// A 3-D `ConvTranspose` (imported as 2-D layers along the depth) with depth, height and
/// width strides, pads, dilations, output padding, two groups and a bias, against the
/// definition written out here (every input element's products added at its output
/// positions).
#[test]
fn conv_transpose_3d_matches_the_definition() {
    let (c, d, h, w) = (4usize, 3usize, 3usize, 2usize);
    let (group, m_g, k) = (2usize, 3usize, [2usize, 3, 2]);
    let (s, dil, p0, p1, op) = ([2, 1, 2], [1, 2, 1], [1, 0, 0], [0, 1, 1], [1, 0, 1]);
    let x: Vec<f32> = (0..c * d * h * w)
        .map(|i| ((i * 13 % 17) as f32 - 8.0) / 4.0)
        .collect();
    let wt: Vec<f32> = (0..c * m_g * k[0] * k[1] * k[2])
        .map(|i| ((i * 7 % 11) as f32 - 5.0) / 8.0)
        .collect();
    let b: Vec<f32> = (0..group * m_g).map(|i| i as f32 * 0.25 - 0.5).collect();
    let input = [d, h, w];
    let out: Vec<usize> = (0..3)
        .map(|a| (input[a] - 1) * s[a] + (k[a] - 1) * dil[a] + 1 + op[a] - p0[a] - p1[a])
        .collect();
    let m = group * m_g;
    let mut want: Vec<f32> = (0..m * out[0] * out[1] * out[2])
        .map(|i| b[i / (out[0] * out[1] * out[2])])
        .collect();
    let c_g = c / group;
    for ci in 0..c {
        let g = ci / c_g;
        for (id, ih, iw) in
            (0..d).flat_map(|a| (0..h).flat_map(move |b| (0..w).map(move |c| (a, b, c))))
        {
            let xv = x[((ci * d + id) * h + ih) * w + iw];
            for mo in 0..m_g {
                for kd in 0..k[0] {
                    for kh in 0..k[1] {
                        for kw in 0..k[2] {
                            let at = [
                                id * s[0] + kd * dil[0],
                                ih * s[1] + kh * dil[1],
                                iw * s[2] + kw * dil[2],
                            ];
                            let o: Vec<i64> = (0..3).map(|a| at[a] as i64 - p0[a] as i64).collect();
                            if (0..3).any(|a| o[a] < 0 || o[a] >= out[a] as i64) {
                                continue;
                            }
                            let wv = wt[(((ci * m_g + mo) * k[0] + kd) * k[1] + kh) * k[2] + kw];
                            let oi = (((g * m_g + mo) * out[0] + o[0] as usize) * out[1]
                                + o[1] as usize)
                                * out[2]
                                + o[2] as usize;
                            want[oi] += xv * wv;
                        }
                    }
                }
            }
        }
    }
    let dims = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
    let attrs = vec![
        ints("strides", &dims(&s)),
        ints("dilations", &dims(&dil)),
        ints(
            "pads",
            &[p0[0], p0[1], p0[2], p1[0], p1[1], p1[2]].map(|v| v as i64),
        ),
        ints("output_padding", &dims(&op)),
        onnx::proto::AttributeProto {
            name: "group".into(),
            i: group as i64,
            r#type: onnx::proto::attribute_type::INT,
            ..Default::default()
        },
    ];
    let y_dims: Vec<String> = [1, m, out[0], out[1], out[2]]
        .iter()
        .map(|v| v.to_string())
        .collect();
    let y_dims: Vec<&str> = y_dims.iter().map(String::as_str).collect();
    let model = model(
        vec![node("ConvTranspose", &["x", "w", "b"], "y", attrs)],
        vec![
            tensor("w", &[c as i64, m_g as i64, 2, 3, 2], &wt, &[]),
            tensor("b", &[m as i64], &b, &[]),
        ],
        vec![declared("x", &["1", "4", "3", "3", "2"])],
        vec![declared("y", &y_dims)],
    );
    let session = Session::from_model(cpu_ref_only(), model, &SessionOptions::default()).unwrap();
    let info = TensorInfo::new(
        &[1, c as u32, d as u32, h as u32, w as u32],
        DataType::Float32,
    );
    let data: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let got = session
        .run_alloc(&[InputTensor {
            name: "x",
            info: &info,
            data: &data,
        }])
        .unwrap();
    let got = floats(&got[0].data);
    assert_eq!(got.len(), want.len());
    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
            "element {i}: {g} vs {e}"
        );
    }
}

/// `Scan` of opset 8 (batched, `directions`): two batch entries, each summing its sequence
/// in reverse into a state and giving the running sums, against the sums written out here.
#[test]
fn scan_of_opset_8_runs_each_batch_entry() {
    use onnx::proto::{
        AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, attribute_type,
    };
    let body = GraphProto {
        node: vec![
            node("Add", &["sum_in", "next"], "sum_out", vec![]),
            node("Identity", &["sum_out"], "scan_out", vec![]),
        ],
        name: "body".into(),
        input: vec![declared("sum_in", &["2"]), declared("next", &["2"])],
        output: vec![declared("sum_out", &["2"]), declared("scan_out", &["2"])],
        ..GraphProto::default()
    };
    let scan = NodeProto {
        op_type: "Scan".into(),
        name: "scan".into(),
        input: vec![String::new(), "init".into(), "x".into()],
        output: vec!["y".into(), "z".into()],
        attribute: vec![
            AttributeProto {
                name: "body".into(),
                g: Some(Box::new(body)),
                r#type: attribute_type::GRAPH,
                ..Default::default()
            },
            AttributeProto {
                name: "num_scan_inputs".into(),
                i: 1,
                r#type: attribute_type::INT,
                ..Default::default()
            },
            ints("directions", &[1]),
        ],
        ..Default::default()
    };
    let m = onnx::Model::new(ModelProto {
        ir_version: 4,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 8,
        }],
        graph: Some(onnx::proto::GraphProto {
            node: vec![scan],
            name: "scan8".into(),
            input: vec![
                declared("init", &["2", "2"]),
                declared("x", &["2", "3", "2"]),
            ],
            output: vec![declared("y", &["2", "2"]), declared("z", &["2", "3", "2"])],
            ..onnx::proto::GraphProto::default()
        }),
        ..ModelProto::default()
    })
    .unwrap();
    let session = Session::from_model(cpu_ref_only(), m, &SessionOptions::default()).unwrap();
    let init = [0.5f32, -1.0, 2.0, 3.0];
    let x: Vec<f32> = (0..12).map(|i| i as f32 * 1.5 - 4.0).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let (ii, xi) = (
        TensorInfo::new(&[2, 2], DataType::Float32),
        TensorInfo::new(&[2, 3, 2], DataType::Float32),
    );
    let (ib, xb) = (bytes(&init), bytes(&x));
    let out = session
        .run_alloc(&[
            InputTensor {
                name: "init",
                info: &ii,
                data: &ib,
            },
            InputTensor {
                name: "x",
                info: &xi,
                data: &xb,
            },
        ])
        .unwrap();
    // Per batch entry, the steps in reverse (t = 2, 1, 0): the state plus x[b, t], each
    // step's state the scan output at that step.
    let (mut y, mut z) = (Vec::new(), vec![0.0f32; 12]);
    for b in 0..2 {
        let mut s = [init[2 * b], init[2 * b + 1]];
        for (step, t) in [2usize, 1, 0].into_iter().enumerate() {
            for j in 0..2 {
                s[j] += x[(b * 3 + t) * 2 + j];
                z[(b * 3 + step) * 2 + j] = s[j];
            }
        }
        y.extend(s);
    }
    assert_eq!(floats(&out[0].data), y);
    assert_eq!(floats(&out[1].data), z);
}
