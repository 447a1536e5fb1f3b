// Window kernels over NCHW float32 tensors, one work item per output element: grouped,
// strided, dilated, padded 2-D convolution with optional bias and fused activation
// (depthwise is the case groups = channels), and 2-D pooling.

// p: N C H W M OH OW KH KW stride_y stride_x dilation_y dilation_x pad_top pad_left groups.
// Weights [M, C / groups, KH, KW]; bias [M] (read only when has_bias).
__kernel void conv2d(__global const float *x, __global const float *w,
                     __global const float *bias, __global float *y, __global const int *p,
                     int n, int has_bias, int act, float act_a, float act_b) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int C = p[1], H = p[2], W = p[3], M = p[4], OH = p[5], OW = p[6], KH = p[7], KW = p[8];
    int sy = p[9], sx = p[10], dy = p[11], dx = p[12], pt = p[13], pl = p[14], groups = p[15];
    int ox = i % OW;
    int t = i / OW;
    int oy = t % OH;
    t /= OH;
    int m = t % M;
    int nb = t / M;
    int cpg = C / groups;
    int g = m / (M / groups);
    float acc = has_bias ? bias[m] : 0.0f;
    int y0 = oy * sy - pt, x0 = ox * sx - pl;
    for (int c = 0; c < cpg; ++c) {
        __global const float *xc = x + ((nb * C + g * cpg + c) * H) * W;
        __global const float *wc = w + ((m * cpg + c) * KH) * KW;
        for (int ky = 0; ky < KH; ++ky) {
            int iy = y0 + ky * dy;
            if (iy < 0 || iy >= H) {
                continue;
            }
            for (int kx = 0; kx < KW; ++kx) {
                int ix = x0 + kx * dx;
                if (ix >= 0 && ix < W) {
                    acc += xc[iy * W + ix] * wc[ky * KW + kx];
                }
            }
        }
    }
    y[i] = activate(acc, act, act_a, act_b);
}

// p: N C H W OH OW KH KW stride_y stride_x pad_top pad_left pad_bottom pad_right max
// count_include_pad. Padding cells never enter a maximum; an average divides by the real
// cells of the window, or with count_include_pad by its cells inside the padded input.
__kernel void pool2d(__global const float *x, __global float *y, __global const int *p, int n) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int H = p[2], W = p[3], OH = p[4], OW = p[5], KH = p[6], KW = p[7];
    int sy = p[8], sx = p[9], pt = p[10], pl = p[11], pb = p[12], pr = p[13];
    int is_max = p[14], include_pad = p[15];
    int ox = i % OW;
    int t = i / OW;
    int oy = t % OH;
    int nc = t / OH;
    int y0 = oy * sy - pt, x0 = ox * sx - pl;
    int ya = max(y0, 0), yb = min(y0 + KH, H);
    int xa = max(x0, 0), xb = min(x0 + KW, W);
    __global const float *xp = x + nc * H * W;
    if (is_max) {
        float m = -INFINITY;
        for (int iy = ya; iy < yb; ++iy) {
            for (int ix = xa; ix < xb; ++ix) {
                m = fmax(m, xp[iy * W + ix]);
            }
        }
        y[i] = m;
        return;
    }
    float s = 0.0f;
    for (int iy = ya; iy < yb; ++iy) {
        for (int ix = xa; ix < xb; ++ix) {
            s += xp[iy * W + ix];
        }
    }
    int count;
    if (include_pad) {
        int rows = min(y0 + KH, H + pb) - max(y0, -pt);
        int cols = min(x0 + KW, W + pr) - max(x0, -pl);
        count = rows * cols;
    } else {
        count = (yb - ya) * (xb - xa);
    }
    y[i] = count > 0 ? s / (float)count : 0.0f;
}
