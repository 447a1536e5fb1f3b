//! `GridSample` (opset 16 and later, 2-D and 3-D) as gathers at computed positions: each
//! output position's grid coordinates are denormalised to input positions (`align_corners`
//! either way), rounded for `nearest` (halves to even), moved inside the input for `border`
//! (clamped) and `reflection` (reflected at the borders until inside) padding; then each tap of
//! the interpolation (1 for nearest, 2 per axis for linear, 4 per axis for cubic with `A` =
//! -0.75) is gathered (`GatherElements` of the flattened input at `Σ index · stride`) and
//! weighted, a tap outside the input weighing 0 with `zeros` padding, clamped with `border`
//! and reflected with `reflection`.

use super::{Expansion, int, rearrange::first_output};
use crate::onnx::import::{
    Importer, NResult, Node,
    attributes::{attr_int, attr_string},
    invalid,
    queue::Pending,
    unsupported,
};

/// How a coordinate outside the input is brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Scalar constants of the input's type.
struct Scalars<'a> {
    like: &'a str,
    elem: i32,
}

impl Scalars<'_> {
    fn get(&self, e: &mut Expansion, v: f32) -> String {
        e.scalar_like(v, self.like, self.elem)
    }
}

/// `v` reflected into `[lo, hi]` (by the nearer border, as often as it takes).
fn reflect(e: &mut Expansion, s: &Scalars<'_>, v: &str, lo: f32, hi: f32) -> String {
    if hi <= lo {
        return s.get(e, lo.max(0.0));
    }
    let (l, h, range) = (s.get(e, lo), s.get(e, hi), s.get(e, hi - lo));
    let below = e.op("Less", &[v, &l], Vec::new());
    let above = e.op("Greater", &[v, &h], Vec::new());
    let dl = e.op("Sub", &[&l, v], Vec::new());
    let dh = e.op("Sub", &[v, &h], Vec::new());
    let dx = e.op("Where", &[&below, &dl, &dh], Vec::new());
    let q = e.op("Div", &[&dx, &range], Vec::new());
    let folds = e.op("Floor", &[&q], Vec::new());
    let span = e.op("Mul", &[&folds, &range], Vec::new());
    let r = e.op("Sub", &[&dx, &span], Vec::new());
    let two = s.get(e, 2.0);
    let parity = e.op("Mod", &[&folds, &two], vec![int("fmod", 1)]);
    let zero = s.get(e, 0.0);
    let even = e.op("Equal", &[&parity, &zero], Vec::new());
    let from_lo = e.op("Add", &[&l, &r], Vec::new());
    let from_hi = e.op("Sub", &[&h, &r], Vec::new());
    let below_v = e.op("Where", &[&even, &from_lo, &from_hi], Vec::new());
    let above_v = e.op("Where", &[&even, &from_hi, &from_lo], Vec::new());
    let inner = e.op("Where", &[&above, &above_v, v], Vec::new());
    e.op("Where", &[&below, &below_v, &inner], Vec::new())
}

/// `v` clamped to `[lo, hi]`.
fn clamp(e: &mut Expansion, s: &Scalars<'_>, v: &str, lo: f32, hi: f32) -> String {
    let (l, h) = (s.get(e, lo), s.get(e, hi));
    let m = e.op("Max", &[v, &l], Vec::new());
    e.op("Min", &[&m, &h], Vec::new())
}

impl Importer {
    /// `GridSample`.
    pub(in crate::onnx::import) fn grid_sample(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (gn, gv) = self.req(n, 1)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let gs: Vec<i64> = self.shape(&gv)?.iter().map(|&d| i64::from(d)).collect();
        let k = xs.len().saturating_sub(2);
        if !(k == 2 || k == 3) || gs.len() != k + 2 || gs[k + 1] != k as i64 || gs[0] != xs[0] {
            return Err(unsupported(format!(
                "GridSample of {xs:?} by a grid of {gs:?}"
            )));
        }
        let mode = attr_string(n, "mode")?.unwrap_or_else(|| "linear".to_owned());
        let taps_per_axis = match mode.as_str() {
            "nearest" => 1,
            "linear" | "bilinear" => 2,
            "cubic" | "bicubic" => 4,
            other => return Err(invalid(format!("mode {other:?}"))),
        };
        let padding = match attr_string(n, "padding_mode")?.as_deref() {
            None | Some("zeros") => Padding::Zeros,
            Some("border") => Padding::Border,
            Some("reflection") => Padding::Reflection,
            Some(other) => return Err(invalid(format!("padding_mode {other:?}"))),
        };
        let align = attr_int(n, "align_corners")?.unwrap_or(0) != 0;
        let elem = self.data_type(&xv)?.onnx_code();
        let (batch, channels) = (xs[0], xs[1]);
        let dims = &xs[2..];
        let outs = &gs[1..=k];
        let points: i64 = outs.iter().product();
        let cells: i64 = dims.iter().product();
        let mut strides = vec![1i64; k];
        for a in (0..k - 1).rev() {
            strides[a] = strides[a + 1] * dims[a + 1];
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let s = Scalars { like: &xn, elem };
        // Per spatial axis: the input position of every output point, [N, P].
        let mut coords = Vec::with_capacity(k);
        for (a, &size) in dims.iter().enumerate() {
            // The grid lists (x, y(, z)): the last spatial axis first.
            let c = (k - 1 - a) as i64;
            let g = e.slice(&gn, &[c], &[c + 1], &[k as i64 + 1]);
            let g = e.reshape(&g, &[batch, points]);
            let d = size as f32;
            let one = s.get(&mut e, 1.0);
            let g1 = e.op("Add", &[&g, &one], Vec::new());
            let mut x = if align {
                let f = s.get(&mut e, (d - 1.0) / 2.0);
                e.op("Mul", &[&g1, &f], Vec::new())
            } else {
                let f = s.get(&mut e, d / 2.0);
                let half = s.get(&mut e, 0.5);
                let m = e.op("Mul", &[&g1, &f], Vec::new());
                e.op("Sub", &[&m, &half], Vec::new())
            };
            if taps_per_axis == 1 {
                x = e.op("Round", &[&x], Vec::new());
            }
            let (lo, hi) = if align {
                (0.0, d - 1.0)
            } else {
                (-0.5, d - 0.5)
            };
            x = match padding {
                Padding::Zeros => x,
                // Clamped only when outside [lo, hi] (a position in [-0.5, 0) stays).
                Padding::Border => {
                    let (l, h) = (s.get(&mut e, lo), s.get(&mut e, hi));
                    let below = e.op("Less", &[&x, &l], Vec::new());
                    let above = e.op("Greater", &[&x, &h], Vec::new());
                    let outside = e.op("Or", &[&below, &above], Vec::new());
                    let c = clamp(&mut e, &s, &x, 0.0, d - 1.0);
                    e.op("Where", &[&outside, &c, &x], Vec::new())
                }
                Padding::Reflection => reflect(&mut e, &s, &x, lo, hi),
            };
            coords.push(x);
        }
        // Per axis: each tap's position and weight.
        let mut taps: Vec<Vec<(String, Option<String>)>> = Vec::with_capacity(k);
        for x in &coords {
            if taps_per_axis == 1 {
                taps.push(vec![(x.clone(), None)]);
                continue;
            }
            let x0 = e.op("Floor", &[x], Vec::new());
            let t = e.op("Sub", &[x, &x0], Vec::new());
            let mut list = Vec::with_capacity(taps_per_axis);
            if taps_per_axis == 2 {
                let one = s.get(&mut e, 1.0);
                let w0 = e.op("Sub", &[&one, &t], Vec::new());
                let x1 = e.op("Add", &[&x0, &one], Vec::new());
                list.push((x0, Some(w0)));
                list.push((x1, Some(t)));
            } else {
                // Keys' cubic convolution with A = -0.75, at distances t+1, t, 1-t, 2-t.
                let a = -0.75f32;
                let poly = |e: &mut Expansion, d: &str, far: bool| -> String {
                    // near (|d| <= 1): ((A+2)d - (A+3)) d² + 1; far: ((A d - 5A) d + 8A) d - 4A
                    let (c1, c2) = if far {
                        (a, -5.0 * a)
                    } else {
                        (a + 2.0, -(a + 3.0))
                    };
                    let p = s.get(e, c1);
                    let q = s.get(e, c2);
                    let m = e.op("Mul", &[d, &p], Vec::new());
                    let m = e.op("Add", &[&m, &q], Vec::new());
                    let m = e.op("Mul", &[&m, d], Vec::new());
                    if far {
                        let r = s.get(e, 8.0 * a);
                        let m = e.op("Add", &[&m, &r], Vec::new());
                        let m = e.op("Mul", &[&m, d], Vec::new());
                        let c = s.get(e, -4.0 * a);
                        e.op("Add", &[&m, &c], Vec::new())
                    } else {
                        let m = e.op("Mul", &[&m, d], Vec::new());
                        let one = s.get(e, 1.0);
                        e.op("Add", &[&m, &one], Vec::new())
                    }
                };
                let one = s.get(&mut e, 1.0);
                let two = s.get(&mut e, 2.0);
                let d0 = e.op("Add", &[&t, &one], Vec::new());
                let d2 = e.op("Sub", &[&one, &t], Vec::new());
                let d3 = e.op("Sub", &[&two, &t], Vec::new());
                let w = [
                    poly(&mut e, &d0, true),
                    poly(&mut e, &t, false),
                    poly(&mut e, &d2, false),
                    poly(&mut e, &d3, true),
                ];
                for (j, w) in w.into_iter().enumerate() {
                    let off = s.get(&mut e, j as f32 - 1.0);
                    let xj = e.op("Add", &[&x0, &off], Vec::new());
                    list.push((xj, Some(w)));
                }
            }
            taps.push(list);
        }
        let flat_x = e.reshape(&xn, &[batch, channels, cells]);
        let full = e.i64v(&[batch, channels, points]);
        let mut acc: Option<String> = None;
        let combos: usize = taps.iter().map(Vec::len).product();
        for combo in 0..combos {
            let mut rest = combo;
            let mut flat: Option<String> = None;
            let mut weight: Option<String> = None;
            for (a, list) in taps.iter().enumerate() {
                let (pos, w) = &list[rest % list.len()];
                rest /= list.len();
                let d = dims[a] as f32;
                // The tap's integer position and whether it lies inside the input.
                let (fixed, inside) = match padding {
                    Padding::Zeros => {
                        let zero = s.get(&mut e, 0.0);
                        let top = s.get(&mut e, d - 1.0);
                        let ge = e.op("GreaterOrEqual", &[pos, &zero], Vec::new());
                        let le = e.op("LessOrEqual", &[pos, &top], Vec::new());
                        let inside = e.op("And", &[&ge, &le], Vec::new());
                        (clamp(&mut e, &s, pos, 0.0, d - 1.0), Some(inside))
                    }
                    Padding::Border => (clamp(&mut e, &s, pos, 0.0, d - 1.0), None),
                    Padding::Reflection => {
                        let (lo, hi) = if align {
                            (0.0, d - 1.0)
                        } else {
                            (-0.5, d - 0.5)
                        };
                        let r = reflect(&mut e, &s, pos, lo, hi);
                        (clamp(&mut e, &s, &r, 0.0, d - 1.0), None)
                    }
                };
                // Truncated toward zero, as the definition's int().
                let i = e.op("Cast", &[&fixed], vec![int("to", 7)]);
                let st = e.i64s(&[strides[a]], &[]);
                let term = e.op("Mul", &[&i, &st], Vec::new());
                flat = Some(match flat {
                    Some(f) => e.op("Add", &[&f, &term], Vec::new()),
                    None => term,
                });
                let mut factor = w.clone();
                if let Some(inside) = inside {
                    let m = e.op("Cast", &[&inside], vec![int("to", 1)]);
                    let m = e.op("CastLike", &[&m, &xn], Vec::new());
                    factor = Some(match factor {
                        Some(f) => e.op("Mul", &[&f, &m], Vec::new()),
                        None => m,
                    });
                }
                if let Some(f) = factor {
                    weight = Some(match weight {
                        Some(w) => e.op("Mul", &[&w, &f], Vec::new()),
                        None => f,
                    });
                }
            }
            let flat = flat.ok_or_else(|| invalid("no spatial axis"))?;
            let idx = e.unsqueeze(&flat, &[1]);
            let idx = e.op("Expand", &[&idx, &full], Vec::new());
            let mut v = e.op("GatherElements", &[&flat_x, &idx], vec![int("axis", 2)]);
            if let Some(w) = weight {
                let w = e.unsqueeze(&w, &[1]);
                v = e.op("Mul", &[&v, &w], Vec::new());
            }
            acc = Some(match acc {
                Some(a) => e.op("Add", &[&a, &v], Vec::new()),
                None => v,
            });
        }
        let y = acc.ok_or_else(|| invalid("no tap"))?;
        let mut shape = vec![batch, channels];
        shape.extend(outs);
        let y = e.reshape(&y, &shape);
        e.bind(&y, &out);
        Ok(e.finish())
    }
}
