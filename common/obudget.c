/* obudget: the gateway-wide output buffer budget (see obudget.h). */
#include "common/obudget.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define OBUDGET_MIN ((size_t)32 << 20)
#define OBUDGET_MAX ((size_t)128 << 20)

struct obudget_share {
    obudget_t *b;
    unsigned refs;
    size_t held;
};

/* The gateway's cgroup v2 memory.max, or 0 when none is set (or not readable). */
static unsigned long long cgroup_mem_max(void)
{
    char path[512], line[512];
    unsigned long long v = 0;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return 0;
    path[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '0' && line[1] == ':' && line[2] == ':') { /* the v2 hierarchy */
            char *p = line + 3, *nl = p;
            while (*nl && *nl != '\n')
                nl++;
            *nl = '\0';
            snprintf(path, sizeof(path), "/sys/fs/cgroup%.400s/memory.max", p);
        }
    }
    fclose(f);
    if (!path[0] || !(f = fopen(path, "re")))
        return 0;
    if (fscanf(f, "%llu", &v) != 1) /* "max" */
        v = 0;
    fclose(f);
    return v;
}

size_t obudget_default_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    unsigned long long mem = pages > 0 && psz > 0 ? (unsigned long long)pages * psz : 0;
    unsigned long long cg = cgroup_mem_max();
    if (cg > 0 && (mem == 0 || cg < mem))
        mem = cg;
    unsigned long long v = mem / 64;
    if (v < OBUDGET_MIN)
        v = OBUDGET_MIN;
    if (v > OBUDGET_MAX)
        v = OBUDGET_MAX;
    return (size_t)v;
}

obudget_share_t *obudget_share_new(obudget_t *b)
{
    obudget_share_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->b = b;
    s->refs = 1;
    return s;
}

obudget_share_t *obudget_share_ref(obudget_share_t *s)
{
    s->refs++;
    return s;
}

void obudget_share_unref(obudget_share_t **ps)
{
    obudget_share_t *s = *ps;
    if (!s)
        return;
    *ps = NULL;
    if (--s->refs > 0)
        return;
    obudget_share_release(s, s->held); /* (nothing, if every holder released its charge) */
    free(s);
}

void obudget_share_charge(obudget_share_t *s, size_t n)
{
    if (n == 0)
        return;
    if (s->held == 0)
        s->b->busy++;
    s->held += n;
    s->b->held += n;
    if (s->b->held > s->b->peak)
        s->b->peak = s->b->held;
}

void obudget_share_release(obudget_share_t *s, size_t n)
{
    if (n > s->held)
        n = s->held;
    if (n == 0)
        return;
    s->held -= n;
    s->b->held -= n;
    if (s->held == 0)
        s->b->busy--;
}

size_t obudget_share_held(const obudget_share_t *s)
{
    return s->held;
}

size_t obudget_share_limit(const obudget_share_t *s)
{
    const obudget_t *b = s->b;
    unsigned n = b->busy + (s->held == 0);
    return b->limit / (n ? n : 1);
}

bool obudget_share_admit(obudget_share_t *s, size_t n)
{
    obudget_t *b = s->b;
    if (b->limit == 0)
        return true;
    if (s->held + n <= obudget_share_limit(s) &&
        (b->held + n <= b->limit || s->held + n <= b->reserve))
        return true;
    b->dropped++;
    b->dropped_bytes += n;
    return false;
}

size_t obudget_share_ceiling(const obudget_share_t *s)
{
    const obudget_t *b = s->b;
    if (b->limit == 0)
        return 0;
    size_t c = 2 * obudget_share_limit(s);
    return c > b->reserve ? c : b->reserve;
}
