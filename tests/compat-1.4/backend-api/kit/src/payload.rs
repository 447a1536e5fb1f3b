//! The binary form of a backend's own `PreCompiled` layers: a [`PayloadWriter`] that a
//! plugin's `optimize_subgraph` uses to describe a fused layer, and a [`PayloadReader`] for
//! when the payload comes back.
//!
//! A payload comes back from the host when the workload is created, and the host may have
//! read it from a compiled network file: it is untrusted input. The reader checks the length
//! before every read, refuses a flag that is neither 0 nor 1, an unknown layout, activation
//! function, pooling type or rounding, a version other than the one the plugin reads, and
//! (in [`PayloadReader::finish`]) any byte left over. Every error is a sentence (`String`),
//! never a panic. What the values mean (whether a slot is in range, whether shapes fit) is
//! the plugin's to check once the payload is read; [`slot`] helps with the slots.
//!
//! Encoding, little-endian: `u8`, a flag as one byte 0 or 1, `u32` and `f32` as four bytes,
//! an optional value as a flag then the value when 1, [`Padding2d`] as left, right, top,
//! bottom (`u32` each), [`DataLayout`] as one byte (0 NCHW, 1 NHWC), an
//! [`ActivationDescriptor`] as the function's index in [`ActivationFunction::ALL`] (`u8`)
//! then `a` and `b` (`f32`), a [`Pooling2dDescriptor`] as its type (`u8`: 0 max, 1 average),
//! padding, pool width, pool height, stride x, stride y (`u32` each), rounding (`u8`: 0 floor,
//! 1 ceiling), `count_include_pad` (flag) and layout.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, DataLayout, LayerDescriptor, OutputRounding,
    Padding2d, Pooling2dDescriptor, PoolingType, PreCompiledDescriptor, TensorInfo,
};

/// The `PreCompiled` layer of backend `backend_id` that computes `operation` (a short name
/// for reports) as `payload` describes.
pub fn precompiled(backend_id: &str, operation: &str, payload: Vec<u8>) -> LayerDescriptor {
    LayerDescriptor::PreCompiled(PreCompiledDescriptor {
        backend: backend_id.into(),
        operation: operation.into(),
        payload: payload.into(),
    })
}

/// The input of parameter slot `s` of a fused layer given `inputs`: slot 0 is the layer's
/// data input, so a parameter is in `1..inputs.len()`; with `constant`, it must also be a
/// constant tensor.
///
/// # Errors
/// `parameter slot {s} is not one of the {n} inputs after the data input`, or with
/// `constant`, `parameter slot {s} is not constant`.
pub fn slot(inputs: &[TensorInfo], s: u32, constant: bool) -> Result<&TensorInfo, String> {
    match inputs.get(s as usize) {
        Some(t) if s != 0 && (t.is_constant || !constant) => Ok(t),
        Some(_) if s != 0 => Err(format!("parameter slot {s} is not constant")),
        _ => Err(format!(
            "parameter slot {s} is not one of the {} inputs after the data input",
            inputs.len().saturating_sub(1)
        )),
    }
}

/// Writes a payload: its version byte first, then what the plugin writes, in order.
#[derive(Debug, Clone)]
pub struct PayloadWriter(Vec<u8>);

impl PayloadWriter {
    /// A payload of format `version`.
    pub fn new(version: u8) -> Self {
        Self(vec![version])
    }

    /// Appends one byte.
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }

    /// Appends a flag: one byte, 0 or 1.
    pub fn flag(&mut self, v: bool) {
        self.u8(u8::from(v));
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends an `f32` (its bits).
    pub fn f32(&mut self, v: f32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends padding: left, right, top, bottom.
    pub fn padding(&mut self, p: Padding2d) {
        for v in [p.left, p.right, p.top, p.bottom] {
            self.u32(v);
        }
    }

    /// Appends a data layout.
    pub fn layout(&mut self, l: DataLayout) {
        self.u8(match l {
            DataLayout::Nchw => 0,
            DataLayout::Nhwc => 1,
        });
    }

    /// Appends an activation: the function's index in [`ActivationFunction::ALL`], `a`, `b`.
    pub fn activation(&mut self, a: &ActivationDescriptor) {
        self.u8(a.function as u8);
        self.f32(a.a);
        self.f32(a.b);
    }

    /// Appends a pooling descriptor (see the module documentation for the order).
    pub fn pooling(&mut self, p: &Pooling2dDescriptor) {
        self.u8(p.pool_type as u8);
        self.padding(p.padding);
        for v in [p.pool_width, p.pool_height, p.stride_x, p.stride_y] {
            self.u32(v);
        }
        self.u8(p.rounding as u8);
        self.flag(p.count_include_pad);
        self.layout(p.layout);
    }

    /// Appends an optional value: a flag, then the value as `f` writes it when present.
    pub fn option<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut Self, T)) {
        self.flag(v.is_some());
        if let Some(v) = v {
            f(self, v);
        }
    }

    /// The payload.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads an untrusted payload; every read checks the length first.
#[derive(Debug, Clone)]
pub struct PayloadReader<'a>(&'a [u8]);

impl<'a> PayloadReader<'a> {
    /// A reader of `bytes`, whose first byte must be `version`.
    ///
    /// # Errors
    /// `the payload is truncated` for an empty payload, or `payload version {v}, this build
    /// reads {version}`.
    pub fn new(bytes: &'a [u8], version: u8) -> Result<Self, String> {
        let mut r = Self(bytes);
        let v = r.u8()?;
        if v != version {
            return Err(format!("payload version {v}, this build reads {version}"));
        }
        Ok(r)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| "the payload is truncated".to_owned())?;
        self.0 = rest;
        Ok(*head)
    }

    /// Reads one byte.
    ///
    /// # Errors
    /// `the payload is truncated`.
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }

    /// Reads a flag.
    ///
    /// # Errors
    /// When truncated, or `{v} is not a flag` for a byte other than 0 and 1.
    pub fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(format!("{v} is not a flag")),
        }
    }

    /// Reads a `u32`.
    ///
    /// # Errors
    /// `the payload is truncated`.
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    /// Reads `N` `u32`s.
    ///
    /// # Errors
    /// `the payload is truncated`.
    pub fn u32s<const N: usize>(&mut self) -> Result<[u32; N], String> {
        let mut v = [0; N];
        for x in &mut v {
            *x = self.u32()?;
        }
        Ok(v)
    }

    /// Reads an `f32`.
    ///
    /// # Errors
    /// `the payload is truncated`.
    pub fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.take()?))
    }

    /// Reads padding (left, right, top, bottom).
    ///
    /// # Errors
    /// `the payload is truncated`.
    pub fn padding(&mut self) -> Result<Padding2d, String> {
        let [left, right, top, bottom] = self.u32s()?;
        Ok(Padding2d {
            left,
            right,
            top,
            bottom,
        })
    }

    /// Reads a data layout.
    ///
    /// # Errors
    /// When truncated, or `unknown layout {v}`.
    pub fn layout(&mut self) -> Result<DataLayout, String> {
        match self.u8()? {
            0 => Ok(DataLayout::Nchw),
            1 => Ok(DataLayout::Nhwc),
            v => Err(format!("unknown layout {v}")),
        }
    }

    /// Reads an activation.
    ///
    /// # Errors
    /// When truncated, or `unknown activation function {f}` for an index past
    /// [`ActivationFunction::ALL`].
    pub fn activation(&mut self) -> Result<ActivationDescriptor, String> {
        let f = self.u8()?;
        let function = *ActivationFunction::ALL
            .get(usize::from(f))
            .ok_or_else(|| format!("unknown activation function {f}"))?;
        Ok(ActivationDescriptor {
            function,
            a: self.f32()?,
            b: self.f32()?,
        })
    }

    /// Reads a pooling descriptor.
    ///
    /// # Errors
    /// When truncated, `unknown pooling type {t}`, `unknown output rounding {v}`, a bad flag
    /// or layout.
    pub fn pooling(&mut self) -> Result<Pooling2dDescriptor, String> {
        let pool_type = match self.u8()? {
            0 => PoolingType::Max,
            1 => PoolingType::Average,
            t => return Err(format!("unknown pooling type {t}")),
        };
        let padding = self.padding()?;
        let [pool_width, pool_height, stride_x, stride_y] = self.u32s()?;
        let rounding = match self.u8()? {
            0 => OutputRounding::Floor,
            1 => OutputRounding::Ceiling,
            v => return Err(format!("unknown output rounding {v}")),
        };
        Ok(Pooling2dDescriptor {
            pool_type,
            padding,
            pool_width,
            pool_height,
            stride_x,
            stride_y,
            rounding,
            count_include_pad: self.flag()?,
            layout: self.layout()?,
        })
    }

    /// Reads an optional value: a flag, then the value as `f` reads it when the flag is set.
    ///
    /// # Errors
    /// A bad flag, or `f`'s error.
    pub fn option<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        if self.flag()? {
            f(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Ends the reading: nothing may follow.
    ///
    /// # Errors
    /// `{n} trailing bytes`.
    pub fn finish(self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes", self.0.len()))
        }
    }
}

#[cfg(test)]
#[path = "payload_tests.rs"]
mod tests;
