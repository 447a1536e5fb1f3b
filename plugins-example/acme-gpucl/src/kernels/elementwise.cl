// Element-wise kernels: activations, unary and binary operations (float32, one work item per
// element). `activate` is shared with the convolution and matrix kernels (fused activations).

#define MAX_RANK 6

// The activation functions, numbered as backplane's ActivationFunction (Gelu's tanh form is
// 8); -1 is none. Each follows ActivationDescriptor::apply_in_place: NaN selects no bound.
inline float sigmoid_stable(float x) {
    if (x >= 0.0f) {
        return 1.0f / (1.0f + exp(-x));
    }
    float e = exp(x);
    return e / (1.0f + e);
}

inline float activate(float x, int f, float a, float b) {
    switch (f) {
    case 0: return x < 0.0f ? 0.0f : x;
    case 1: { float y = x < b ? b : x; return y > a ? a : y; }
    case 2: return sigmoid_stable(x);
    case 3: return a * tanh(b * x);
    case 4: return x > 0.0f ? x : a * x;
    case 5: { float t = x + 3.0f; t = t < 0.0f ? 0.0f : (t > 6.0f ? 6.0f : t); return x * t / 6.0f; }
    case 6: return x > 0.0f ? x : a * expm1(x);
    case 7: return 0.5f * x * (1.0f + erf(x * M_SQRT1_2_F));
    case 8: {
        float inner = sqrt(2.0f / M_PI_F) * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanh(inner));
    }
    default: return x;
    }
}

__kernel void activation(__global const float *x, __global float *y, int n, int f, float a,
                         float b) {
    int i = get_global_id(0);
    if (i < n) {
        y[i] = activate(x[i], f, a, b);
    }
}

// Numbered as backplane's UnaryOperation.
__kernel void unary(__global const float *x, __global float *y, int n, int op) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    float v = x[i];
    float r;
    switch (op) {
    case 0: r = fabs(v); break;
    case 1: r = -v; break;
    case 2: r = exp(v); break;
    case 3: r = log(v); break;
    case 4: r = sqrt(v); break;
    case 5: r = 1.0f / sqrt(v); break;
    case 6: r = 1.0f / v; break;
    case 7: r = sin(v); break;
    case 8: r = cos(v); break;
    case 9: r = erf(v); break;
    case 10: r = ceil(v); break;
    case 11: r = floor(v); break;
    case 12: r = tan(v); break;
    case 13: r = asin(v); break;
    case 14: r = acos(v); break;
    case 15: r = atan(v); break;
    case 16: r = sinh(v); break;
    case 17: r = cosh(v); break;
    case 18: r = asinh(v); break;
    case 19: r = acosh(v); break;
    case 20: r = atanh(v); break;
    // rint rounds halves to even in the default rounding mode, as ONNX's Round.
    case 21: r = rint(v); break;
    default: r = NAN; break;
    }
    y[i] = r;
}

// Numpy broadcasting: p holds the output's dimensions, then a's and b's strides (0 along a
// broadcast dimension), MAX_RANK each, outermost first, padded with 1s and 0s in front.
// Operations numbered as backplane's BinaryOperation.
__kernel void binary(__global const float *a, __global const float *b, __global float *y,
                     __global const int *p, int n, int op) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int rem = i, ia = 0, ib = 0;
    for (int d = MAX_RANK - 1; d >= 0; --d) {
        int dim = p[d];
        int c = rem % dim;
        rem /= dim;
        ia += c * p[MAX_RANK + d];
        ib += c * p[2 * MAX_RANK + d];
    }
    float u = a[ia], v = b[ib];
    float r;
    switch (op) {
    case 0: r = u + v; break;
    case 1: r = u - v; break;
    case 2: r = u * v; break;
    case 3: r = u / v; break;
    case 4: r = fmax(u, v); break;
    case 5: r = fmin(u, v); break;
    case 6: r = pow(u, v); break;
    case 7: r = (u - v) * (u - v); break;
    // The bitwise operations and shifts are defined on integers, which GpuCl does not run.
    default: r = NAN; break;
    }
    y[i] = r;
}

// y = x * mul[c] + add[c], c = the channel (axis 1) of element i of an [N, C, inner] tensor:
// inference batch normalisation with its parameters folded on the host.
__kernel void channel_affine(__global const float *x, __global const float *mul,
                             __global const float *add, __global float *y, int n, int channels,
                             int inner) {
    int i = get_global_id(0);
    if (i < n) {
        int c = (i / inner) % channels;
        y[i] = x[i] * mul[c] + add[c];
    }
}
