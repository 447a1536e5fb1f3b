/* run_model: load an ONNX model through backplane's C API, run it on one input, and show
 * which backend ran what.
 *
 *   usage: run_model MODEL.onnx NAME=INPUT.npy [REFERENCE.npy [BACKENDS]]
 *
 * Plugins come from DYNAMIC_BACKEND_PATHS. The input's shape also fixes the model's symbolic
 * dimensions. With REFERENCE.npy (for example onnxruntime's output), the first output must
 * match it within 1e-4, or the exit status is 1.
 *
 *   gcc run_model.c $(pkg-config --cflags --libs backplane) -o run_model
 */
#include <backplane.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

static int fail(const char *what, int status)
{
    fprintf(stderr, "run_model: %s failed (%d): %s\n", what, status, bp_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3 || !strchr(argv[2], '=')) {
        fprintf(stderr, "usage: run_model MODEL.onnx NAME=INPUT.npy [REFERENCE.npy [BACKENDS]]\n");
        return 2;
    }
    const char *model = argv[1];
    char *input_name = argv[2];
    char *input_file = strchr(input_name, '=');
    *input_file++ = '\0';
    const char *reference = argc > 3 ? argv[3] : NULL;
    const char *backends = argc > 4 ? argv[4] : NULL;

    int64_t in_shape[8];
    size_t in_rank, in_count;
    float *in_values = npy_read_f32(input_file, in_shape, &in_rank, &in_count);
    if (!in_values) return 1;

    printf("Backend API %s\n", bp_api_version());
    bp_runtime *rt = bp_runtime_new(NULL, 0);
    if (!rt) return fail("bp_runtime_new", -1);
    char *report = bp_runtime_report_json(rt);
    if (!report) return fail("bp_runtime_report_json", -1);
    printf("discovery report: %zu bytes of JSON\n", strlen(report));
    bp_string_free(report);

    bp_input_shape shape = {input_name, in_shape, in_rank};
    bp_network *net = bp_network_load_ex(rt, model, backends, NULL, 0, &shape, 1, 0);
    /* The network keeps what it needs of the runtime. */
    bp_runtime_free(rt);
    if (!net) return fail("bp_network_load_ex", -1);

    size_t outputs;
    int status = bp_network_output_count(net, &outputs);
    if (status != BP_OK) return fail("bp_network_output_count", status);
    const int64_t *out_shape;
    size_t out_rank;
    int32_t out_dtype;
    status = bp_network_output_shape(net, 0, &out_shape, &out_rank, &out_dtype);
    if (status != BP_OK) return fail("bp_network_output_shape", status);
    if (out_dtype != BP_FLOAT32) {
        fprintf(stderr, "run_model: output 0 is not float32\n");
        return 1;
    }
    size_t out_count = 1;
    for (size_t i = 0; i < out_rank; i++) out_count *= (size_t)out_shape[i];
    float *out_values = calloc(out_count, sizeof(float));
    if (!out_values) {
        fprintf(stderr, "run_model: out of memory\n");
        return 1;
    }

    bp_tensor input = {input_name, BP_FLOAT32, in_shape, in_rank, in_values,
                       in_count * sizeof(float)};
    /* A NULL name binds by position: output 0. */
    bp_tensor output = {NULL, BP_FLOAT32, out_shape, out_rank, out_values,
                        out_count * sizeof(float)};
    status = bp_network_run(net, &input, 1, &output, 1);
    if (status != BP_OK) return fail("bp_network_run", status);

    printf("%s [", bp_network_output_name(net, 0));
    for (size_t i = 0; i < out_count && i < 8; i++) printf(i ? ", %.6f" : "%.6f", out_values[i]);
    printf("%s]\n", out_count > 8 ? ", ..." : "");
    char *per_backend = bp_network_layers_per_backend_json(net);
    printf("layers per backend: %s\n", per_backend);
    bp_string_free(per_backend);

    int exit_status = 0;
    if (reference) {
        int64_t ref_shape[8];
        size_t ref_rank, ref_count;
        float *ref = npy_read_f32(reference, ref_shape, &ref_rank, &ref_count);
        if (!ref || ref_count != out_count) {
            fprintf(stderr, "run_model: the reference has another size\n");
            exit_status = 1;
        } else {
            double worst = 0;
            for (size_t i = 0; i < out_count; i++) {
                double d = fabs((double)out_values[i] - (double)ref[i]);
                if (d > worst) worst = d;
            }
            printf("max |diff| vs reference: %.3g\n", worst);
            if (worst > 1e-4) exit_status = 1;
        }
        free(ref);
    }
    bp_network_free(net);
    free(out_values);
    free(in_values);
    return exit_status;
}
