//! The main job's network demo (run by `scripts/demo.sh`): discover backends the usual way
//! (`DYNAMIC_BACKEND_PATHS`), build a small residual CNN, prefer every dynamic backend over
//! CpuRef, and show which backend runs each layer and why, the result and the latency.

use std::time::Instant;

use backplane::{
    CreationOptions, InputTensor, NetworkBuilder, OptimizerOptions, OutputTensor, Runtime,
};
use backplane_api::{
    ActivationDescriptor, ActivationFunction, BinaryOperation, ConstTensor,
    Convolution2dDescriptor, DataType, FlattenDescriptor, FullyConnectedDescriptor,
    LayerDescriptor, OutputRounding, Padding2d, Pooling2dDescriptor, PoolingType,
    SoftmaxDescriptor, TensorInfo,
};

fn lcg(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.5
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let rt = Runtime::new(CreationOptions::default());
    let mut preferences: Vec<&str> = rt
        .registry()
        .ids()
        .into_iter()
        .filter(|id| *id != "CpuRef")
        .collect();
    preferences.push("CpuRef");
    println!(
        "registered backends: {:?}; preferences: {preferences:?}",
        rt.registry().ids()
    );

    let input = TensorInfo::new(&[1, 3, 16, 16], DataType::Float32);
    let mut n = NetworkBuilder::new();
    let x = n.add_input("image", input.clone())?;
    let pad = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };
    let conv = |n: &mut NetworkBuilder, name: &str, x, cin: u32, seed| -> anyhow::Result<_> {
        let w = n.add_constant(
            &format!("{name}.weight"),
            ConstTensor::from_f32(&[8, cin, 3, 3], &lcg(72 * cin as usize, seed)),
        )?;
        let b = n.add_constant(
            &format!("{name}.bias"),
            ConstTensor::from_f32(&[8], &lcg(8, seed + 1)),
        )?;
        let d = Convolution2dDescriptor {
            padding: pad,
            bias_enabled: true,
            ..Default::default()
        };
        Ok(n.add_layer(name, LayerDescriptor::Convolution2d(d), &[x, w, b])?)
    };
    let relu = LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    });
    let c1 = conv(&mut n, "conv1", x, 3, 1)?;
    let r1 = n.add_layer("relu1", relu.clone(), &[c1])?;
    let c2 = conv(&mut n, "conv2", r1, 8, 3)?;
    let r2 = n.add_layer("relu2", relu, &[c2])?;
    let sum = n.add_layer(
        "residual_add",
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
        &[r1, r2],
    )?;
    let pool = LayerDescriptor::Pooling2d(Pooling2dDescriptor {
        pool_type: PoolingType::Max,
        padding: Padding2d::default(),
        pool_width: 2,
        pool_height: 2,
        stride_x: 2,
        stride_y: 2,
        rounding: OutputRounding::Floor,
        count_include_pad: false,
        layout: Default::default(),
    });
    let p = n.add_layer("maxpool", pool, &[sum])?;
    let f = n.add_layer(
        "flatten",
        LayerDescriptor::Flatten(FlattenDescriptor { axis: 1 }),
        &[p],
    )?;
    let w = n.add_constant(
        "fc.weight",
        ConstTensor::from_f32(&[512, 10], &lcg(5120, 7)),
    )?;
    let b = n.add_constant("fc.bias", ConstTensor::from_f32(&[10], &lcg(10, 8)))?;
    let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
        bias_enabled: true,
        transpose_weights: false,
    });
    let logits = n.add_layer("fc", fc, &[f, w, b])?;
    let probs = n.add_layer(
        "softmax",
        LayerDescriptor::Softmax(SoftmaxDescriptor {
            beta: 1.0,
            axis: -1,
        }),
        &[logits],
    )?;
    n.add_output("probabilities", probs)?;
    let network = n.build()?;

    let optimized = rt.optimize(&network, &preferences, &OptimizerOptions::default())?;
    println!(
        "\nwhich backend runs each layer, and why:\n{}",
        optimized.explain()
    );
    let id = rt.load_network(&optimized)?;
    let data: Vec<u8> = lcg(768, 42).iter().flat_map(|v| v.to_le_bytes()).collect();
    let out_info = TensorInfo::new(&[1, 10], DataType::Float32);
    let mut out = vec![0u8; 40];
    let mut times = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        rt.enqueue(
            id,
            &[InputTensor {
                name: "image",
                info: &input,
                data: &data,
            }],
            &mut [OutputTensor {
                name: "probabilities",
                info: &out_info,
                data: &mut out,
            }],
        )?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    let probs: Vec<f32> = out
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    println!(
        "probabilities: {probs:.4?} (sum {:.6})",
        probs.iter().sum::<f32>()
    );
    let (peak, naive) = rt.network_memory(id).unwrap_or_default();
    println!(
        "latency: median {:.1} us over 20 runs; intermediate memory {peak} bytes planned vs {naive} naive",
        times[10]
    );
    rt.unload_network(id)?;
    Ok(())
}
