// Data movement, one work item per output element.

// y[i] = x[input offset of output index i]: p holds the output's dimensions and, for each, the
// input stride (MAX_RANK each, outermost first, padded in front with 1s and 0s). Transpose.
__kernel void gather_strided(__global const float *x, __global float *y, __global const int *p,
                             int n) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int rem = i, off = 0;
    for (int d = MAX_RANK - 1; d >= 0; --d) {
        int dim = p[d];
        off += (rem % dim) * p[MAX_RANK + d];
        rem /= dim;
    }
    y[i] = x[off];
}

// One input of a concatenation: x is [outer, len_in, inner], y is [outer, len_out, inner];
// x goes to y's indices offset..offset + len_in along the middle axis.
__kernel void concat_part(__global const float *x, __global float *y, int n, int len_in,
                          int len_out, int inner, int offset) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int block = len_in * inner;
    int o = i / block, r = i % block;
    y[(o * len_out + offset) * inner + r] = x[i];
}
