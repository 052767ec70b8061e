/* Kernelspecs found in the standard Jupyter data directories. */
#ifndef KGW_KERNELMGR_KSPEC_H
#define KGW_KERNELMGR_KSPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct kspec {
    char *name;
    char *dir;
    json_t *spec; /* kernel.json, validated: argv (non-empty array of strings), display_name */
    bool interrupt_message;
} kspec_t;

typedef struct kspecs kspecs_t;

/* Scans $JUPYTER_PATH/kernels, ~/.local/share/jupyter/kernels, /usr/local/share/jupyter/kernels
 * and /usr/share/jupyter/kernels (first wins per name). NULL + errno. */
kspecs_t *kspecs_load(void);
void kspecs_destroy(kspecs_t **ks);
size_t kspecs_count(const kspecs_t *ks);
const kspec_t *kspecs_at(const kspecs_t *ks, size_t i);
const kspec_t *kspecs_find(const kspecs_t *ks, const char *name);
/* {"name", "spec", "resources"} as jupyter_server serves it. New reference. */
json_t *kspec_model(const kspec_t *s);
/* Opens a resource file (a single file name inside the spec directory) read-only.
 * Returns an fd or -ENOENT / -errno. */
int kspec_open_resource(const kspec_t *s, const char *file);

#endif
