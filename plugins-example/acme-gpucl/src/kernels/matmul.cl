// Matrix products, one work item per output element: out[batch, r, j] = sum over k, in order,
// of a[batch, r, k] * b[batch, k, j] (+ bias[j], then a fused activation). Serves
// FullyConnected and BatchMatMul.
//
// p: M N K a_row a_k b_k b_col, then the output's batch dimensions and a's and b's batch
// strides (MAX_RANK each, outermost first, padded in front with 1s and 0s). Transposes and
// broadcasting are strides.
__kernel void matmul(__global const float *a, __global const float *b,
                     __global const float *bias, __global float *y, __global const int *p,
                     int n, int has_bias, int act, float act_a, float act_b) {
    int i = get_global_id(0);
    if (i >= n) {
        return;
    }
    int M = p[0], N = p[1], K = p[2], a_row = p[3], a_k = p[4], b_k = p[5], b_col = p[6];
    int j = i % N;
    int t = i / N;
    int r = t % M;
    int rem = t / M;
    int ia = 0, ib = 0;
    for (int d = MAX_RANK - 1; d >= 0; --d) {
        int dim = p[7 + d];
        int c = rem % dim;
        rem /= dim;
        ia += c * p[7 + MAX_RANK + d];
        ib += c * p[7 + 2 * MAX_RANK + d];
    }
    __global const float *ap = a + ia + r * a_row;
    __global const float *bp = b + ib + j * b_col;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += ap[k * a_k] * bp[k * b_k];
    }
    if (has_bias) {
        acc += bias[j];
    }
    y[i] = activate(acc, act, act_a, act_b);
}
