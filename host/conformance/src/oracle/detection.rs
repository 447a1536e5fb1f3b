//! The detection layers (Backend API 1.5), from their definitions: `NonMaxSuppression`'s
//! greedy selection per batch and class, its result laid out as the API says; `RoiAlign`'s
//! bins, each the mean (or the largest weighted corner) of bilinear samples on a regular grid.

use backplane_api::{NonMaxSuppressionDescriptor, RoiAlignDescriptor, RoiPooling};

use super::Tensor;

/// A box's extent along both axes: `(lowest y, lowest x, highest y, highest x)`.
fn extent(b: &[f64], center_point_box: bool) -> [f64; 4] {
    if center_point_box {
        let [xc, yc, w, h] = [b[0], b[1], b[2], b[3]];
        [yc - h / 2.0, xc - w / 2.0, yc + h / 2.0, xc + w / 2.0]
    } else {
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    }
}

/// The intersection over union of two extents; 0 when they do not overlap or either is empty.
fn iou(a: [f64; 4], b: [f64; 4]) -> f64 {
    let h = a[2].min(b[2]) - a[0].max(b[0]);
    let w = a[3].min(b[3]) - a[1].max(b[1]);
    let area = |e: [f64; 4]| (e[2] - e[0]) * (e[3] - e[1]);
    if h <= 0.0 || w <= 0.0 || area(a) <= 0.0 || area(b) <= 0.0 {
        return 0.0;
    }
    let inter = h * w;
    inter / (area(a) + area(b) - inter)
}

/// `NonMaxSuppression` of `boxes` `[b, n, 4]` and `scores` `[b, c, n]`.
pub fn non_max_suppression(
    boxes: &Tensor,
    scores: &Tensor,
    d: &NonMaxSuppressionDescriptor,
) -> Result<Tensor, String> {
    let (&[batches, n, 4], &[_, classes, _]) = (boxes.shape.as_slice(), scores.shape.as_slice())
    else {
        return Err("boxes must be [b, n, 4] and scores [b, c, n]".into());
    };
    let limit = (d.max_output_boxes_per_class as usize).min(n);
    let width = batches * classes * limit;
    let mut kept_all: Vec<[usize; 3]> = Vec::new();
    for b in 0..batches {
        for c in 0..classes {
            let score = |i: usize| scores.data[(b * classes + c) * n + i];
            let bx = |i: usize| extent(&boxes.data[(b * n + i) * 4..][..4], d.center_point_box);
            // Candidates by score, highest first; the lower index first among equals.
            let mut candidates: Vec<usize> = (0..n)
                .filter(|&i| score(i) > f64::from(d.score_threshold))
                .collect();
            candidates.sort_by(|&i, &j| score(j).partial_cmp(&score(i)).unwrap().then(i.cmp(&j)));
            let mut kept: Vec<usize> = Vec::new();
            for i in candidates {
                if kept.len() < limit
                    && kept
                        .iter()
                        .all(|&k| iou(bx(i), bx(k)) <= f64::from(d.iou_threshold))
                {
                    kept.push(i);
                    kept_all.push([b, c, i]);
                }
            }
        }
    }
    let mut out = Tensor::zeros(&[4, width]);
    out.data[0] = kept_all.len() as f64;
    for (col, triple) in kept_all.iter().enumerate() {
        for (row, &v) in triple.iter().enumerate() {
            out.data[(row + 1) * width + col] = v as f64;
        }
    }
    Ok(out)
}

/// The value of plane `p` (`h x w`, row-major) at real coordinates `(y, x)` by `RoiAlign`'s
/// sampling rule, as the four weighted corner values (all 0 outside `[-1, h] x [-1, w]`).
fn weighted_corners(p: &[f64], h: usize, w: usize, y: f64, x: f64) -> [f64; 4] {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return [0.0; 4];
    }
    let clamp = |v: f64, size: usize| -> (usize, usize, f64) {
        let v = v.max(0.0);
        let low = v.floor() as usize;
        if low >= size - 1 {
            (size - 1, size - 1, 0.0)
        } else {
            (low, low + 1, v - low as f64)
        }
    };
    let (y0, y1, ly) = clamp(y, h);
    let (x0, x1, lx) = clamp(x, w);
    [
        (1.0 - ly) * (1.0 - lx) * p[y0 * w + x0],
        (1.0 - ly) * lx * p[y0 * w + x1],
        ly * (1.0 - lx) * p[y1 * w + x0],
        ly * lx * p[y1 * w + x1],
    ]
}

/// `RoiAlign` of `x` `[n, c, h, w]` over `rois` `[r, 4]` from batches `batch` `[r]`.
pub fn roi_align(
    x: &Tensor,
    rois: &Tensor,
    batch: &Tensor,
    d: &RoiAlignDescriptor,
) -> Result<Tensor, String> {
    let &[n, c, h, w] = x.shape.as_slice() else {
        return Err("x must be [n, c, h, w]".into());
    };
    let r = batch.data.len();
    let (oh, ow) = (d.output_height as usize, d.output_width as usize);
    let mut out = Tensor::zeros(&[r, c, oh, ow]);
    let offset = if d.half_pixel { 0.5 } else { 0.0 };
    let scale = f64::from(d.spatial_scale);
    for region in 0..r {
        let bi = batch.data[region];
        if bi < 0.0 || bi >= n as f64 {
            return Err(format!("batch index {bi} outside [0, {n})"));
        }
        let bi = bi as usize;
        let coord = |k: usize| rois.data[region * 4 + k] * scale - offset;
        let (x_start, y_start) = (coord(0), coord(1));
        let (mut width, mut height) = (coord(2) - x_start, coord(3) - y_start);
        if !d.half_pixel {
            width = width.max(1.0);
            height = height.max(1.0);
        }
        let (bin_h, bin_w) = (height / oh as f64, width / ow as f64);
        let grid_h = if d.sampling_ratio > 0 {
            d.sampling_ratio as usize
        } else {
            bin_h.ceil() as usize
        };
        let grid_w = if d.sampling_ratio > 0 {
            d.sampling_ratio as usize
        } else {
            bin_w.ceil() as usize
        };
        for ch in 0..c {
            let plane = &x.data[(bi * c + ch) * h * w..][..h * w];
            for py in 0..oh {
                for px in 0..ow {
                    let mut sum = 0.0;
                    let mut largest: Option<f64> = None;
                    for gy in 0..grid_h {
                        for gx in 0..grid_w {
                            let y =
                                y_start + bin_h * (py as f64 + (gy as f64 + 0.5) / grid_h as f64);
                            let xx =
                                x_start + bin_w * (px as f64 + (gx as f64 + 0.5) / grid_w as f64);
                            let corners = weighted_corners(plane, h, w, y, xx);
                            sum += corners.iter().sum::<f64>();
                            let top = corners.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            largest = Some(largest.map_or(top, |l| l.max(top)));
                        }
                    }
                    let count = (grid_h * grid_w).max(1) as f64;
                    out.data[((region * c + ch) * oh + py) * ow + px] = match d.pooling {
                        RoiPooling::Average => sum / count,
                        RoiPooling::Max => largest.unwrap_or(0.0),
                    };
                }
            }
        }
    }
    Ok(out)
}
