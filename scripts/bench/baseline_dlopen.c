/* The discovery benchmark's baseline: the least a loader can do. readdir one directory, and
 * for every entry whose name contains "_backend.so": dlopen(RTLD_NOW | RTLD_LOCAL) and dlsym
 * the three Backend API symbols. Prints "<nanoseconds> <files loaded>". */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    DIR *dir = opendir(argv[1]);
    if (!dir) {
        perror("opendir");
        return 1;
    }
    struct dirent *e;
    char path[4096];
    int loaded = 0;
    while ((e = readdir(dir)) != NULL) {
        if (!strstr(e->d_name, "_backend.so")) continue;
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        if (!dlsym(h, "GetBackendId") || !dlsym(h, "GetVersion") || !dlsym(h, "BackendFactory")) {
            fprintf(stderr, "%s: missing symbol\n", path);
            return 1;
        }
        loaded++;
    }
    closedir(dir);
    clock_gettime(CLOCK_MONOTONIC, &end);
    long long ns = (end.tv_sec - start.tv_sec) * 1000000000LL + (end.tv_nsec - start.tv_nsec);
    printf("%lld %d\n", ns, loaded);
    return 0;
}
