/* A minimal reader of little-endian float32 C-order .npy files, for the examples. */
#ifndef BACKPLANE_EXAMPLE_NPY_H
#define BACKPLANE_EXAMPLE_NPY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads PATH; fills shape[0..*rank) (at most 8 dimensions) and returns malloc'd values
   (*count of them), or NULL with a message on stderr. */
static float *npy_read_f32(const char *path, int64_t shape[8], size_t *rank, size_t *count)
{
    FILE *f = fopen(path, "rb");
    unsigned char magic[8];
    if (!f || fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6) != 0) {
        fprintf(stderr, "%s: not a .npy file\n", path);
        if (f) fclose(f);
        return NULL;
    }
    unsigned char len_bytes[4] = {0};
    size_t len_size = magic[6] == 1 ? 2 : 4;
    if (fread(len_bytes, 1, len_size, f) != len_size) {
        fclose(f);
        return NULL;
    }
    size_t header_len = len_bytes[0] | (len_bytes[1] << 8) | ((size_t)len_bytes[2] << 16) |
                        ((size_t)len_bytes[3] << 24);
    char *header = calloc(header_len + 1, 1);
    if (!header || fread(header, 1, header_len, f) != header_len ||
        !strstr(header, "'descr': '<f4'") || !strstr(header, "'fortran_order': False")) {
        fprintf(stderr, "%s: only little-endian float32 in C order is read here\n", path);
        free(header);
        fclose(f);
        return NULL;
    }
    char *p = strstr(header, "'shape': (");
    *rank = 0;
    *count = 1;
    if (p) {
        p += strlen("'shape': (");
        while (*p && *p != ')') {
            if (*rank == 8) {
                fprintf(stderr, "%s: more than 8 dimensions\n", path);
                free(header);
                fclose(f);
                return NULL;
            }
            char *end;
            long long d = strtoll(p, &end, 10);
            if (end == p || d < 0) break;
            shape[(*rank)++] = d;
            *count *= (size_t)d;
            p = end;
            while (*p == ',' || *p == ' ') p++;
        }
    }
    free(header);
    float *values = malloc(*count * sizeof(float) + 1);
    if (!values || fread(values, sizeof(float), *count, f) != *count) {
        fprintf(stderr, "%s: truncated data\n", path);
        free(values);
        values = NULL;
    }
    fclose(f);
    return values;
}

#endif
