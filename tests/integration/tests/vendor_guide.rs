//! `docs/VENDOR-GUIDE.md` works as written: its code blocks build a plugin and its commands
//! install, inspect, check and use it.
//!
//! The guide marks what a reader types with the info string of the fence: ` ```rust
//! vendor-guide:src/lib.rs ` (a file, by its path from the current directory) and ` ```sh
//! vendor-guide ` (commands). [`the_guide_builds_and_runs_its_plugin`] turns them, in order,
//! into one bash script and runs it in a temporary directory laid out as the guide assumes
//! (the backplane checkout beside the reader's crate, `backplane` on `PATH`), with additions
//! of its own: the workspace's `Cargo.lock` (so the versions are the tested ones and compiled
//! dependencies are reused), the workspace's target directory (`target` a link to it), the
//! `backend-api` dependency by its canonical path (the package the workspace builds), no
//! network (`CARGO_NET_OFFLINE`) and no incremental build.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use backplane::onnx::proto::{
    Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    TypeProtoTensor, ValueInfoProto, data_type,
};
use prost::Message;

use crate::fixtures::{backplane_bin, target_dir};

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The guide's model, `docs/vendor-guide/relu_sigmoid.onnx`: `y = Sigmoid(Relu(x))`, `x` a
/// Float32 `[1, 8]`.
const MODEL: &str = "docs/vendor-guide/relu_sigmoid.onnx";

/// One marked block of the guide: a file to write (its path and text) or commands.
#[derive(Debug)]
enum Block {
    File(String, String),
    Commands(String),
}

/// The marked blocks of `markdown`, in order.
fn marked_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let body = body.join("\n") + "\n";
        let mut words = info.split_whitespace().skip(1);
        match words.next() {
            Some("vendor-guide") => blocks.push(Block::Commands(body)),
            Some(mark) => {
                if let Some(path) = mark.strip_prefix("vendor-guide:") {
                    blocks.push(Block::File(path.to_owned(), body));
                }
            }
            None => {}
        }
    }
    blocks
}

/// The `y = Sigmoid(Relu(x))` model.
fn guide_model() -> Vec<u8> {
    let tensor = |name: &str| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: data_type::FLOAT,
                shape: Some(TensorShapeProto {
                    dim: [1, 8]
                        .map(|d| Dimension {
                            dim_value: Some(d),
                            dim_param: None,
                        })
                        .to_vec(),
                }),
            }),
        }),
    };
    let node = |op: &str, input: &str, output: &str| NodeProto {
        input: vec![input.into()],
        output: vec![output.into()],
        name: op.to_lowercase(),
        op_type: op.into(),
        domain: String::new(),
        attribute: vec![],
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: vec![node("Relu", "x", "r"), node("Sigmoid", "r", "y")],
            name: "relu_sigmoid".into(),
            input: vec![tensor("x")],
            output: vec![tensor("y")],
            ..GraphProto::default()
        }),
        ..ModelProto::default()
    }
    .encode_to_vec()
}

/// The checked-in model is the one [`guide_model`] makes (`BACKPLANE_WRITE_GUIDE_MODEL=1`
/// writes it).
#[test]
fn the_guide_model_is_generated() {
    let path = repo().join(MODEL);
    let want = guide_model();
    if std::env::var_os("BACKPLANE_WRITE_GUIDE_MODEL").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what guide_model() makes: run this test with BACKPLANE_WRITE_GUIDE_MODEL=1",
        path.display()
    );
}

/// The guide's code builds, and its commands install, inspect, pass the conformance kit and
/// run the model with ReLU on the plugin's backend.
#[test]
fn the_guide_builds_and_runs_its_plugin() {
    let guide = std::fs::read_to_string(repo().join("docs/VENDOR-GUIDE.md")).unwrap();
    let blocks = marked_blocks(&guide);
    let files: Vec<&str> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::File(path, _) => Some(path.as_str()),
            Block::Commands(_) => None,
        })
        .collect();
    assert_eq!(files, ["Cargo.toml", "src/lib.rs"], "{blocks:?}");

    // The reader's directory: the checkout as `backplane`, `backplane` on PATH.
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(
        repo().canonicalize().unwrap(),
        work.path().join("backplane"),
    )
    .unwrap();
    let bin = work.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(backplane_bin(), bin.join("backplane")).unwrap();
    let target_root = target_dir().parent().unwrap().to_path_buf();

    let quote = |p: &Path| format!("'{}'", p.display());
    let mut script = String::from("set -euo pipefail\n");
    for (step, block) in blocks.iter().enumerate() {
        match block {
            Block::File(path, text) => {
                assert!(!text.contains("VENDOR_GUIDE_EOF"));
                // The dependency on the checkout's `backend-api`, by its canonical path (the
                // package the workspace builds, so its build is reused).
                let text = if path == "Cargo.toml" {
                    let given = "path = \"../backplane/backend-api\"";
                    assert_eq!(text.matches(given).count(), 1, "{text}");
                    let api = repo().join("backend-api").canonicalize().unwrap();
                    text.replace(given, &format!("path = \"{}\"", api.display()))
                } else {
                    text.clone()
                };
                script += &format!(
                    "mkdir -p \"$(dirname '{path}')\"\ncat > '{path}' <<'VENDOR_GUIDE_EOF'\n{text}VENDOR_GUIDE_EOF\n"
                );
                if path == "Cargo.toml" {
                    // The test's own additions: the tested versions, the shared target
                    // directory.
                    script += &format!(
                        "cp {} Cargo.lock\nln -sfn {} target\n",
                        quote(&repo().join("Cargo.lock")),
                        quote(&target_root)
                    );
                }
            }
            Block::Commands(text) => {
                script += &format!("echo '@@ step {step}'\n{text}");
            }
        }
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target_root)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("DYNAMIC_BACKEND_PATHS")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the guide's script failed\n--- script\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );

    // The output of each command block, by the command it starts with.
    let steps: Vec<&str> = stdout.split("@@ step ").skip(1).collect();
    let output_of = |command: &str| -> &str {
        let (i, _) = blocks
            .iter()
            .enumerate()
            .rfind(|(_, b)| matches!(b, Block::Commands(t) if t.trim_start().starts_with(command)))
            .unwrap_or_else(|| panic!("the guide has no `{command}` step"));
        steps
            .iter()
            .find(|s| s.starts_with(&format!("{i}\n")))
            .unwrap_or_else(|| panic!("no output of step {i}:\n{stdout}"))
    };
    let context = format!("\n--- stdout\n{stdout}\n--- stderr\n{stderr}");

    let install = output_of("backplane install");
    for line in [
        "installed backend MyRelu as ../backends/Example_MyRelu_backend.so.0.1.0",
        "link ../backends/Example_MyRelu_backend.so -> Example_MyRelu_backend.so.0.1.0",
    ] {
        assert!(install.contains(line), "install: no {line:?}{context}");
    }

    let inspect = output_of("backplane inspect");
    let api = format!("{}.{}", backplane_api::API_MAJOR, backplane_api::API_MINOR);
    for line in [
        "backend id:  MyRelu".to_owned(),
        format!("built for:   Backend API {api} (host {api}): compatible"),
        "vendor:      Example  release: 0.1.0".to_owned(),
        "  HostMemory = true".to_owned(),
    ] {
        assert!(inspect.contains(&line), "inspect: no {line:?}{context}");
    }
    let activation = inspect
        .lines()
        .find(|l| l.trim_start().starts_with("Activation "))
        .unwrap_or_else(|| panic!("inspect: no Activation row{context}"));
    assert!(
        activation.split_whitespace().nth(1) == Some("yes"),
        "{activation}"
    );

    let conformance = output_of("backplane conformance");
    assert!(
        conformance.contains("PASS  layer/Activation/basic"),
        "conformance: ReLU did not pass{context}"
    );
    assert!(
        conformance.contains("0 undeclared failure(s), 0 declared")
            && conformance.contains(" passed, 0 failed, "),
        "conformance did not pass{context}"
    );

    let run = output_of("backplane run");
    let relu = run
        .lines()
        .find(|l| l.contains("relu") && !l.contains("sigmoid"))
        .unwrap_or_else(|| panic!("run --explain names no ReLU layer{context}"));
    assert!(
        relu.contains("MyRelu"),
        "ReLU not on MyRelu: {relu}{context}"
    );
    assert!(
        run.contains("refused by MyRelu: MyRelu runs only ReLU on Float32 tensors"),
        "run --explain gives no MyRelu refusal of the Sigmoid{context}"
    );
}
