/* The request's environment, for a kernel taken from the warm pool.
 *
 * A pooled kernel was started before its request existed, so the request's KERNEL_*
 * variables are set in its os.environ by one execution that leaves no trace a client can see:
 * silent (no execute_input, no result, execution_count unchanged), store_history false (not
 * in In/Out or the history database), names bound only inside an expression, and the kernel
 * is handed out only after that execution's status "idle", so no client ever receives one of
 * its messages. The variables reach os.environ and so every subprocess; the kernel process's
 * initial environment (/proc/self/environ) does not have them. If the execution fails, the
 * kernel is restarted cold with the variables in its environment. */
#include "kernelmgr/kenv_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernelmgr/klaunch_int.h"
#include "kernelmgr/kwire_int.h"
#include "kernelmgr/private.h"

/* A pooled kernel's request environment (k->env). */
struct kenv {
    char *code;               /* the code that applies it (NULL: applied, or given up) */
    char id[JMSG_MSG_ID_MAX]; /* the msg_id of the execution that runs it */
    bool replied, idle;       /* its answers so far */
};

/* The code that sets req_env's KERNEL_* variables (NULL: none, errno 0; or NULL + errno). */
static char *code_new(json_t *req_env)
{
    static const char pre[] = "__import__('os').environ.update(__import__('json').loads("
                              "bytes.fromhex('";
    static const char post[] = "')))";
    const char *key;
    json_t *v, *vars = json_object();
    char *code = NULL;
    errno = ENOMEM;
    if (!vars)
        return NULL;
    json_object_foreach(req_env, key, v) if (json_is_string(v) && !strncmp(key, "KERNEL_", 7))
        json_object_set_new(vars, key, json_string(json_string_value(v)));
    if (json_object_size(vars) == 0) {
        json_decref(vars);
        errno = 0;
        return NULL;
    }
    char *js = json_dumps(vars, JSON_COMPACT);
    json_decref(vars);
    errno = ENOMEM;
    if (!js)
        return NULL;
    size_t n = strlen(js);
    code = malloc(sizeof(pre) + 2 * n + sizeof(post));
    if (code) {
        char *o = stpcpy(code, pre);
        for (size_t i = 0; i < n; i++)
            o += sprintf(o, "%02x", (unsigned char)js[i]);
        strcpy(o, post);
    }
    free(js);
    return code;
}

/* Never hand out a kernel without its environment: start it again, cold, with the variables
 * in its process environment (k->envp has them). */
static void env_fail(kernel_t *k, const char *why)
{
    log_warn("kernel=%s: cannot apply the request's environment (%s); restarting it cold",
             k->id, why);
    free(k->env->code);
    k->env->code = NULL;
    k->req_pool = false; /* the client's start goes the cold way now */
    k->state = KERNEL_RESTARTING;
    k->stop_stage = 1; /* on exit: start again */
    klaunch__signal(k, SIGKILL);
}

struct kenv *kenv__new(json_t *req_env)
{
    struct kenv *e;
    errno = 0;
    char *code = code_new(req_env);
    if (!code)
        return NULL;
    if (!(e = calloc(1, sizeof(*e)))) {
        free(code);
        errno = ENOMEM;
        return NULL;
    }
    e->code = code;
    return e;
}

void kenv__free(kernel_t *k)
{
    if (!k->env)
        return;
    free(k->env->code);
    free(k->env);
    k->env = NULL;
}

bool kenv__due(const kernel_t *k)
{
    return k->env && k->env->code;
}

const char *kenv__id(const kernel_t *k)
{
    return k->env ? k->env->id : "";
}

void kenv__send(kernel_t *k)
{
    struct kenv *e = k->env;
    json_t *c = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", e->code, "silent", 1,
                          "store_history", 0, "user_expressions", "allow_stdin", 0,
                          "stop_on_error", 0);
    char *content = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    e->replied = e->idle = false;
    int r = content ? kwire__send_own_id(k, &k->shell, "execute_request", content, e->id)
                    : -ENOMEM;
    free(content);
    if (r < 0) {
        env_fail(k, strerror(-r));
        return;
    }
    k->m->evl->timer_arm(k->m->evl, k->deadline, (uint64_t)k->m->o.start_timeout_ms);
}

bool kenv__step(kernel_t *k, bool replied_ok, bool replied_err, bool idle)
{
    struct kenv *e = k->env;
    if (!kenv__due(k) || k->state != KERNEL_STARTING)
        return false;
    if (replied_err) {
        env_fail(k, "the execution failed");
        return false;
    }
    e->replied |= replied_ok;
    e->idle |= idle;
    if (!e->replied || !e->idle)
        return false;
    free(e->code);
    e->code = NULL;
    log_info("kernel=%s: ready (pid %d, from the pool, environment applied)", k->id,
             (int)k->pid);
    return true;
}

/* Messages of that execution are the gateway's own: no client sees them. */
bool kenv__parent(const kernel_t *k, const jmsg_t *m)
{
    const char *id = kenv__id(k);
    return id[0] && memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, id, strlen(id));
}
