/* Runs a libFuzzer target over files without libFuzzer: every regular file given, and every
 * regular file in every directory given (not recursive, dot files skipped). Fails when no input
 * was found, so a missing or empty corpus cannot pass silently. Each input is copied into a
 * buffer of exactly its size, so an over-read shows up under valgrind or ASan. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path, size_t *count)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) {
            fprintf(stderr, "replay: %s: short read\n", path);
            free(buf);
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    (*count)++;
    return 0;
}

static int run_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[4096];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (run_file(path, count) < 0)
            rc = -1;
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    int rc = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            rc = 1;
        } else if (S_ISDIR(st.st_mode)) {
            if (run_dir(argv[i], &count) < 0)
                rc = 1;
        } else if (run_file(argv[i], &count) < 0) {
            rc = 1;
        }
    }
    if (count == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    printf("replay: %zu input(s) ran\n", count);
    return rc;
}
