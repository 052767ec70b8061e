#include "protocol/rpc.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ident.h"
#include "common/log.h"
#include "common/util.h"

/* ---- the allowlist: the only place a method name means anything ---- */

/* One row per method reads best: */
/* clang-format off */
#define MKM    RPC_OBJ_MULTI_KERNEL_MANAGER
#define KM     RPC_OBJ_KERNEL_MANAGER
#define KC     RPC_OBJ_CLIENT
#define VALUE  RPC_RET_VALUE
#define REQ    RPC_P_REQUIRED
#define NUL    RPC_P_NULLABLE
#define KWONLY RPC_P_KWONLY

#define D_ABSENT  {.type = RPC_T_NONE}
#define D_NULL    {.type = RPC_T_NULL}
#define D_BOOL(x) {.type = RPC_T_BOOL, .b = (x)}
#define D_INT(x)  {.type = RPC_T_INT, .i = (x)}
#define D_NUM(x)  {.type = RPC_T_NUM, .n = (x)}
#define D_STR(x)  {.type = RPC_T_STR, .s = (x), .len = sizeof(x) - 1}

#define STR(nm, fl, lo, hi, d) {.name = nm, .type = RPC_T_STR, .flags = fl, .min = lo, .max = hi, \
                                .def = d}
#define INT(nm, fl, lo, hi, d) {.name = nm, .type = RPC_T_INT, .flags = fl, .min = lo, .max = hi, \
                                .def = d}
#define NUM(nm, fl, lo, hi, d) {.name = nm, .type = RPC_T_NUM, .flags = fl, .min = lo, .max = hi, \
                                .def = d}
#define BOOL(nm, fl, d)        {.name = nm, .type = RPC_T_BOOL, .flags = fl, .def = d}
#define CHOICE(nm, fl, ch, d)  {.name = nm, .type = RPC_T_STR, .flags = fl, .max = RPC_KEY_MAX, \
                                .choices = ch, .def = d}
#define DICT(nm, fl, n, it, keys, pfx, d) {.name = nm, .type = RPC_T_DICT, .flags = fl, .max = n, \
                                           .item = it, .choices = keys, .prefix = pfx, .def = d}
#define END {.name = NULL}

#define KERNEL_ID STR("kernel_id", REQ | RPC_P_PRINTABLE, 1, RPC_REF_ID_MAX, D_ABSENT)
#define CODE      STR("code", REQ, 0, RPC_CODE_MAX, D_ABSENT)
#define NOW       BOOL("now", 0, D_BOOL(false))
#define RESTART   BOOL("restart", 0, D_BOOL(false))
#define CURSOR    INT("cursor_pos", NUL, 0, RPC_CODE_MAX, D_NULL)
#define TIMEOUT   NUM("timeout", NUL, 0, 3600, D_NULL)
#define INT32(nm) INT(nm, KWONLY | NUL, -2147483648.0, 2147483647.0, D_ABSENT)

/* values of the dict parameters */
static const rpc_param_t env_value = STR("value", 0, 0, 4096, D_ABSENT);
static const rpc_param_t limit_value = INT("value", 0, 1, 1125899906842624.0 /* 2^50 */, D_ABSENT);
static const rpc_param_t expr_value = STR("value", 0, 0, 65536, D_ABSENT);
/* as gateway/http.c accepts them for POST /api/kernels */
static const char *const limit_keys[] = {"cpu", "exec_timeout", "memory", "output_bytes", "pids",
                                         "workspace", NULL};
static const char *const hist_types[] = {"range", "tail", "search", NULL};

/* Sorted by (obj, name); row i handles enum rpc_method i (test_rpc checks both). Parameters in
 * jupyter_client's order. */
static const rpc_spec_t table[] = {
    {MKM, "get_kernel", RPC_MKM_GET_KERNEL, RPC_RET_KERNEL_MANAGER, {KERNEL_ID, END}},
    {MKM, "interrupt_kernel", RPC_MKM_INTERRUPT_KERNEL, VALUE, {KERNEL_ID, END}},
    {MKM, "list_kernel_ids", RPC_MKM_LIST_KERNEL_IDS, VALUE, {END}},
    {MKM, "restart_kernel", RPC_MKM_RESTART_KERNEL, VALUE, {KERNEL_ID, NOW, END}},
    {MKM, "shutdown_kernel", RPC_MKM_SHUTDOWN_KERNEL, VALUE, {KERNEL_ID, NOW, RESTART, END}},
    {MKM, "start_kernel", RPC_MKM_START_KERNEL, VALUE, /* returns the kernel id */
     {STR("kernel_name", KWONLY | NUL | RPC_P_NAME, 1, 128, D_NULL), /* None: the default */
      DICT("env", KWONLY | NUL | RPC_P_ENVNAME, 32, &env_value, NULL, "KERNEL_", D_NULL),
      STR("workspace", KWONLY | NUL | RPC_P_NAME, 1, 255, D_NULL),
      DICT("limits", KWONLY | NUL, 6, &limit_value, limit_keys, NULL, D_NULL), END}},

    {KM, "client", RPC_KM_CLIENT, RPC_RET_CLIENT, {END}},
    {KM, "interrupt_kernel", RPC_KM_INTERRUPT_KERNEL, VALUE, {END}},
    {KM, "is_alive", RPC_KM_IS_ALIVE, VALUE, {END}},
    {KM, "restart_kernel", RPC_KM_RESTART_KERNEL, VALUE, {NOW, END}},
    {KM, "shutdown_kernel", RPC_KM_SHUTDOWN_KERNEL, VALUE, {NOW, RESTART, END}},

    {KC, "comm_info", RPC_KC_COMM_INFO, VALUE, {STR("target_name", NUL, 0, 256, D_NULL), END}},
    {KC, "complete", RPC_KC_COMPLETE, VALUE, {CODE, CURSOR, END}},
    {KC, "execute", RPC_KC_EXECUTE, VALUE, /* returns the msg_id */
     {CODE, BOOL("silent", 0, D_BOOL(false)), BOOL("store_history", 0, D_BOOL(true)),
      DICT("user_expressions", NUL, 16, &expr_value, NULL, NULL, D_NULL),
      BOOL("allow_stdin", NUL, D_NULL), BOOL("stop_on_error", 0, D_BOOL(true)), END}},
    {KC, "get_iopub_msg", RPC_KC_GET_IOPUB_MSG, VALUE, {TIMEOUT, END}},
    {KC, "get_shell_msg", RPC_KC_GET_SHELL_MSG, VALUE, {TIMEOUT, END}},
    {KC, "get_stdin_msg", RPC_KC_GET_STDIN_MSG, VALUE, {TIMEOUT, END}},
    {KC, "history", RPC_KC_HISTORY, VALUE,
     {BOOL("raw", 0, D_BOOL(true)), BOOL("output", 0, D_BOOL(false)),
      CHOICE("hist_access_type", 0, hist_types, D_STR("range")), INT32("session"),
      INT32("start"), INT32("stop"), INT("n", KWONLY | NUL, 0, 100000, D_ABSENT),
      STR("pattern", KWONLY | NUL, 0, 1024, D_ABSENT), BOOL("unique", KWONLY, D_ABSENT), END}},
    {KC, "input", RPC_KC_INPUT, VALUE, {STR("string", REQ, 0, RPC_CODE_MAX, D_ABSENT), END}},
    {KC, "inspect", RPC_KC_INSPECT, VALUE,
     {CODE, CURSOR, INT("detail_level", 0, 0, 1, D_INT(0)), END}},
    {KC, "is_complete", RPC_KC_IS_COMPLETE, VALUE, {CODE, END}},
    {KC, "kernel_info", RPC_KC_KERNEL_INFO, VALUE, {END}},
    {KC, "start_channels", RPC_KC_START_CHANNELS, VALUE, {END}},
    {KC, "stop_channels", RPC_KC_STOP_CHANNELS, VALUE, {END}},
    {KC, "wait_for_ready", RPC_KC_WAIT_FOR_READY, VALUE,
     {NUM("timeout", 0, 0.001, 3600, D_NUM(60)), END}},
};
/* clang-format on */
_Static_assert(UTIL_ARRAY_SIZE(table) == RPC_METHOD_N, "one table row per enum rpc_method");
_Static_assert(RPC_KEY_MAX <= IDENT_ENVNAME_MAX, "env keys are bounded by RPC_KEY_MAX first");

static const char *const obj_names[RPC_OBJ_N] = {"multi_kernel_manager", "kernel_manager",
                                                 "client"};
static const char *const err_names[RPC_ERR_N] = {
    "", "TypeError", "ValueError", "AttributeError", "KeyError", "RuntimeError", "TimeoutError",
    "Empty"};
static const char *const type_names[] = {"absent", "None", "str", "int", "number", "bool", "dict"};

const rpc_spec_t *rpc_spec(enum rpc_method m)
{
    return (unsigned)m < RPC_METHOD_N ? &table[m] : NULL;
}

const char *rpc_obj_name(enum rpc_obj o)
{
    return (unsigned)o < RPC_OBJ_N ? obj_names[o] : "?";
}

const char *rpc_err_name(enum rpc_err e)
{
    return (unsigned)e < RPC_ERR_N ? err_names[e] : "?";
}

const char *rpc_type_name(enum rpc_type t)
{
    return (unsigned)t < UTIL_ARRAY_SIZE(type_names) ? type_names[t] : "?";
}

/* Binary search over the sorted table: the one lookup by name. */
static const rpc_spec_t *lookup(enum rpc_obj obj, const char *name)
{
    size_t lo = 0, hi = RPC_METHOD_N;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c =
            table[mid].obj != obj ? (table[mid].obj < obj ? -1 : 1) : strcmp(table[mid].name, name);
        if (c == 0)
            return &table[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- errors ---- */

int rpc_error_set(rpc_error_t *e, enum rpc_err type, const char *fmt, ...)
{
    UTIL_ERROR_SET(e, type, fmt);
    return -EINVAL;
}

const char *rpc_quote(char *out, const char *s, size_t len)
{
    log_quote(out, RPC_QUOTE_MAX, s, len);
    size_t n = strlen(out);
    for (size_t i = 1; i + 1 < n; i++)
        if ((unsigned char)out[i] >= 0x80 || out[i] == '\'')
            out[i] = '?';
    out[0] = out[n - 1] = '\'';
    return out;
}

/* ---- parsing ---- */


/* Copies a printable string of at most max bytes (min_len..max) into dst[max + 1]. */
static bool copy_id(const json_t *v, size_t min_len, size_t max, char *dst)
{
    if (!json_is_string(v))
        return false;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n < min_len || n > max || !util_printable(s, n))
        return false;
    memcpy(dst, s, n + 1);
    return true;
}

/* The call-specific fields; a problem becomes c->err (the request_id is already known). */
static void parse_call(json_t *root, rpc_call_t *c)
{
    char q[RPC_QUOTE_MAX];
    json_t *ref = json_object_get(root, "object_reference");
    if (!json_is_object(ref)) {
        rpc_error_set(&c->err, RPC_ERR_TYPE, "object_reference must be an object");
        return;
    }
    json_t *type = json_object_get(ref, "type");
    if (!json_is_string(type)) {
        rpc_error_set(&c->err, RPC_ERR_TYPE, "object_reference.type must be a string");
        return;
    }
    int obj;
    for (obj = 0; obj < RPC_OBJ_N; obj++)
        if (strcmp(json_string_value(type), obj_names[obj]) == 0)
            break;
    if (obj == RPC_OBJ_N) {
        rpc_error_set(&c->err, RPC_ERR_TYPE, "unknown object_reference type %s",
                      rpc_quote(q, json_string_value(type), json_string_length(type)));
        return;
    }
    c->obj = (enum rpc_obj)obj;
    if (!copy_id(json_object_get(ref, "id"), 0, RPC_REF_ID_MAX, c->ref_id)) {
        rpc_error_set(&c->err, RPC_ERR_TYPE,
                      "object_reference.id must be a printable string of at most %d bytes",
                      RPC_REF_ID_MAX);
        return;
    }
    json_t *m = json_object_get(root, "method");
    if (!json_is_string(m)) {
        rpc_error_set(&c->err, RPC_ERR_TYPE, "method must be a string");
        return;
    }
    size_t mlen = json_string_length(m);
    if (mlen == 0 || mlen > RPC_METHOD_MAX) {
        rpc_error_set(&c->err, RPC_ERR_ATTRIBUTE, "'%s' object has no allowed method %s",
                      obj_names[obj], rpc_quote(q, json_string_value(m), mlen));
        return;
    }
    memcpy(c->method, json_string_value(m), mlen + 1);
    json_t *args = json_object_get(root, "args"), *kwargs = json_object_get(root, "kwargs");
    if (args && !json_is_null(args) && !json_is_array(args)) {
        rpc_error_set(&c->err, RPC_ERR_TYPE, "args must be a list");
        return;
    }
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        rpc_error_set(&c->err, RPC_ERR_TYPE, "kwargs must be an object");
        return;
    }
    c->args = json_is_array(args) ? args : NULL;
    c->kwargs = json_is_object(kwargs) ? kwargs : NULL;
    if (json_array_size(c->args) > RPC_MAX_ARGS || json_object_size(c->kwargs) > RPC_MAX_ARGS)
        rpc_error_set(&c->err, RPC_ERR_TYPE, "too many arguments (at most %d of each kind)",
                      RPC_MAX_ARGS);
}

int rpc_parse(const char *data, size_t len, rpc_call_t *ret)
{
    json_error_t jerr;
    rpc_call_t c;
    if (len > RPC_MAX_MESSAGE_BYTES)
        return -EMSGSIZE;
    if (!util_json_depth_ok(data, len, RPC_MAX_DEPTH))
        return -EBADMSG;
    /* no JSON_DECODE_ANY: the top level is an object or array; no JSON_ALLOW_NUL: no NUL in
     * strings; duplicate keys would make kwargs ambiguous */
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return json_error_code(&jerr) == json_error_out_of_memory ? -ENOMEM : -EBADMSG;
    memset(&c, 0, sizeof(c));
    c.root = root;
    int r = -EBADMSG;
    json_t *type = json_object_get(root, "message_type");
    json_t *rid = json_object_get(root, "request_id");
    if (!json_is_string(type))
        goto fail;
    if (strcmp(json_string_value(type), "call_request") == 0) {
        c.kind = RPC_CALL_REQUEST;
        if (!copy_id(rid, 1, RPC_REQUEST_ID_MAX, c.request_id))
            goto fail;
        parse_call(root, &c);
    } else if (strcmp(json_string_value(type), "register_activity_request") == 0) {
        json_t *kid = json_object_get(root, "kernel_id");
        c.kind = RPC_REGISTER_ACTIVITY_REQUEST;
        if (rid && !json_is_null(rid) && !copy_id(rid, 1, RPC_REQUEST_ID_MAX, c.request_id))
            goto fail;
        if (kid && !json_is_null(kid) && !copy_id(kid, 1, RPC_REF_ID_MAX, c.kernel_id))
            goto fail;
    } else if (strcmp(json_string_value(type), "call_return_value") == 0) {
        /* a client's answer to a callback (a call_request the gateway sent it) */
        c.kind = RPC_CALL_RETURN_VALUE;
        if (!copy_id(rid, 1, RPC_REQUEST_ID_MAX, c.request_id))
            goto fail;
        c.value = json_object_get(root, "value"); /* absent: None */
    } else if (strcmp(json_string_value(type), "call_exception") == 0) {
        json_t *e = json_object_get(root, "error");
        json_t *et = json_object_get(e, "type"), *em = json_object_get(e, "message");
        c.kind = RPC_CALL_EXCEPTION;
        if (!copy_id(rid, 1, RPC_REQUEST_ID_MAX, c.request_id))
            goto fail;
        c.err.type = RPC_ERR_RUNTIME;
        if (json_is_string(et))
            for (int i = RPC_ERR_TYPE; i < RPC_ERR_N; i++)
                if (!strcmp(json_string_value(et), rpc_err_name((enum rpc_err)i)))
                    c.err.type = (enum rpc_err)i;
        if (json_is_string(em))
            rpc_quote(c.err.message, json_string_value(em), json_string_length(em));
        else
            snprintf(c.err.message, sizeof(c.err.message), "the client raised an exception");
    } else {
        r = -ENOENT;
        goto fail;
    }
    *ret = c;
    return 0;
fail:
    json_decref(root);
    return r;
}

void rpc_call_fini(rpc_call_t *c)
{
    json_decref(c->root);
    c->root = c->args = c->kwargs = c->value = NULL;
}

/* ---- binding ---- */

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "dict";
    case JSON_ARRAY:
        return "list";
    case JSON_STRING:
        return "str";
    case JSON_INTEGER:
        return "int";
    case JSON_REAL:
        return "float";
    case JSON_TRUE:
    case JSON_FALSE:
        return "bool";
    default:
        return "None";
    }
}

static bool in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

/* Checks v against p; what names it in messages ("argument 'code'"). */
static int check(const rpc_spec_t *sp,
                 const char *what,
                 const rpc_param_t *p,
                 json_t *v,
                 rpc_val_t *out,
                 rpc_error_t *err)
{
    rpc_val_t r = {.type = p->type};
    if (json_is_null(v)) {
        if (!(p->flags & RPC_P_NULLABLE))
            goto bad_type;
        *out = (rpc_val_t){.type = RPC_T_NULL};
        return 0;
    }
    switch (p->type) {
    case RPC_T_STR:
        if (!json_is_string(v))
            goto bad_type;
        r.s = json_string_value(v);
        r.len = json_string_length(v);
        if ((double)r.len < p->min || (double)r.len > p->max)
            return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s must be %.0f to %.0f bytes long",
                                 sp->name, what, p->min, p->max);
        if ((p->flags & RPC_P_PRINTABLE) && !util_printable(r.s, r.len))
            return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s must be printable ASCII", sp->name,
                                 what);
        assert(!(p->flags & RPC_P_NAME) || p->max <= IDENT_NAME_MAX);
        if ((p->flags & RPC_P_NAME) && !ident_ok(r.s, r.len, IDENT_NAME))
            return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s must be a name ([A-Za-z0-9._-])",
                                 sp->name, what);
        if (p->choices && !in_list(p->choices, r.s))
            return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s is not an allowed value", sp->name,
                                 what);
        break;
    case RPC_T_INT:
        if (!json_is_integer(v))
            goto bad_type;
        r.i = json_integer_value(v);
        if (r.i < (long long)p->min || r.i > (long long)p->max)
            return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s must be in %.0f..%.0f", sp->name,
                                 what, p->min, p->max);
        break;
    case RPC_T_NUM:
        if (!json_is_number(v))
            goto bad_type;
        r.n = json_number_value(v);
        if (!(r.n >= p->min && r.n <= p->max))
            return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s must be in %g..%g", sp->name, what,
                                 p->min, p->max);
        break;
    case RPC_T_BOOL:
        if (!json_is_boolean(v))
            goto bad_type;
        r.b = json_is_true(v);
        break;
    case RPC_T_DICT: {
        const char *key;
        json_t *item;
        if (!json_is_object(v))
            goto bad_type;
        if ((double)json_object_size(v) > p->max)
            return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s has more than %.0f items", sp->name,
                                 what, p->max);
        json_object_foreach(v, key, item)
        {
            char q[RPC_QUOTE_MAX], item_what[RPC_QUOTE_MAX + 64];
            size_t klen = strlen(key); /* jansson refuses NUL in keys */
            rpc_val_t ignored;
            rpc_quote(q, key, klen);
            if (klen == 0 || klen > RPC_KEY_MAX ||
                (p->prefix && strncmp(key, p->prefix, strlen(p->prefix)) != 0) ||
                ((p->flags & RPC_P_ENVNAME) && !ident_ok(key, klen, IDENT_ENVNAME)) ||
                (p->choices && !in_list(p->choices, key)))
                return rpc_error_set(err, RPC_ERR_VALUE, "%s() %s: key %s is not allowed", sp->name,
                                     what, q);
            snprintf(item_what, sizeof(item_what), "%s item %s", what, q);
            if (check(sp, item_what, p->item, item, &ignored, err) < 0)
                return -EINVAL;
        }
        r.d = v;
        break;
    }
    default:
        assert(!"parameter type");
        goto bad_type;
    }
    *out = r;
    return 0;
bad_type:
    return rpc_error_set(err, RPC_ERR_TYPE, "%s() %s must be %s%s, not %s", sp->name, what,
                         type_names[p->type], (p->flags & RPC_P_NULLABLE) ? " or None" : "",
                         json_type_name(v));
}

static size_t nparams(const rpc_spec_t *sp)
{
    size_t n = 0;
    while (n < RPC_MAX_PARAMS && sp->params[n].name)
        n++;
    return n;
}

int rpc_bind(const rpc_call_t *c, rpc_args_t *ret_args, rpc_error_t *ret_err)
{
    assert(c->kind == RPC_CALL_REQUEST);
    char q[RPC_QUOTE_MAX], what[RPC_QUOTE_MAX + 16];
    rpc_args_t a;
    bool given[RPC_MAX_PARAMS] = {false};
    if (c->err.type != RPC_ERR_NONE) {
        *ret_err = c->err;
        return -EINVAL;
    }
    const rpc_spec_t *sp = lookup(c->obj, c->method);
    if (!sp)
        return rpc_error_set(ret_err, RPC_ERR_ATTRIBUTE, "'%s' object has no allowed method %s",
                             obj_names[c->obj], rpc_quote(q, c->method, strlen(c->method)));
    memset(&a, 0, sizeof(a));
    a.method = sp->method;
    a.spec = sp;
    size_t np = nparams(sp), npos = 0;
    while (npos < np && !(sp->params[npos].flags & RPC_P_KWONLY))
        npos++;

    size_t nargs = json_array_size(c->args);
    if (nargs > npos)
        return rpc_error_set(ret_err, RPC_ERR_TYPE,
                             "%s() takes at most %zu positional arguments (%zu given)", sp->name,
                             npos, nargs);
    for (size_t i = 0; i < nargs; i++) {
        snprintf(what, sizeof(what), "argument '%s'", sp->params[i].name);
        if (check(sp, what, &sp->params[i], json_array_get(c->args, i), &a.v[i], ret_err) < 0)
            return -EINVAL;
        given[i] = true;
    }

    const char *key;
    json_t *v;
    json_object_foreach(c->kwargs, key, v)
    {
        size_t i;
        for (i = 0; i < np; i++)
            if (strcmp(sp->params[i].name, key) == 0)
                break;
        if (i == np)
            return rpc_error_set(ret_err, RPC_ERR_TYPE,
                                 "%s() got an unexpected keyword argument %s", sp->name,
                                 rpc_quote(q, key, strlen(key)));
        if (given[i])
            return rpc_error_set(ret_err, RPC_ERR_TYPE,
                                 "%s() got multiple values for argument '%s'", sp->name, key);
        snprintf(what, sizeof(what), "argument '%s'", sp->params[i].name);
        if (check(sp, what, &sp->params[i], v, &a.v[i], ret_err) < 0)
            return -EINVAL;
        given[i] = true;
    }

    for (size_t i = 0; i < np; i++) {
        if (given[i])
            continue;
        if (sp->params[i].flags & RPC_P_REQUIRED)
            return rpc_error_set(ret_err, RPC_ERR_TYPE, "%s() missing required argument '%s'",
                                 sp->name, sp->params[i].name);
        a.v[i] = sp->params[i].def;
    }
    *ret_args = a;
    return 0;
}

const rpc_val_t *rpc_args_get(const rpc_args_t *a, const char *name)
{
    for (size_t i = 0; i < nparams(a->spec); i++)
        if (strcmp(a->spec->params[i].name, name) == 0)
            return &a->v[i];
    return NULL;
}

/* ---- replies ---- */

/* {"message_type": type, "request_id": id, key: val}; takes val (json_object_set_new takes its
 * value even when it fails, and when the object is NULL). */
static char *reply(const char *type, const char *request_id, const char *key, json_t *val)
{
    char *s = NULL;
    json_t *o = json_object();
    int r = json_object_set_new(o, "message_type", json_string(type));
    r |= json_object_set_new(o, "request_id", json_string(request_id ? request_id : ""));
    r |= json_object_set_new(o, key, val);
    if (r == 0 && request_id)
        s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        errno = request_id ? ENOMEM : EINVAL;
    return s;
}

/* {k1: v1, k2: v2}; takes v1 and v2. */
static json_t *pair(const char *k1, json_t *v1, const char *k2, json_t *v2)
{
    json_t *o = json_object();
    int r = json_object_set_new(o, k1, v1);
    r |= json_object_set_new(o, k2, v2);
    if (r < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *rpc_reply_value(const char *request_id, json_t *value)
{
    return reply("call_return_value", request_id, "value", value);
}

char *rpc_reply_ref(const char *request_id, enum rpc_obj type, const char *id)
{
    assert((unsigned)type < RPC_OBJ_N);
    json_t *ref = pair("type", json_string(obj_names[type]), "id", json_string(id ? id : ""));
    return reply("call_return_object_reference", request_id, "object_reference", ref);
}

char *rpc_reply_exception(const char *request_id, const rpc_error_t *err)
{
    assert(err->type > RPC_ERR_NONE && err->type < RPC_ERR_N);
    char msg[RPC_ERROR_MAX];
    size_t n = strnlen(err->message, sizeof(msg) - 1);
    json_t *m = json_stringn(err->message, n);
    if (!m) { /* a gateway message quoting raw bytes, or cut inside a UTF-8 sequence */
        for (size_t i = 0; i < n; i++)
            msg[i] = util_printable(&err->message[i], 1) ? err->message[i] : '?';
        msg[n] = '\0';
        m = json_string(msg);
    }
    json_t *e = pair("type", json_string(err_names[err->type]), "message", m);
    return reply("call_exception", request_id, "error", e);
}
