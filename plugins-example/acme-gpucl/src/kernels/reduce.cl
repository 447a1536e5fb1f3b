// Reductions, one work item per output element or per normalised row.

// p: the count of reduced elements R, then the kept dimensions (the output's, in order) and
// their input strides, then the reduced dimensions and their input strides (MAX_RANK each,
// outermost first, padded in front with 1s and 0s). Operations numbered as backplane's
// ReduceOperation (Sum, Max, Min, Mean, Prod); Max and Min give NaN if any element is NaN.
__kernel void reduce(__global const float *x, __global float *y, __global const int *p, int n,
                     int op) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int R = p[0];
    int rem = i, base = 0;
    for (int d = MAX_RANK - 1; d >= 0; --d) {
        int dim = p[1 + d];
        base += (rem % dim) * p[1 + MAX_RANK + d];
        rem /= dim;
    }
    float acc = op == 1 ? -INFINITY : (op == 2 ? INFINITY : (op == 4 ? 1.0f : 0.0f));
    for (int r = 0; r < R; ++r) {
        int q = r, off = base;
        for (int d = MAX_RANK - 1; d >= 0; --d) {
            int dim = p[1 + 2 * MAX_RANK + d];
            off += (q % dim) * p[1 + 3 * MAX_RANK + d];
            q /= dim;
        }
        float v = x[off];
        switch (op) {
        case 1: acc = (isnan(v) || v > acc) && !isnan(acc) ? v : acc; break;
        case 2: acc = (isnan(v) || v < acc) && !isnan(acc) ? v : acc; break;
        case 4: acc *= v; break;
        default: acc += v; break;
        }
    }
    if (op == 3) {
        acc = R > 0 ? acc / (float)R : NAN;
    }
    y[i] = acc;
}

// Softmax along an axis of `len` elements `inner` apart, in rows of outer * inner work items:
// exp(beta * x - max) / sum.
__kernel void softmax(__global const float *x, __global float *y, int rows, int len, int inner,
                      float beta) {
    int i = get_global_id(0);
    if (i >= rows) {
        return;
    }
    int base = (i / inner) * len * inner + i % inner;
    float m = -INFINITY;
    for (int k = 0; k < len; ++k) {
        m = fmax(m, beta * x[base + k * inner]);
    }
    float s = 0.0f;
    for (int k = 0; k < len; ++k) {
        s += exp(beta * x[base + k * inner] - m);
    }
    for (int k = 0; k < len; ++k) {
        y[base + k * inner] = exp(beta * x[base + k * inner] - m) / s;
    }
}

// Layer normalisation of `rows` contiguous rows of `len` elements: the mean and the biased
// variance (two passes), then scale[k] and bias[k] (read only when has_bias).
__kernel void layer_norm(__global const float *x, __global const float *scale,
                         __global const float *bias, __global float *y, int rows, int len,
                         float epsilon, int has_bias) {
    int i = get_global_id(0);
    if (i >= rows) {
        return;
    }
    __global const float *xr = x + i * len;
    __global float *yr = y + i * len;
    float mean = 0.0f;
    for (int k = 0; k < len; ++k) {
        mean += xr[k];
    }
    mean /= (float)len;
    float var = 0.0f;
    for (int k = 0; k < len; ++k) {
        float d = xr[k] - mean;
        var += d * d;
    }
    var /= (float)len;
    float inv = 1.0f / sqrt(var + epsilon);
    for (int k = 0; k < len; ++k) {
        float v = (xr[k] - mean) * inv * scale[k];
        yr[k] = has_bias ? v + bias[k] : v;
    }
}
