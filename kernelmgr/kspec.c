#include "kernelmgr/kspec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ident.h"
#include "common/log.h"

#define KSPECS_MAX 256

struct kspecs {
    kspec_t *v[KSPECS_MAX];
    size_t n;
};

static void kspec_free(kspec_t *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->dir);
    json_decref(s->spec);
    free(s);
}

static kspec_t *load_one(const char *dir, const char *name)
{
    char path[PATH_MAX];
    json_error_t err;
    snprintf(path, sizeof(path), "%s/kernel.json", dir);
    json_t *spec = json_load_file(path, 0, &err);
    if (!json_is_object(spec)) {
        log_debug("kspec: skipping %s: %s", path, err.text);
        json_decref(spec);
        return NULL;
    }
    json_t *argv = json_object_get(spec, "argv");
    size_t i;
    json_t *a;
    bool ok = json_is_array(argv) && json_array_size(argv) > 0 &&
              json_is_string(json_object_get(spec, "display_name"));
    json_array_foreach(argv, i, a) ok = ok && json_is_string(a);
    if (!ok) {
        log_warn("kspec: %s: argv or display_name missing or invalid; ignored", path);
        json_decref(spec);
        return NULL;
    }
    if (!json_object_get(spec, "language"))
        json_object_set_new(spec, "language", json_string(""));
    if (!json_object_get(spec, "metadata"))
        json_object_set_new(spec, "metadata", json_object());
    if (!json_object_get(spec, "env"))
        json_object_set_new(spec, "env", json_object());
    const char *im = json_string_value(json_object_get(spec, "interrupt_mode"));
    if (!im)
        json_object_set_new(spec, "interrupt_mode", json_string(im = "signal"));
    kspec_t *s = calloc(1, sizeof(*s));
    if (!s) {
        json_decref(spec);
        return NULL;
    }
    s->name = strdup(name);
    s->dir = strdup(dir);
    s->spec = spec;
    s->interrupt_message = strcmp(im, "message") == 0;
    if (!s->name || !s->dir) {
        kspec_free(s);
        return NULL;
    }
    return s;
}

static void scan(kspecs_t *ks, const char *base)
{
    DIR *d = opendir(base);
    struct dirent *e;
    char dir[PATH_MAX];
    if (!d)
        return;
    while ((e = readdir(d)) && ks->n < KSPECS_MAX) {
        if (!ident_str_ok(e->d_name, IDENT_KSPEC))
            continue;
        char lname[256];
        snprintf(lname, sizeof(lname), "%s", e->d_name);
        for (char *p = lname; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        if (kspecs_find(ks, lname))
            continue;
        snprintf(dir, sizeof(dir), "%s/%s", base, e->d_name);
        kspec_t *s = load_one(dir, lname);
        if (s) {
            ks->v[ks->n++] = s;
            log_debug("kspec: found %s in %s", lname, dir);
        }
    }
    closedir(d);
}

kspecs_t *kspecs_load(void)
{
    char path[PATH_MAX];
    kspecs_t *ks = calloc(1, sizeof(*ks));
    if (!ks)
        return NULL;
    const char *jp = getenv("JUPYTER_PATH");
    if (jp) {
        char *copy = strdup(jp), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t; t = strtok_r(NULL, ":", &save)) {
            snprintf(path, sizeof(path), "%s/kernels", t);
            scan(ks, path);
        }
        free(copy);
    }
    const char *home = getenv("HOME");
    if (home) {
        snprintf(path, sizeof(path), "%s/.local/share/jupyter/kernels", home);
        scan(ks, path);
    }
    scan(ks, "/usr/local/share/jupyter/kernels");
    scan(ks, "/usr/share/jupyter/kernels");
    return ks;
}

void kspecs_destroy(kspecs_t **pks)
{
    kspecs_t *ks = *pks;
    if (!ks)
        return;
    for (size_t i = 0; i < ks->n; i++)
        kspec_free(ks->v[i]);
    free(ks);
    *pks = NULL;
}

size_t kspecs_count(const kspecs_t *ks)
{
    return ks->n;
}

const kspec_t *kspecs_at(const kspecs_t *ks, size_t i)
{
    return i < ks->n ? ks->v[i] : NULL;
}

const kspec_t *kspecs_find(const kspecs_t *ks, const char *name)
{
    for (size_t i = 0; i < ks->n; i++)
        if (strcmp(ks->v[i]->name, name) == 0)
            return ks->v[i];
    return NULL;
}

json_t *kspec_model(const kspec_t *s)
{
    json_t *res = json_object();
    DIR *d = opendir(s->dir);
    struct dirent *e;
    char url[512];
    while (d && (e = readdir(d))) {
        if (!ident_str_ok(e->d_name, IDENT_KSPEC))
            continue;
        const char *f = e->d_name;
        if (strncmp(f, "logo-", 5) == 0) {
            const char *dot = strrchr(f, '.');
            size_t klen = dot ? (size_t)(dot - f) : strlen(f);
            char key[256];
            snprintf(key, sizeof(key), "%.*s", (int)klen, f);
            snprintf(url, sizeof(url), "/kernelspecs/%s/%s", s->name, f);
            json_object_set_new(res, key, json_string(url));
        } else if (!strcmp(f, "kernel.js") || !strcmp(f, "kernel.css")) {
            snprintf(url, sizeof(url), "/kernelspecs/%s/%s", s->name, f);
            json_object_set_new(res, f, json_string(url));
        }
    }
    if (d)
        closedir(d);
    return json_pack("{s:s, s:O, s:o}", "name", s->name, "spec", s->spec, "resources", res);
}

int kspec_open_resource(const kspec_t *s, const char *file)
{
    struct stat st;
    if (!ident_str_ok(file, IDENT_KSPEC))
        return -ENOENT;
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int fd = openat(dfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    int err = fd < 0 ? -errno : 0;
    close(dfd);
    if (fd < 0)
        return err == -ELOOP ? -ENOENT : err;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -ENOENT;
    }
    return fd;
}
