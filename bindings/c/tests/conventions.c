/* The C API's conventions, checked from C: statuses, NULL returns, bp_last_error() messages,
 * NULL handles, bindings checked before anything runs, handles outliving their runtime, and
 * concurrent runs from threads. Run by tests/integration (c_api) under valgrind.
 *
 *   usage: conventions MODEL.onnx NAME=INPUT.npy [RUNS]   (a model with one float32 input;
 *          RUNS per thread in the concurrent part, default 20)
 */
#define _POSIX_C_SOURCE 200809L
#include <backplane.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/npy.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    if (ok) {
        passed++;
        printf("ok   %s\n", what);
    } else {
        failed++;
        printf("FAIL %s (last error: %s)\n", what, bp_last_error());
    }
}

static int error_is(const char *expected)
{
    if (strcmp(bp_last_error(), expected) == 0) return 1;
    printf("     expected error: %s\n     got:            %s\n", expected, bp_last_error());
    return 0;
}

static int error_starts(const char *prefix)
{
    if (strncmp(bp_last_error(), prefix, strlen(prefix)) == 0) return 1;
    printf("     expected error starting: %s\n     got: %s\n", prefix, bp_last_error());
    return 0;
}

static int runs = 20;

struct job {
    bp_network *net;
    bp_tensor input;
    const float *expected;
    size_t count;
    int same;
};

static void *run_many(void *arg)
{
    struct job *job = arg;
    const int64_t *shape;
    size_t rank;
    bp_network_output_shape(job->net, 0, &shape, &rank, NULL);
    float *out = calloc(job->count, sizeof(float));
    bp_tensor output = {NULL, BP_FLOAT32, shape, rank, out, job->count * sizeof(float)};
    job->same = 1;
    for (int i = 0; i < runs; i++) {
        if (bp_network_run(job->net, &job->input, 1, &output, 1) != BP_OK ||
            memcmp(out, job->expected, job->count * sizeof(float)) != 0)
            job->same = 0;
    }
    free(out);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4 || !strchr(argv[2], '=')) {
        fprintf(stderr, "usage: conventions MODEL.onnx NAME=INPUT.npy [RUNS]\n");
        return 2;
    }
    if (argc == 4) runs = atoi(argv[3]);
    const char *model = argv[1];
    char *name = argv[2];
    char *file = strchr(name, '=');
    *file++ = '\0';
    int64_t shape[8];
    size_t rank, count;
    float *values = npy_read_f32(file, shape, &rank, &count);
    if (!values) return 2;

    check(strcmp(bp_last_error(), "") == 0, "no error yet: bp_last_error() is empty");
    check(bp_runtime_new(NULL, 0x80) == NULL && error_is("unknown flags 0x80"),
          "an unknown flag: NULL and a message");
    check(bp_runtime_report_json(NULL) == NULL && error_is("runtime is NULL"),
          "a NULL runtime: NULL and a message");
    /* The backplane CLI, for the out-of-process part (the harness names it). */
    const char *cli_env = getenv("BACKPLANE_PROBE");
    char *cli = cli_env ? strdup(cli_env) : NULL;
    setenv("BACKPLANE_PROBE", "/nonexistent/backplane", 1);
    check(bp_runtime_new_ex("", 0, "CpuRef") == NULL &&
              error_is("out-of-process backends: BACKPLANE_PROBE=/nonexistent/backplane is not a file"),
          "out of process without the backplane CLI: NULL and a message");
    check(bp_runtime_new("", BP_ISOLATE) == NULL &&
              error_is("isolation: BACKPLANE_PROBE=/nonexistent/backplane is not a file"),
          "BP_ISOLATE without the backplane CLI: NULL and a message");
    bp_runtime_free(NULL);
    bp_network_free(NULL);
    bp_string_free(NULL);
    check(1, "the free functions accept NULL");

    bp_runtime *rt = bp_runtime_new("", 0);
    check(rt != NULL, "a runtime with no search path (CpuRef only)");
    char *report = bp_runtime_report_json(rt);
    check(report && strstr(report, "\"id\": \"CpuRef\"") && strstr(report, "\"api_version\""),
          "the report names CpuRef and the API version");
    bp_string_free(report);

    check(bp_network_load(rt, "/nonexistent/model.onnx", NULL) == NULL &&
              error_starts("cannot read /nonexistent/model.onnx: "),
          "a missing model: NULL and the path in the message");
    bp_input_shape input_shape = {name, shape, rank};
    check(bp_network_load_ex(rt, model, "NoSuchBackend", NULL, 0, &input_shape, 1, 0) == NULL &&
              strstr(bp_last_error(), "NoSuchBackend"),
          "an unknown backend preference: NULL and its name in the message");
    const char *bad_option = "Threads=2";
    check(bp_network_load_ex(rt, model, NULL, &bad_option, 1, NULL, 0, 0) == NULL &&
              error_is("backend option \"Threads=2\" is not ID:KEY=VALUE"),
          "a malformed backend option");
    int64_t negative[1] = {-1};
    bp_input_shape bad_shape = {name, negative, 1};
    check(bp_network_load_ex(rt, model, NULL, NULL, 0, &bad_shape, 1, 0) == NULL &&
              strstr(bp_last_error(), "dimension -1 is not in 0..=4294967295"),
          "a negative dimension");

    check(bp_runtime_set_max_memory(rt, 4096) == BP_OK &&
              bp_network_load_ex(rt, model, "CpuRef", NULL, 0, &input_shape, 1, 0) == NULL &&
              strstr(bp_last_error(), "the load's memory budget when it is smaller"),
          "a memory budget the model does not fit in: NULL and the sizes");
    check(bp_runtime_set_max_memory(rt, 0) == BP_OK, "the budget back to physical memory");
    check(bp_runtime_set_max_memory(NULL, 0) == BP_ERROR_INVALID_ARGUMENT &&
              error_is("runtime is NULL"),
          "a NULL runtime's budget: BP_ERROR_INVALID_ARGUMENT");

    bp_network *net = bp_network_load_ex(rt, model, "CpuRef", NULL, 0, &input_shape, 1, 0);
    check(net != NULL, "the model loads on CpuRef");
    if (!net) return 1;
    bp_runtime_free(rt); /* the network holds what it needs */

    size_t n = 0;
    check(bp_network_input_count(net, &n) == BP_OK && n == 1, "one input");
    check(strcmp(bp_network_input_name(net, 0), name) == 0, "its name");
    const int64_t *got_shape;
    size_t got_rank;
    int32_t dtype;
    check(bp_network_input_shape(net, 0, &got_shape, &got_rank, &dtype) == BP_OK &&
              got_rank == rank && memcmp(got_shape, shape, rank * sizeof(int64_t)) == 0 &&
              dtype == BP_FLOAT32,
          "its shape is the one given and its type float32");
    check(bp_network_input_name(net, 5) == NULL &&
              error_is("input index 5 is out of range (the network has 1)"),
          "an index out of range");
    check(bp_network_input_count(NULL, &n) == BP_ERROR_INVALID_ARGUMENT &&
              error_is("network is NULL"),
          "a NULL network: BP_ERROR_INVALID_ARGUMENT");
    check(bp_network_input_count(net, NULL) == BP_ERROR_INVALID_ARGUMENT &&
              error_is("count is NULL"),
          "a NULL out-pointer: BP_ERROR_INVALID_ARGUMENT");

    const int64_t *out_shape;
    size_t out_rank;
    bp_network_output_shape(net, 0, &out_shape, &out_rank, NULL);
    size_t out_count = 1;
    for (size_t i = 0; i < out_rank; i++) out_count *= (size_t)out_shape[i];
    float *out = calloc(out_count, sizeof(float));
    bp_tensor input = {name, BP_FLOAT32, shape, rank, values, count * sizeof(float)};
    bp_tensor output = {NULL, BP_FLOAT32, out_shape, out_rank, out, out_count * sizeof(float)};

    bp_tensor wrong = input;
    wrong.dtype = 7;
    char expected[256];
    snprintf(expected, sizeof expected,
             "input %s: data type 7 (INT64), the network needs 1 (FLOAT)", name);
    check(bp_network_run(net, &wrong, 1, &output, 1) == BP_ERROR_BINDING && error_is(expected),
          "a wrong data type: BP_ERROR_BINDING, nothing runs");
    wrong = input;
    wrong.name = "no_such_input";
    check(bp_network_run(net, &wrong, 1, &output, 1) == BP_ERROR_BINDING &&
              error_starts("no network input named \"no_such_input\""),
          "a wrong name: BP_ERROR_BINDING");
    wrong = input;
    int64_t other_shape[8];
    memcpy(other_shape, shape, sizeof other_shape);
    other_shape[rank - 1] += 1;
    wrong.shape = other_shape;
    check(bp_network_run(net, &wrong, 1, &output, 1) == BP_ERROR_BINDING &&
              error_starts("input "),
          "a wrong shape: BP_ERROR_BINDING");
    wrong = input;
    wrong.bytes -= 4;
    check(bp_network_run(net, &wrong, 1, &output, 1) == BP_ERROR_BINDING,
          "a short buffer: BP_ERROR_BINDING");
    bp_tensor in_place = output;
    in_place.data = values; /* the input's own buffer */
    check(bp_network_run(net, &input, 1, &in_place, 1) == BP_ERROR_INVALID_ARGUMENT &&
              strstr(bp_last_error(), "overlaps that of input"),
          "an output overlapping an input: refused before any slice is made");
    check(bp_network_run(net, &input, 1, &output, 0) == BP_ERROR_BINDING &&
              strstr(bp_last_error(), "is not bound"),
          "an output not given: BP_ERROR_BINDING");
    check(bp_network_run(net, &input, 1, &output, 1) == BP_OK, "a good run");

    /* CpuRef in a child process of its own gives the same bytes. */
    int same_out_of_process = 0;
    if (cli) {
        setenv("BACKPLANE_PROBE", cli, 1);
        bp_runtime *oop = bp_runtime_new_ex("", 0, "CpuRef");
        bp_network *remote =
            oop ? bp_network_load_ex(oop, model, "CpuRef", NULL, 0, &input_shape, 1, 0) : NULL;
        float *remote_out = calloc(out_count, sizeof(float));
        bp_tensor remote_output = output;
        remote_output.data = remote_out;
        same_out_of_process = remote &&
                              bp_network_run(remote, &input, 1, &remote_output, 1) == BP_OK &&
                              memcmp(remote_out, out, out_count * sizeof(float)) == 0;
        free(remote_out);
        bp_network_free(remote);
        bp_runtime_free(oop);
        free(cli);
    }
    check(same_out_of_process, "CpuRef out of process: the same output, bit for bit");

    char *explain = bp_network_explain(net);
    check(explain && strstr(explain, "CpuRef"), "explain names the backend");
    bp_string_free(explain);

    /* Four threads run the same network at once: every result equals the first run. */
    struct job jobs[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (struct job){net, input, out, out_count, 0};
        pthread_create(&threads[t], NULL, run_many, &jobs[t]);
    }
    int same = 1;
    for (int t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        same &= jobs[t].same;
    }
    char what[80];
    snprintf(what, sizeof what, "4 threads x %d runs agree bit for bit with one run", runs);
    check(same, what);

    /* The same model loaded without shapes runs any shape that fits it. */
    bp_runtime *rt2 = bp_runtime_new("", 0);
    bp_network *any = rt2 ? bp_network_load(rt2, model, "CpuRef") : NULL;
    check(any != NULL, "the model loads without shapes");
    if (any) {
        check(bp_network_input_shape(any, 0, &got_shape, &got_rank, NULL) == BP_OK &&
                  got_rank == rank && got_shape[0] == -1,
              "its declared shape has -1 for a symbolic dimension");
        char *none = bp_network_explain(any);
        check(none == NULL && strstr(bp_last_error(), "its shape was not given"),
              "explain before any run: NULL, naming the input");
        bp_tensor *results = NULL;
        size_t m = 0;
        check(bp_network_run_alloc(any, &input, 1, &results, &m) == BP_OK && m == 1 &&
                  results[0].rank == out_rank &&
                  memcmp(results[0].shape, out_shape, out_rank * sizeof(int64_t)) == 0 &&
                  results[0].dtype == BP_FLOAT32 && results[0].bytes == out_count * sizeof(float) &&
                  memcmp(results[0].data, out, results[0].bytes) == 0 &&
                  strcmp(results[0].name, bp_network_output_name(net, 0)) == 0,
              "bp_network_run_alloc: the fixed network's output, bit for bit");
        bp_tensors_free(results, m);
        /* Batch 2: the input twice. */
        int64_t shape2[8];
        memcpy(shape2, shape, sizeof shape2);
        shape2[0] = 2 * shape[0];
        float *values2 = malloc(2 * count * sizeof(float));
        memcpy(values2, values, count * sizeof(float));
        memcpy(values2 + count, values, count * sizeof(float));
        bp_tensor input2 = {name, BP_FLOAT32, shape2, rank, values2, 2 * count * sizeof(float)};
        check(bp_network_run_alloc(any, &input2, 1, &results, &m) == BP_OK && m == 1 &&
                  results[0].shape[0] == 2 * out_shape[0] &&
                  results[0].bytes == 2 * out_count * sizeof(float) &&
                  memcmp(results[0].data, out, out_count * sizeof(float)) == 0 &&
                  memcmp((char *)results[0].data + out_count * sizeof(float), out,
                         out_count * sizeof(float)) == 0,
              "a batch of two: its output shape and both rows");
        int64_t out_shape2[8];
        memcpy(out_shape2, results[0].shape, results[0].rank * sizeof(int64_t));
        float *out2 = calloc(2 * out_count, sizeof(float));
        bp_tensor output2 = {NULL, BP_FLOAT32, out_shape2, results[0].rank, out2,
                             2 * out_count * sizeof(float)};
        check(bp_network_run(any, &input2, 1, &output2, 1) == BP_OK &&
                  memcmp(out2, results[0].data, output2.bytes) == 0,
              "bp_network_run at that shape into the caller's buffer");
        bp_tensors_free(results, m);
        bp_tensor flat = input; /* the batch of 1 dropped: the same bytes, one rank less */
        flat.shape = shape + 1;
        flat.rank = rank - 1;
        results = (bp_tensor *)1;
        check(bp_network_run_alloc(any, &flat, 1, &results, &m) == BP_ERROR_BINDING &&
                  results == NULL && m == 0 && error_starts("input ") &&
                  strstr(bp_last_error(), "the model requires rank"),
              "a wrong rank: BP_ERROR_BINDING, nothing allocated");
        bp_tensors_free(NULL, 0);
        free(out2);
        free(values2);
    }
    bp_network_free(any);
    bp_runtime_free(rt2);

    bp_network_free(net);
    free(out);
    free(values);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
