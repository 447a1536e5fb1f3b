//! Models whose shapes or branches depend on values computed at run time, through the CLI
//! (`backplane run`, `--explain`, `compile`): an `If` on an input whose branches compute
//! `x + 1` and `x * 2`, checked against those formulas written out here.

use backplane::{
    npy::{self, NpyData},
    onnx::proto::{
        AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
        TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto, attribute_type,
        data_type,
    },
};
use prost::Message;

use crate::fixtures::{PluginDir, cli};

fn value(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: Some(d),
                            dim_param: None,
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

fn scalar(name: &str, v: f32) -> TensorProto {
    TensorProto {
        dims: vec![1],
        data_type: data_type::FLOAT,
        float_data: vec![v],
        name: name.into(),
        ..Default::default()
    }
}

fn branch(op: &str, operand: &str, init: Vec<TensorProto>) -> AttributeProto {
    AttributeProto {
        name: if op == "Add" {
            "then_branch"
        } else {
            "else_branch"
        }
        .into(),
        g: Some(Box::new(GraphProto {
            node: vec![node(op, &["x", operand], "out")],
            name: op.into(),
            initializer: init,
            output: vec![value("out", data_type::FLOAT, &[4])],
            ..Default::default()
        })),
        r#type: attribute_type::GRAPH,
        ..Default::default()
    }
}

/// `y = If(cond) then x + 1 else x * 2`, x float [4], cond a bool scalar input.
fn if_model() -> Vec<u8> {
    let mut if_node = node("If", &["cond"], "y");
    if_node.name = "choose".into();
    if_node.attribute = vec![
        branch("Add", "one", vec![scalar("one", 1.0)]),
        branch("Mul", "two", vec![]),
    ];
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: vec![if_node],
            name: "if".into(),
            initializer: vec![scalar("two", 2.0)],
            input: vec![
                value("cond", data_type::BOOL, &[]),
                value("x", data_type::FLOAT, &[4]),
            ],
            output: vec![value("y", data_type::FLOAT, &[4])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn if_on_an_input_through_backplane_run() {
    let dir = PluginDir::new();
    let model = dir.write("if.onnx", &if_model());
    let x = [1.5f32, -2.0, 0.0, 10.0];
    let x_file = dir.file("x.npy");
    npy::write(&x_file, &[4], &NpyData::F32(x.to_vec())).unwrap();
    for (cond, want) in [(1u8, x.map(|v| v + 1.0)), (0, x.map(|v| v * 2.0))] {
        let c_file = dir.file(&format!("cond{cond}.npy"));
        npy::write(&c_file, &[], &NpyData::Bool(vec![cond])).unwrap();
        let out_dir = dir.file(&format!("out{cond}"));
        let (ok, stdout, stderr) = cli(&[
            "run",
            model.to_str().unwrap(),
            "--input",
            &format!("cond={}", c_file.display()),
            "--input",
            &format!("x={}", x_file.display()),
            "--explain=layers",
            "--output-dir",
            out_dir.to_str().unwrap(),
        ]);
        assert!(ok, "{stdout}{stderr}");
        let (shape, got) = npy::read_f32(&out_dir.join("y.npy")).unwrap();
        assert_eq!(shape, [4]);
        assert_eq!(got, want, "cond {cond}");
        // The explanation names the segment boundary (the plan of the branch is made at the
        // run, after the explanation is printed).
        assert!(
            stdout.contains("segment 1:")
                && stdout.contains(
                    "then node choose (If) needs values computed at run time: the next \
                     segment is made per value"
                ),
            "{stdout}"
        );
    }
}

#[test]
fn compile_refuses_a_model_whose_shapes_depend_on_values() {
    let dir = PluginDir::new();
    let model = dir.write("if.onnx", &if_model());
    let out = dir.file("if.bpn");
    let (ok, stdout, stderr) = cli(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(
            "the model's shapes depend on values computed at run time (node choose (If) needs \
             them): compile needs a static model; run it from its .onnx"
        ),
        "{stderr}"
    );
    assert!(!out.exists());
}
