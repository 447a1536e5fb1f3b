use backplane_api::DataType;

use super::*;

/// Everything a payload can hold, written and read in one order (a stand-in for a plugin's
/// own description of a fused layer).
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    tag: u8,
    flag: bool,
    slots: [u32; 3],
    epsilon: f32,
    padding: Padding2d,
    layout: DataLayout,
    activation: Option<ActivationDescriptor>,
    pool: Option<Pooling2dDescriptor>,
}

const VERSION: u8 = 3;

fn sample() -> Sample {
    Sample {
        tag: 7,
        flag: true,
        slots: [1, 2, 0x0102_0304],
        epsilon: 1e-5,
        padding: Padding2d {
            left: 1,
            right: 2,
            top: 3,
            bottom: 4,
        },
        layout: DataLayout::Nhwc,
        activation: Some(ActivationDescriptor {
            function: ActivationFunction::HardSwish,
            a: 0.5,
            b: -1.0,
        }),
        pool: Some(Pooling2dDescriptor {
            pool_type: PoolingType::Average,
            padding: Padding2d::default(),
            pool_width: 2,
            pool_height: 3,
            stride_x: 2,
            stride_y: 1,
            rounding: OutputRounding::Ceiling,
            count_include_pad: true,
            layout: DataLayout::Nchw,
        }),
    }
}

fn encode(s: &Sample) -> Vec<u8> {
    let mut w = PayloadWriter::new(VERSION);
    w.u8(s.tag);
    w.flag(s.flag);
    s.slots.iter().for_each(|&v| w.u32(v));
    w.f32(s.epsilon);
    w.padding(s.padding);
    w.layout(s.layout);
    w.option(s.activation.as_ref(), |w, a| w.activation(a));
    w.option(s.pool.as_ref(), |w, p| w.pooling(p));
    w.finish()
}

fn decode(bytes: &[u8]) -> Result<Sample, String> {
    let mut r = PayloadReader::new(bytes, VERSION)?;
    let s = Sample {
        tag: r.u8()?,
        flag: r.flag()?,
        slots: r.u32s()?,
        epsilon: r.f32()?,
        padding: r.padding()?,
        layout: r.layout()?,
        activation: r.option(PayloadReader::activation)?,
        pool: r.option(PayloadReader::pooling)?,
    };
    r.finish()?;
    Ok(s)
}

/// The byte offsets of the sample's encoding, counted by hand: version 0, tag 1, flag 2,
/// slots 3..15, epsilon 15..19, padding 19..35, layout 35, activation flag 36, function 37,
/// a and b 38..46, pooling flag 46, pooling type 47, its padding 48..64, sizes and strides
/// 64..80, rounding 80, `count_include_pad` 81, layout 82; 83 bytes.
const LEN: usize = 83;
const FLAGS: [usize; 4] = [2, 36, 46, 81];

#[test]
fn round_trip_at_the_documented_offsets() {
    let s = sample();
    let bytes = encode(&s);
    assert_eq!(bytes.len(), LEN);
    assert_eq!(bytes[0], VERSION);
    assert_eq!(&bytes[11..15], &[4, 3, 2, 1]);
    assert_eq!(bytes[35], 1, "NHWC");
    assert_eq!(bytes[37], ActivationFunction::HardSwish as u8);
    assert_eq!(bytes[47], 1, "average");
    assert_eq!(&bytes[64..68], &[2, 0, 0, 0], "pool width");
    assert_eq!(bytes[80], 1, "ceiling");
    assert_eq!(bytes[82], 0, "NCHW");
    assert_eq!(decode(&bytes), Ok(s.clone()));
    let bare = Sample {
        activation: None,
        pool: None,
        ..s
    };
    let bytes = encode(&bare);
    assert_eq!(bytes.len(), 38);
    assert_eq!(decode(&bytes), Ok(bare));
}

/// Every truncation of a valid payload is refused.
#[test]
fn every_truncation_is_an_error() {
    let bytes = encode(&sample());
    assert_eq!(decode(&[]), Err("the payload is truncated".to_owned()));
    for n in 0..bytes.len() {
        assert!(decode(&bytes[..n]).is_err(), "truncated at {n}");
    }
}

/// A flag or a tag byte changed to a value it cannot take is an error; any byte changed to any
/// value is at worst an error, never a panic.
#[test]
fn changed_bytes_are_errors_never_panics() {
    let bytes = encode(&sample());
    for at in FLAGS {
        let mut v = bytes.clone();
        v[at] = 2;
        assert_eq!(decode(&v), Err("2 is not a flag".to_owned()), "at {at}");
    }
    let refused = |at: usize, value: u8| {
        let mut v = bytes.clone();
        v[at] = value;
        decode(&v).unwrap_err()
    };
    assert_eq!(refused(0, 2), "payload version 2, this build reads 3");
    assert_eq!(refused(35, 2), "unknown layout 2");
    assert_eq!(refused(82, 9), "unknown layout 9");
    assert_eq!(
        refused(37, ActivationFunction::ALL.len() as u8),
        format!(
            "unknown activation function {}",
            ActivationFunction::ALL.len()
        )
    );
    assert_eq!(refused(47, 2), "unknown pooling type 2");
    assert_eq!(refused(80, 2), "unknown output rounding 2");
    // An optional part's flag cleared: its bytes are left over.
    assert_eq!(refused(46, 0), "36 trailing bytes");
    // An absent part's flag set: the part is missing.
    let bare = encode(&Sample {
        activation: None,
        pool: None,
        ..sample()
    });
    for at in [36, 37] {
        let mut v = bare.clone();
        v[at] = 1;
        assert_eq!(
            decode(&v),
            Err("the payload is truncated".to_owned()),
            "at {at}"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(decode(&longer), Err("1 trailing bytes".to_owned()));
    for at in 0..bytes.len() {
        for value in 0..=u8::MAX {
            let mut v = bytes.clone();
            v[at] = value;
            let _ = decode(&v);
            let _ = decode(&v[..at]);
        }
    }
}

#[test]
fn slots_are_in_range_and_constant_when_asked() {
    let f = |shape: &[u32]| TensorInfo::new(shape, DataType::Float32);
    let inputs = [f(&[1, 4]), f(&[4]).constant(), f(&[4])];
    assert_eq!(slot(&inputs, 1, true), Ok(&inputs[1]));
    assert_eq!(slot(&inputs, 2, false), Ok(&inputs[2]));
    assert_eq!(
        slot(&inputs, 2, true),
        Err("parameter slot 2 is not constant".to_owned())
    );
    for s in [0, 3, u32::MAX] {
        assert_eq!(
            slot(&inputs, s, false),
            Err(format!(
                "parameter slot {s} is not one of the 2 inputs after the data input"
            ))
        );
    }
    assert_eq!(
        slot(&[], 1, false),
        Err("parameter slot 1 is not one of the 0 inputs after the data input".to_owned())
    );
}

#[test]
fn precompiled_names_its_backend() {
    let LayerDescriptor::PreCompiled(p) = precompiled("Acme", "Conv2dRelu", vec![1, 2]) else {
        panic!("not PreCompiled");
    };
    assert_eq!(
        (
            p.backend.as_str(),
            p.operation.as_str(),
            p.payload.as_slice()
        ),
        ("Acme", "Conv2dRelu", &[1u8, 2][..])
    );
}
