//! Compiled networks (`.bpn`, issue 30) through the real path: `backplane compile` of the
//! PaddleOCR classifier with the CpuFast plugin (Backend API 1.4: its workloads prepared
//! ahead of time), then `backplane run` of the file; a file made for a backend that is absent;
//! damaged and forged files; the debug handles of fused layers.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use backplane::{
    CreationOptions, InputTensor, Runtime, SealKeySource, Session, SessionError, SessionOptions,
    compiled::{
        CompiledError, CompiledNetwork,
        container::{self, SectionKind},
        seal::{Prepared, SealKey},
    },
};
use backplane_api::{DataType, TensorInfo};

use crate::fixtures::{PluginDir, cli, cli_with, cpufast_plugin};

fn classifier() -> PathBuf {
    // scripts/fetch-paddleocr.sh puts it in the repository's target/, whatever
    // CARGO_TARGET_DIR is.
    let m =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models/paddleocr_cls/model.onnx");
    assert!(
        m.is_file(),
        "{} is missing: scripts/fetch-paddleocr.sh (scripts/test.sh runs it)",
        m.display()
    );
    m
}

/// A plugin folder with CpuFast, and a scratch folder.
fn setup() -> (PluginDir, tempfile::TempDir) {
    let plugins = PluginDir::new();
    plugins.copy(&cpufast_plugin(), "Acme_CpuFast_backend.so");
    (plugins, tempfile::tempdir().unwrap())
}

/// `backplane compile` of the classifier at 1×3×48×192 on CpuFast (from `plugins`) and
/// CpuRef, into `bpn`: its standard output.
pub(crate) fn compile_classifier(plugins: &PluginDir, bpn: &Path) -> String {
    let (ok, out, err) = cli(&[
        "compile",
        classifier().to_str().unwrap(),
        "--path",
        plugins.as_str(),
        "--backends",
        "CpuFast,CpuRef",
        "--shape",
        "x=1,3,48,192",
        "-o",
        bpn.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    out
}

fn output(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("save_infer_model_scale_0.tmp_1.npy"))
        .or_else(|_| {
            let entry = std::fs::read_dir(dir)?.next().expect("one output")?;
            std::fs::read(entry.path())
        })
        .unwrap()
}

/// `compile` then `run m.bpn` gives the bytes of `run m.onnx`, and the file says what it holds.
#[test]
fn a_compiled_classifier_gives_the_onnx_bytes() {
    let (plugins, work) = setup();
    let bpn = work.path().join("cls.bpn");
    let model = classifier();
    let common = [
        "--path",
        plugins.as_str(),
        "--backends",
        "CpuFast,CpuRef",
        "--shape",
        "x=1,3,48,192",
    ];
    let out = compile_classifier(&plugins, &bpn);
    // 84 compute layers on CpuFast, 54 of them fused chains: each prepared ahead of time.
    assert!(
        out.contains("317 layers on CpuRef, CpuFast, 54 workloads prepared ahead of time"),
        "{out}"
    );
    let (onnx_out, bpn_out) = (work.path().join("onnx"), work.path().join("bpn"));
    let (ok, _, err) = cli(&[
        &["run", model.to_str().unwrap()],
        &common[..],
        &["--output-dir", onnx_out.to_str().unwrap()],
    ]
    .concat());
    assert!(ok, "{err}");
    // The compiled file needs neither the shape nor the preferences again.
    let (ok, text, err) = cli(&[
        "run",
        bpn.to_str().unwrap(),
        "--path",
        plugins.as_str(),
        "--explain",
        "--output-dir",
        bpn_out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(output(&onnx_out), output(&bpn_out));
    // The stored explanation, debug handles included.
    assert!(
        text.contains("Conv@0+bn+hardswish, Conv@12+bn+hardswish"),
        "{text}"
    );
}

/// A file compiled for CpuFast, run where CpuFast is not registered: a clear error naming the
/// backend and its versions; with --reoptimize it runs on CpuRef, with CpuRef's own bytes.
#[test]
fn an_absent_backend_is_an_error_unless_reoptimized() {
    let (plugins, work) = setup();
    let bpn = work.path().join("cls.bpn");
    let model = classifier();
    compile_classifier(&plugins, &bpn);
    let empty = PluginDir::new();
    let (ok, _, err) = cli(&["run", bpn.to_str().unwrap(), "--path", empty.as_str()]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "Error: compiled network: compiled for backend CpuFast (release 0.1.0, Backend API \
             {}), which is not registered here; give --reoptimize",
            backplane_api::ApiVersion::CURRENT
        )),
        "{err}"
    );
    let (again, reference) = (work.path().join("again"), work.path().join("ref"));
    let (ok, out, err) = cli(&[
        "run",
        bpn.to_str().unwrap(),
        "--path",
        empty.as_str(),
        "--reoptimize",
        "--explain",
        "--output-dir",
        again.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("compiled network: compiled for backend CpuFast")
            && out.contains("optimised again"),
        "{out}"
    );
    let (ok, _, err) = cli(&[
        "run",
        model.to_str().unwrap(),
        "--path",
        empty.as_str(),
        "--backends",
        "CpuRef",
        "--shape",
        "x=1,3,48,192",
        "--output-dir",
        reference.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(output(&again), output(&reference));
}

/// The bytes of a compiled classifier (CpuFast and CpuRef).
fn compiled_bytes() -> (PluginDir, Vec<u8>) {
    let (plugins, work) = setup();
    let bpn = work.path().join("cls.bpn");
    compile_classifier(&plugins, &bpn);
    (plugins, std::fs::read(&bpn).unwrap())
}

/// Truncated at any point, one bit flipped in any section, or not a compiled network at all:
/// each is an error that says what is wrong, never a crash.
#[test]
fn damaged_files_are_errors() {
    let (_plugins, bytes) = compiled_bytes();
    assert!(CompiledNetwork::from_bytes(&bytes).is_ok());
    let sections = container::read(&bytes).unwrap();
    assert_eq!(
        sections.iter().map(|s| s.kind).collect::<Vec<_>>(),
        [
            SectionKind::Network,
            SectionKind::Constants,
            SectionKind::Blobs,
            SectionKind::Seals
        ]
    );
    for cut in [
        0,
        7,
        24,
        100,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() - 1,
    ] {
        let e = CompiledNetwork::from_bytes(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(e, CompiledError::Container(_)),
            "cut at {cut}: {e}"
        );
    }
    for s in &sections {
        let mut flipped = bytes.clone();
        flipped[s.range.start + s.range.len() / 2] ^= 0x10;
        let e = CompiledNetwork::from_bytes(&flipped)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "({:?}): checksum mismatch: the file is damaged",
                s.kind
            )),
            "{e}"
        );
    }
    let e = CompiledNetwork::from_bytes(b"not a compiled network").unwrap_err();
    assert_eq!(
        e.to_string(),
        "compiled network: not a compiled network (no BPNET header)"
    );
    // The CLI says so too, for a file that starts like one.
    let work = tempfile::tempdir().unwrap();
    let cut = work.path().join("cut.bpn");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (ok, _, err) = cli(&["run", cut.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("past the end of the file"), "{err}");
}

/// The sections of `bytes` written again after `edit` changed one: valid checksums, forged
/// content.
fn forge(bytes: &[u8], kind: SectionKind, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let sections = container::read(bytes).unwrap();
    let mut owned: Vec<(SectionKind, Vec<u8>)> = sections
        .iter()
        .map(|s| (s.kind, bytes[s.range.clone()].to_vec()))
        .collect();
    let target = owned.iter_mut().find(|(k, _)| *k == kind).unwrap();
    edit(&mut target.1);
    let refs: Vec<(SectionKind, &[u8])> = owned.iter().map(|(k, b)| (*k, b.as_slice())).collect();
    container::write(&refs)
}

fn session(plugins: &PluginDir, bytes: &[u8]) -> Result<Session, SessionError> {
    let runtime = Arc::new(Runtime::new(
        CreationOptions::default().with_dynamic_backends_path(plugins.path()),
    ));
    Session::load_bytes(runtime, bytes, &SessionOptions::default())
}

/// A blob whose checksum holds but whose content is not what CpuFast made (crafted): CpuFast
/// refuses it, and the host makes that workload from the layer instead (issue 40: a refused
/// blob costs its preparation, not the load), warning with the layer and the ONNX nodes it
/// was fused from; the output is the unforged file's, bit for bit.
#[test]
fn a_forged_blob_falls_back_to_creating_the_workload() {
    let (plugins, bytes) = compiled_bytes();
    // Every blob starts with CpuFast's magic "CFPW": break the first one, and seal it again
    // with the key it was sealed with (a forger who holds the key, or a blob its own
    // compiler damaged): the seal holds, CpuFast refuses.
    let c = CompiledNetwork::from_bytes(&bytes).unwrap();
    let (first, blob) = prepared_where(&c, |_| true);
    let mut broken = blob.clone();
    broken[0] = b'X';
    let forged = reseal(&replace_blob(&bytes, &blob, &broken), first);
    let (err, good) = run_compiled(&plugins, &bytes, None);
    assert!(!err.contains("refused its prepared workload"), "{err}");
    let (err, out) = run_compiled(&plugins, &forged, None);
    assert!(
        err.contains(
            "layer Conv@0+bn+hardswish (fused from Conv@0 + BatchNormalization@0 + Add@0 \
             + Clip@0 + Mul@0 + Div@0): CpuFast refused its prepared workload (layer \
             Conv@0+bn+hardswish: not a CpuFast prepared workload (no CFPW header)); \
             creating it from the layer instead"
        ),
        "{err}"
    );
    assert!(!err.contains("are not used"), "{err}");
    assert_eq!(out, good);
    // Garbage in the network section (checksums made valid) is an error, not a crash.
    let forged = forge(&bytes, SectionKind::Network, |b| {
        let n = b.len();
        b[n / 2..].iter_mut().for_each(|x| *x = 0xff);
    });
    let e = session(&plugins, &forged).unwrap_err().to_string();
    assert!(e.starts_with("compiled network: "), "{e}");
}

/// The first layer of `c` with a prepared workload that `pick` accepts: its index and the
/// blob's bytes.
fn prepared_where(c: &CompiledNetwork, pick: impl Fn(&[u8]) -> bool) -> (usize, Vec<u8>) {
    (0..c.network().layers().len())
        .find_map(|i| {
            let blob = c.prepared(i).0?.bytes.bytes();
            pick(blob).then(|| (i, blob.to_vec()))
        })
        .expect("a prepared workload")
}

/// `bytes` with the blob `old` replaced by `new` (as long), checksums made valid.
fn replace_blob(bytes: &[u8], old: &[u8], new: &[u8]) -> Vec<u8> {
    forge(bytes, SectionKind::Blobs, |b| {
        let at = b.windows(old.len()).position(|w| w == old).unwrap();
        b[at..at + old.len()].copy_from_slice(new);
    })
}

/// `bytes` with layer `layer`'s prepared workload sealed again, as it is now, with the
/// tests' key (what its compiler used).
fn reseal(bytes: &[u8], layer: usize) -> Vec<u8> {
    let c = CompiledNetwork::from_bytes(bytes).unwrap();
    let blob = c.prepared(layer).0.unwrap();
    let key = SealKey::read(&SealKeySource::User.path().unwrap()).unwrap();
    let seal = key.seal(&Prepared {
        network: c.network(),
        layer,
        backend: "CpuFast",
        version: blob.version,
        blob: blob.bytes.bytes(),
    });
    forge(bytes, SectionKind::Seals, |s| {
        for entry in s.chunks_exact_mut(40) {
            if u32::from_le_bytes(entry[..4].try_into().unwrap()) as usize == layer {
                entry[8..].copy_from_slice(&seal);
            }
        }
    })
}

/// `backplane run FILE` with CpuFast from `plugins`, with the seal key `key` (`None`: the
/// tests' own): success, stderr and the output's bytes.
fn run_compiled(plugins: &PluginDir, bytes: &[u8], key: Option<&Path>) -> (String, Vec<u8>) {
    let work = tempfile::tempdir().unwrap();
    let (file, out) = (work.path().join("m.bpn"), work.path().join("out"));
    std::fs::write(&file, bytes).unwrap();
    let args = [
        "run",
        file.to_str().unwrap(),
        "--path",
        plugins.as_str(),
        "--output-dir",
        out.to_str().unwrap(),
    ];
    let (ok, _, err) = match key {
        None => cli(&args),
        Some(key) => cli_with(&args, &[("BACKPLANE_SEAL_KEY", key.as_os_str())]),
    };
    assert!(ok, "{err}");
    (err, output(&out))
}

/// Issue 40, finding 3: one prepared weight of the first fused convolution changed (its
/// first float, right after the blob's header and first entry's header) and every checksum
/// made valid again. CpuFast would accept it (tag, dimensions and length fit) and compute
/// with the forged weight; the blob's seal no longer holds, so the host never hands it over:
/// the workload is made from the layer's constants and the output is the unforged file's,
/// bit for bit. The same for a constant changed under a blob made from it (that layer's
/// workload is made from the constant the file shows), and for a file sealed with another
/// key (none of its blobs is used).
#[test]
fn a_forged_prepared_weight_changes_nothing() {
    let (plugins, bytes) = compiled_bytes();
    let (err, good) = run_compiled(&plugins, &bytes, None);
    assert!(!err.contains("prepared workloads are not used"), "{err}");
    let c = CompiledNetwork::from_bytes(&bytes).unwrap();
    // A blob: "CFPW", its entry count, one entry header (56 bytes), the first entry's floats.
    let (i, blob) = prepared_where(&c, |b| u32::from_le_bytes(b[4..8].try_into().unwrap()) > 0);
    let name = &c.network().layers()[i].name;
    let mut weights = blob.clone();
    weights[64..68].copy_from_slice(&1000.0f32.to_le_bytes());
    let forged = replace_blob(&bytes, &blob, &weights);
    let (err, out) = run_compiled(&plugins, &forged, None);
    assert!(
        err.contains(&format!(
            "compiled network: 1 of its 54 prepared workloads are not used ({name}): their \
             seals do not hold under this runtime's key"
        )),
        "{err}"
    );
    assert_eq!(out, good);
    // The same weight changed and sealed again with the key: CpuFast computes with it (the
    // forgery above is one that matters).
    let (err, out) = run_compiled(&plugins, &reseal(&forged, i), None);
    assert!(!err.contains("are not used"), "{err}");
    assert_ne!(out, good);
    // A constant the prepared weights were made from, changed: that blob is not used, the
    // layer computes with the constant the file shows (so the answer differs).
    let constant = c.network().layers()[i].inputs[1].layer;
    let value = c.network().layers()[constant]
        .constant_bytes()
        .unwrap()
        .to_vec();
    let mut changed = value.clone();
    changed[..4].copy_from_slice(&1000.0f32.to_le_bytes());
    let forged = forge(&bytes, SectionKind::Constants, |b| {
        let at = b.windows(value.len()).position(|w| w == value).unwrap();
        b[at..at + value.len()].copy_from_slice(&changed);
    });
    let (err, out) = run_compiled(&plugins, &forged, None);
    assert!(
        err.contains(&format!(
            "compiled network: 1 of its 54 prepared workloads are not used ({name})"
        )),
        "{err}"
    );
    assert_ne!(out, good);
    // Another key: nothing prepared is used, the answer is the same.
    let work = tempfile::tempdir().unwrap();
    let other = work.path().join("other.key");
    let (err, out) = run_compiled(&plugins, &bytes, Some(&other));
    assert!(
        err.contains("compiled network: its 54 prepared workloads are not used (no seal key: "),
        "{err}"
    );
    assert_eq!(out, good);
    std::fs::write(&other, format!("{}\n", "5a".repeat(32))).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (err, out) = run_compiled(&plugins, &bytes, Some(&other));
    assert!(
        err.contains("compiled network: 54 of its 54 prepared workloads are not used"),
        "{err}"
    );
    assert_eq!(out, good);
}

/// Loaded from a file, a session runs like the ONNX model's, its profile names the ONNX
/// nodes of each fused layer, and it refuses an input of another shape.
#[test]
fn a_compiled_session_profiles_fused_layers_with_their_nodes() {
    let (plugins, bytes) = compiled_bytes();
    let s = session(&plugins, &bytes).unwrap();
    assert_eq!(s.inputs()[0].name, "x");
    assert_eq!(s.inputs()[0].dims_text(), "[1, 3, 48, 192]");
    let plan = s.current().unwrap();
    plan.set_profiling(true);
    let info = TensorInfo::new(&[1, 3, 48, 192], DataType::Float32);
    let x: Vec<u8> = (0..3 * 48 * 192)
        .flat_map(|i| ((i % 97) as f32 / 97.0).to_le_bytes())
        .collect();
    let inputs = [InputTensor {
        name: "x",
        info: &info,
        data: &x,
    }];
    let out = s.run_alloc(&inputs).unwrap();
    assert_eq!(out[0].info.shape.as_slice(), &[1, 2]);
    let profile = plan.profile().unwrap();
    let conv0 = profile
        .iter()
        .find(|p| p.layer == "Conv@0+bn+hardswish")
        .unwrap();
    // The ONNX nodes: the convolution, its batch norm, and the four nodes of the HardSwish
    // the host's rewrite folded (`Add`, `Clip`, `Mul`, `Div`) before CpuFast fused the three.
    assert_eq!(
        conv0.origins,
        [
            "Conv@0",
            "BatchNormalization@0",
            "Add@0",
            "Clip@0",
            "Mul@0",
            "Div@0"
        ]
        .map(String::from)
    );
    let other = TensorInfo::new(&[1, 3, 48, 96], DataType::Float32);
    let e = s
        .run_alloc(&[InputTensor {
            name: "x",
            info: &other,
            data: &x[..3 * 48 * 96 * 4],
        }])
        .unwrap_err();
    assert!(e.to_string().contains("x"), "{e}");
}

/// A compiled network file truncated, or written over in place, while a session holds it
/// (issue 40): the session computes what it computed before (it read the file into its own
/// memory: a mapping would fault on the lost pages, SIGBUS, or show the new bytes).
#[test]
fn a_file_changed_under_a_live_session_changes_nothing() {
    let (plugins, bytes) = compiled_bytes();
    let work = tempfile::tempdir().unwrap();
    let bpn = work.path().join("cls.bpn");
    std::fs::write(&bpn, &bytes).unwrap();
    let runtime = Arc::new(Runtime::new(
        CreationOptions::default().with_dynamic_backends_path(plugins.path()),
    ));
    let s = Session::load(runtime, &bpn, &SessionOptions::default()).unwrap();
    let info = TensorInfo::new(&[1, 3, 48, 192], DataType::Float32);
    let x: Vec<u8> = (0..3 * 48 * 192)
        .flat_map(|i| ((i % 89) as f32 / 89.0 - 0.3).to_le_bytes())
        .collect();
    let run = || {
        let out = s
            .run_alloc(&[InputTensor {
                name: "x",
                info: &info,
                data: &x,
            }])
            .unwrap();
        out[0].data.clone()
    };
    let before = run();
    // Every byte of the file written over in place (same inode, same length).
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(&bpn).unwrap();
        f.write_all(&vec![0x5a; bytes.len()]).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(run(), before);
    // Then truncated to nothing.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&bpn)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(run(), before);
    assert_ne!(before, vec![0u8; before.len()]);
}
