//! The fully connected kernel: `y [N × M] = x [N × K] · W + b` on the GEMM, with weights
//! `[K, M]`, or `[M, K]` when `transpose_weights` is set (then each output is a dot product
//! of two contiguous rows; nothing is transposed at run time).
//!
//! `x` has rank 2, as `backplane_api::shapes` defines the layer (a larger rank is refused
//! with its reason); the importer writes `x [B, S, K] · W` as a BatchMatMul, which
//! `batch_matmul.rs` runs as one GEMM of `B·S` rows, the same product.

use backplane_api::{FullyConnectedDescriptor, LayerDescriptor, TensorInfo, shapes};

use crate::gemm::{Accum, Operand, PACKED_MAX_ROWS, PackedB, gemm};
use crate::prepared::Prepared;

/// Everything about one fully connected layer fixed when it is created.
#[derive(Debug, Clone)]
pub(crate) struct FcGeometry {
    /// Rows of `x`.
    pub(crate) batch: usize,
    /// Input features.
    pub(crate) inputs: usize,
    /// Output features.
    pub(crate) outputs: usize,
    transpose_weights: bool,
}

impl FcGeometry {
    /// The geometry of `d` over `x` and `weights` into `y`, or why CpuFast cannot run it.
    pub(crate) fn new(
        d: &FullyConnectedDescriptor,
        x: &TensorInfo,
        weights: &TensorInfo,
        y: &TensorInfo,
    ) -> Result<Self, String> {
        let plain = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: false,
            ..d.clone()
        });
        let expected = shapes::output_shapes(&plain, &[x.clone(), weights.clone()])?;
        if [y.shape.to_vec()] != expected.as_slice() {
            return Err(format!(
                "fully connected output {:?} differs from the expected {:?}",
                y.shape.as_slice(),
                expected[0]
            ));
        }
        Ok(Self {
            batch: x.shape[0] as usize,
            inputs: x.shape[1] as usize,
            outputs: y.shape[1] as usize,
            transpose_weights: d.transpose_weights,
        })
    }

    /// Elements of the output.
    pub(crate) fn out_len(&self) -> usize {
        self.batch * self.outputs
    }

    /// `w` packed for [`run`](Self::run), when the batch is small enough for it to pay.
    pub(crate) fn pack(&self, w: &Prepared) -> Option<PackedB> {
        (self.batch <= PACKED_MAX_ROWS)
            .then(|| PackedB::of_prepared(self.inputs, self.outputs, w, self.transpose_weights))
    }

    /// [`pack`](Self::pack) of the weights whose f32 bytes are `bytes` (a constant).
    pub(crate) fn pack_bytes(&self, bytes: &[u8]) -> Option<PackedB> {
        let fits = bytes.len() == self.inputs * self.outputs * 4;
        (self.batch <= PACKED_MAX_ROWS && fits)
            .then(|| PackedB::of_bytes(self.inputs, self.outputs, bytes, self.transpose_weights))
    }

    /// `out = x · w + bias` (`packed`: `w` as [`pack`](Self::pack) made it).
    pub(crate) fn run(
        &self,
        x: &[f32],
        w: &[f32],
        packed: Option<&PackedB>,
        bias: Option<&[f32]>,
        out: &mut [f32],
        threads: usize,
    ) {
        let m = self.outputs;
        if m == 0 {
            return;
        }
        for row in out.chunks_exact_mut(m) {
            match bias {
                Some(b) => row.copy_from_slice(b),
                None => row.fill(0.0),
            }
        }
        match packed {
            Some(b) => b.multiply_add(self.batch, x, out, m, threads),
            None => gemm(
                self.batch,
                self.inputs,
                m,
                Operand::RowMajor(x),
                Operand::new(w, self.transpose_weights),
                out,
                m,
                threads,
                Accum::Add,
            ),
        }
    }
}
