//! The panels the product kernel reads (layouts in `kernels/mod.rs`): weights packed once when a
//! workload is created, activations packed per tile of [`NR`] columns.

use super::kernels::{Isa, MR, NR, interleave4};

/// Weights `[m, k]` packed in panels of [`MR`] rows as the kernels read them (`i8`), with
/// their zero point `zp` as stored there (a weight's value is `stored - zp`): `k` is padded
/// to a multiple of 4 with `zp` (value 0), and each row's sum of values is kept (for the
/// activation zero point's correction).
#[derive(Debug, Clone)]
pub(crate) struct PackedWeights {
    /// Rows (output channels).
    pub(crate) m: usize,
    /// Groups of four `k`.
    pub(crate) k4: usize,
    /// `ceil(m / MR)` panels of `k4 · MR · 4` bytes.
    pub(crate) panels: Vec<i8>,
    /// `Σ_k (w[r, k] - zp)` per row.
    pub(crate) sums: Vec<i32>,
    /// The zero point of the stored weights (0 for symmetric ones).
    pub(crate) zp: i8,
}

impl PackedWeights {
    /// Packs the `m × k` matrix whose element `(r, k)` is stored as `w(r, k)`, of zero point
    /// `zp`.
    pub(crate) fn new(m: usize, k: usize, zp: i8, w: impl Fn(usize, usize) -> i8) -> Self {
        let k4 = k.div_ceil(4);
        let panels_count = m.div_ceil(MR);
        let mut panels = vec![zp; panels_count * k4 * MR * 4];
        let mut sums = vec![0i32; m];
        // Panel by panel, `k` outer and the panel's rows inner: the writes stay within one
        // panel's group of four `k`, and the reads run along `MR` rows at once (consecutive
        // bytes of `[k, m]` weights, `MR` sequential streams of `[m, k]` ones).
        for (p, panel) in panels.chunks_exact_mut(k4 * MR * 4).enumerate() {
            let rows = (m - p * MR).min(MR);
            let sums = &mut sums[p * MR..p * MR + rows];
            for kk in 0..k {
                let group = &mut panel[(kk / 4) * MR * 4..][..MR * 4];
                for (rr, sum) in sums.iter_mut().enumerate() {
                    let v = w(p * MR + rr, kk);
                    group[rr * 4 + kk % 4] = v;
                    *sum += i32::from(v) - i32::from(zp);
                }
            }
        }
        Self {
            m,
            k4,
            panels,
            sums,
            zp,
        }
    }

    /// Packs the stored bytes `w` of an `m × k` matrix, each XORed with `flip` (0x80 turns
    /// `u8` storage into `i8` minus 128) and read as `i8` of zero point `zp` (after the flip):
    /// `w` holds it row-major (`[m, k]`, a convolution's or a transposed product's weights) or,
    /// with `transposed`, as its transpose (`[k, m]`, a `MatMul`'s). The same panels as
    /// [`PackedWeights::new`] with `|r, kk| (w[..] ^ flip) as i8`, in runs of bytes instead of
    /// one element at a time (ddddocr's `[1024, 8210]` weights).
    pub(crate) fn of_stored(
        m: usize,
        k: usize,
        zp: i8,
        flip: u8,
        w: &[u8],
        transposed: bool,
    ) -> Self {
        debug_assert_eq!(w.len(), m * k);
        let k4 = k.div_ceil(4);
        let panel_len = k4 * MR * 4;
        let mut panels = vec![zp; m.div_ceil(MR) * panel_len];
        let mut sums = vec![0i32; m];
        let value = |b: u8| i32::from((b ^ flip) as i8) - i32::from(zp);
        // The sums first, each a run of stored bytes (vectorised).
        if transposed {
            for row in w.chunks_exact(m.max(1)).take(k) {
                for (sum, &b) in sums.iter_mut().zip(row) {
                    *sum += value(b);
                }
            }
        } else {
            for (sum, row) in sums.iter_mut().zip(w.chunks_exact(k.max(1))) {
                *sum = row.iter().map(|&b| value(b)).sum();
            }
        }
        // Then each group of each panel (`MR` rows, four `k`): one `MR × 4` block of bytes,
        // gathered whole where the panel and the group are full (the last ones may not be).
        // Transposed weights are read in blocks of `BLOCK` panels, each stored row's run of
        // the block one cache line (64 bytes), before the next four rows.
        const BLOCK: usize = 8;
        let bytes: &mut [u8] = backplane_api::bytemuck::cast_slice_mut(&mut panels);
        let step = if transposed { BLOCK } else { 1 };
        for (b, block) in bytes.chunks_mut(step * panel_len).enumerate() {
            let r0 = b * step * MR;
            let full = block.len() == step * panel_len && r0 + step * MR <= m;
            for g in 0..k4 {
                let quads = (k - g * 4).min(4);
                // Element `(r, 4g + q)` of the matrix as stored.
                let at = |r: usize, q: usize| {
                    let kk = g * 4 + q;
                    if transposed { kk * m + r } else { r * k + kk }
                };
                if full && quads == 4 && transposed {
                    let runs: [[u8; BLOCK * MR]; 4] = std::array::from_fn(|q| {
                        w[at(r0, q)..][..BLOCK * MR]
                            .try_into()
                            .expect("a block's run")
                    });
                    for (p, panel) in block.chunks_exact_mut(panel_len).enumerate() {
                        let part: [[u8; MR]; 4] = std::array::from_fn(|q| {
                            runs[q][p * MR..][..MR].try_into().expect("a panel's run")
                        });
                        let group: [u8; MR * 4] =
                            std::array::from_fn(|i| part[i % 4][i / 4] ^ flip);
                        panel[g * MR * 4..][..MR * 4].copy_from_slice(&group);
                    }
                    continue;
                }
                if full && quads == 4 {
                    let runs: [[u8; 4]; MR] = std::array::from_fn(|rr| {
                        w[at(r0 + rr, 0)..][..4].try_into().expect("four bytes")
                    });
                    let group: [u8; MR * 4] = std::array::from_fn(|i| runs[i / 4][i % 4] ^ flip);
                    block[g * MR * 4..][..MR * 4].copy_from_slice(&group);
                    continue;
                }
                for (p, panel) in block.chunks_exact_mut(panel_len).enumerate() {
                    let first = r0 + p * MR;
                    for rr in 0..(m - first).min(MR) {
                        for q in 0..quads {
                            panel[g * MR * 4 + rr * 4 + q] = w[at(first + rr, q)] ^ flip;
                        }
                    }
                }
            }
        }
        Self {
            m,
            k4,
            panels,
            sums,
            zp,
        }
    }

    /// Panel `p` (rows `p · MR ..`).
    pub(crate) fn panel(&self, p: usize) -> &[i8] {
        &self.panels[p * self.k4 * MR * 4..][..self.k4 * MR * 4]
    }

    /// Number of panels.
    pub(crate) fn panel_count(&self) -> usize {
        self.m.div_ceil(MR)
    }
}

/// Packs columns `n0 .. n0 + cols` (`cols <= NR`) of the `k × _` row-major matrix `src`
/// (rows `ld` bytes apart) into `panel` (`k4 · NR · 4` bytes), each byte XORed with `flip`
/// (0x80 turns `i8` storage into `u8` plus 128). Rows past `k` and columns past `cols` hold
/// anything: the weights of those rows are 0 and those columns' results are not written.
#[allow(
    clippy::too_many_arguments,
    reason = "the matrix, its block and the panel"
)]
pub(crate) fn pack_rows(
    isa: Isa,
    src: &[u8],
    ld: usize,
    k: usize,
    n0: usize,
    cols: usize,
    flip: u8,
    panel: &mut [u8],
) {
    let k4 = k.div_ceil(4);
    let zero = [0u8; NR];
    let mut tmp = [[0u8; NR]; 4];
    for (g, group) in panel[..k4 * NR * 4].chunks_exact_mut(NR * 4).enumerate() {
        if cols < NR {
            for (r, t) in tmp.iter_mut().enumerate() {
                let kk = g * 4 + r;
                if kk < k {
                    t[..cols].copy_from_slice(&src[kk * ld + n0..kk * ld + n0 + cols]);
                }
            }
        }
        let rows: [&[u8; NR]; 4] = std::array::from_fn(|r| {
            let kk = g * 4 + r;
            if kk >= k {
                &zero
            } else if cols == NR {
                src[kk * ld + n0..kk * ld + n0 + NR]
                    .try_into()
                    .expect("NR bytes")
            } else {
                &tmp[r]
            }
        });
        interleave4(isa, rows, flip, group.try_into().expect("a group"));
    }
}

/// `sums[j] += Σ_{g < k4} Σ_q b[g · b_stride + 4 · j + q]`: the sums of a tile's activation
/// columns as the kernels read them (the panel or image of [`tile_acc`]), padding included,
/// for a weight zero point's share (`zp · Σ_k x[k, j]`, the weights' padding being `zp`).
///
/// [`tile_acc`]: super::kernels::tile_acc
pub(crate) fn column_sums(b: &[u8], k4: usize, b_stride: usize, sums: &mut [i32; NR]) {
    for g in 0..k4 {
        let group = &b[g * b_stride..][..NR * 4];
        for (s, x) in sums.iter_mut().zip(group.chunks_exact(4)) {
            let v = i32::from(x[0]) + i32::from(x[1]) + i32::from(x[2]) + i32::from(x[3]);
            *s = s.wrapping_add(v);
        }
    }
}

/// Packs rows `n0 .. n0 + cols` (`cols <= NR`) of the `_ × k` row-major matrix `src` as the
/// columns of `panel` (the activations of a fully connected layer: one row per sample).
pub(crate) fn pack_columns(
    src: &[u8],
    k: usize,
    n0: usize,
    cols: usize,
    flip: u8,
    panel: &mut [u8],
) {
    let k4 = k.div_ceil(4);
    let panel = &mut panel[..k4 * NR * 4];
    panel.fill(0);
    for j in 0..cols {
        let row = &src[(n0 + j) * k..(n0 + j + 1) * k];
        for (kk, &v) in row.iter().enumerate() {
            panel[((kk / 4) * NR + j) * 4 + kk % 4] = v ^ flip;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both stored layouts, `u8` and `i8` storage, sizes that fill no panel or group
    /// exactly, against [`PackedWeights::new`] reading element by element.
    #[test]
    fn stored_weights_pack_as_element_by_element() {
        for (m, k) in [(9, 5), (8, 4), (3, 7), (17, 13), (1, 1), (150, 9)] {
            let w: Vec<u8> = (0..m * k).map(|i| (i * 97 % 251) as u8).collect();
            for (flip, zp) in [(0u8, 0i8), (0x80, -3), (0, 5)] {
                for transposed in [false, true] {
                    let at = |r: usize, kk: usize| if transposed { kk * m + r } else { r * k + kk };
                    let want = PackedWeights::new(m, k, zp, |r, kk| (w[at(r, kk)] ^ flip) as i8);
                    let got = PackedWeights::of_stored(m, k, zp, flip, &w, transposed);
                    let case = format!("{m}x{k} flip {flip} zp {zp} transposed {transposed}");
                    assert_eq!(got.panels, want.panels, "{case}");
                    assert_eq!(got.sums, want.sums, "{case}");
                }
            }
        }
    }

    #[test]
    fn weights_and_rows_pack_into_groups_of_four() {
        let w = PackedWeights::new(9, 5, 0, |r, k| (r * 10 + k) as i8);
        assert_eq!((w.k4, w.panel_count()), (2, 2));
        assert_eq!(w.sums[1], 10 * 5 + 10);
        let p0 = w.panel(0);
        assert_eq!(&p0[4..8], &[10, 11, 12, 13]); // row 1, k 0..4
        assert_eq!(&p0[MR * 4 + 4..MR * 4 + 8], &[14, 0, 0, 0]); // row 1, k 4, padding
        assert_eq!(&w.panel(1)[0..4], &[80, 81, 82, 83]); // row 8
        assert!(w.panel(1)[4..MR * 4].iter().all(|&v| v == 0));

        let src: Vec<u8> = (0..3 * 40).map(|v| v as u8).collect();
        let mut panel = vec![9u8; NR * 4];
        for isa in Isa::ALL {
            if !isa.available() {
                continue;
            }
            pack_rows(isa, &src, 40, 3, 2, 5, 0x80, &mut panel);
            assert_eq!(&panel[..3], &[2 ^ 0x80, 42 ^ 0x80, 82 ^ 0x80]);
            assert_eq!(&panel[4 * 4..4 * 4 + 3], &[6 ^ 0x80, 46 ^ 0x80, 86 ^ 0x80]);
            pack_rows(isa, &src, 40, 3, 1, NR, 0, &mut panel);
            for j in 0..NR {
                assert_eq!(
                    &panel[j * 4..j * 4 + 3],
                    &[1 + j as u8, 41 + j as u8, 81 + j as u8]
                );
            }
        }
    }
}
