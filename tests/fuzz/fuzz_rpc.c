/* rpc_parse + rpc_bind on untrusted /channel messages. Invariants: a bind that succeeds names a
 * table row for the call's object and method, and every argument value satisfies its parameter
 * spec (checked here independently of rpc.c) and is the value the client sent, by position or
 * by keyword; out-params are written only on success; every exception message is printable
 * ASCII; every reply is JSON that echoes the request_id. */
#include "fuzz.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/rpc.h"



static int printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

static int listed(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return 1;
    return 0;
}

static void check_value(const rpc_param_t *p, const rpc_val_t *v)
{
    if (v->type == RPC_T_NONE) {
        FUZZ_CHECK(!(p->flags & RPC_P_REQUIRED) && p->def.type == RPC_T_NONE);
        return;
    }
    if (v->type == RPC_T_NULL) {
        FUZZ_CHECK(p->flags & RPC_P_NULLABLE);
        return;
    }
    FUZZ_CHECK(v->type == p->type);
    switch (p->type) {
    case RPC_T_STR:
        FUZZ_CHECK(v->s && strlen(v->s) == v->len);
        FUZZ_CHECK((double)v->len >= p->min && (double)v->len <= p->max);
        if (p->flags & RPC_P_PRINTABLE)
            FUZZ_CHECK(printable(v->s, v->len));
        if (p->flags & RPC_P_NAME)
            FUZZ_CHECK(v->len > 0 && v->s[0] != '.' && v->s[0] != '-' &&
                       strspn(v->s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                    "._-") == v->len);
        if (p->choices)
            FUZZ_CHECK(listed(p->choices, v->s));
        break;
    case RPC_T_INT:
        FUZZ_CHECK((double)v->i >= p->min && (double)v->i <= p->max);
        break;
    case RPC_T_NUM:
        FUZZ_CHECK(isfinite(v->n) && v->n >= p->min && v->n <= p->max);
        break;
    case RPC_T_BOOL:
        break;
    case RPC_T_DICT: {
        const char *key;
        json_t *item;
        FUZZ_CHECK(json_is_object(v->d) && (double)json_object_size(v->d) <= p->max);
        json_object_foreach(v->d, key, item)
        {
            size_t n = strlen(key);
            FUZZ_CHECK(n > 0 && n <= RPC_KEY_MAX);
            if (p->prefix)
                FUZZ_CHECK(strncmp(key, p->prefix, strlen(p->prefix)) == 0);
            if (p->flags & RPC_P_ENVNAME)
                FUZZ_CHECK(strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789_") == n);
            if (p->choices)
                FUZZ_CHECK(listed(p->choices, key));
            FUZZ_CHECK(p->item && !json_is_null(item)); /* items are not nullable */
            rpc_val_t iv = {.type = p->item->type};
            switch (p->item->type) {
            case RPC_T_STR:
                FUZZ_CHECK(json_is_string(item));
                iv.s = json_string_value(item);
                iv.len = json_string_length(item);
                break;
            case RPC_T_INT:
                FUZZ_CHECK(json_is_integer(item));
                iv.i = json_integer_value(item);
                break;
            default:
                FUZZ_CHECK(!"dict item type");
            }
            check_value(p->item, &iv);
        }
        break;
    }
    default:
        FUZZ_CHECK(!"parameter type");
    }
}

/* v is what the client sent as j. */
static void check_same(const rpc_val_t *v, json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_NULL:
        FUZZ_CHECK(v->type == RPC_T_NULL);
        break;
    case JSON_STRING:
        FUZZ_CHECK(v->type == RPC_T_STR && v->s == json_string_value(j));
        break;
    case JSON_INTEGER:
        FUZZ_CHECK((v->type == RPC_T_INT && v->i == json_integer_value(j)) ||
                   (v->type == RPC_T_NUM && v->n == (double)json_integer_value(j)));
        break;
    case JSON_REAL:
        FUZZ_CHECK(v->type == RPC_T_NUM && v->n == json_real_value(j));
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        FUZZ_CHECK(v->type == RPC_T_BOOL && v->b == json_is_true(j));
        break;
    case JSON_OBJECT:
        FUZZ_CHECK(v->type == RPC_T_DICT && v->d == j);
        break;
    default:
        FUZZ_CHECK(!"a list is never an argument value");
    }
}

static void check_bound(const rpc_call_t *c, const rpc_args_t *a)
{
    FUZZ_CHECK((unsigned)a->method < RPC_METHOD_N);
    const rpc_spec_t *sp = rpc_spec(a->method);
    FUZZ_CHECK(sp && a->spec == sp && sp->method == a->method);
    FUZZ_CHECK(sp->obj == c->obj && strcmp(sp->name, c->method) == 0);
    FUZZ_CHECK(c->method[0] != '_' && !strchr(c->method, '.'));
    size_t np = 0;
    while (np < RPC_MAX_PARAMS && sp->params[np].name)
        np++;
    FUZZ_CHECK(np < RPC_MAX_PARAMS);
    for (size_t i = 0; i < RPC_MAX_PARAMS; i++) {
        if (i < np)
            check_value(&sp->params[i], &a->v[i]);
        else
            FUZZ_CHECK(a->v[i].type == RPC_T_NONE);
    }
    /* positional then keyword, each landing on its parameter */
    size_t nargs = json_array_size(c->args);
    FUZZ_CHECK(nargs <= np && nargs <= RPC_MAX_ARGS);
    for (size_t i = 0; i < nargs; i++) {
        FUZZ_CHECK(!(sp->params[i].flags & RPC_P_KWONLY));
        check_same(&a->v[i], json_array_get(c->args, i));
    }
    const char *key;
    json_t *j;
    json_object_foreach(c->kwargs, key, j)
    {
        const rpc_val_t *v = rpc_args_get(a, key);
        FUZZ_CHECK(v != NULL && (size_t)(v - a->v) >= nargs);
        check_same(v, j);
    }
}

/* reply is one JSON object of type `type` echoing request_id. */
static json_t *check_reply(char *reply, const char *type, const char *request_id)
{
    json_error_t je;
    FUZZ_CHECK(reply != NULL);
    json_t *j = json_loads(reply, 0, &je);
    free(reply);
    FUZZ_CHECK(json_is_object(j));
    FUZZ_CHECK(strcmp(json_string_value(json_object_get(j, "message_type")), type) == 0);
    FUZZ_CHECK(strcmp(json_string_value(json_object_get(j, "request_id")), request_id) == 0);
    return j;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rpc_call_t c;
    memset(&c, 0x5a, sizeof(c));
    int r = rpc_parse((const char *)data, size, &c);
    FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EMSGSIZE || r == -ENOENT || r == -ENOMEM);
    if (r < 0) { /* ret untouched */
        unsigned char pattern[sizeof(c)];
        memset(pattern, 0x5a, sizeof(pattern));
        FUZZ_CHECK(memcmp(&c, pattern, sizeof(c)) == 0);
        return 0;
    }
    size_t idlen = strnlen(c.request_id, sizeof(c.request_id));
    FUZZ_CHECK(idlen <= RPC_REQUEST_ID_MAX && printable(c.request_id, idlen));
    if (c.kind == RPC_REGISTER_ACTIVITY_REQUEST) {
        size_t n = strnlen(c.kernel_id, sizeof(c.kernel_id));
        FUZZ_CHECK(n <= RPC_REF_ID_MAX && printable(c.kernel_id, n));
        rpc_call_fini(&c);
        return 0;
    }
    if (c.kind == RPC_CALL_RETURN_VALUE || c.kind == RPC_CALL_EXCEPTION) {
        FUZZ_CHECK(idlen > 0);
        if (c.kind == RPC_CALL_EXCEPTION) {
            size_t n = strnlen(c.err.message, sizeof(c.err.message));
            FUZZ_CHECK(c.err.type > RPC_ERR_NONE && c.err.type < RPC_ERR_N);
            FUZZ_CHECK(n > 0 && n < sizeof(c.err.message) && printable(c.err.message, n));
        }
        rpc_call_fini(&c);
        return 0;
    }
    FUZZ_CHECK(c.kind == RPC_CALL_REQUEST && idlen > 0);
    if (c.err.type == RPC_ERR_NONE) {
        size_t n = strnlen(c.ref_id, sizeof(c.ref_id));
        FUZZ_CHECK((unsigned)c.obj < RPC_OBJ_N);
        FUZZ_CHECK(n <= RPC_REF_ID_MAX && printable(c.ref_id, n));
        n = strnlen(c.method, sizeof(c.method));
        FUZZ_CHECK(n > 0 && n <= RPC_METHOD_MAX);
        FUZZ_CHECK(!c.args || (json_is_array(c.args) && json_array_size(c.args) <= RPC_MAX_ARGS));
        FUZZ_CHECK(!c.kwargs ||
                   (json_is_object(c.kwargs) && json_object_size(c.kwargs) <= RPC_MAX_ARGS));
    }

    rpc_args_t a, a0;
    rpc_error_t e, e0;
    memset(&a, 0xa5, sizeof(a));
    memset(&e, 0xa5, sizeof(e));
    memcpy(&a0, &a, sizeof(a));
    memcpy(&e0, &e, sizeof(e));
    r = rpc_bind(&c, &a, &e);
    if (r == 0) {
        FUZZ_CHECK(memcmp(&e, &e0, sizeof(e)) == 0);
        check_bound(&c, &a);
        json_t *j;
        if (a.spec->ret == RPC_RET_VALUE) {
            j = check_reply(rpc_reply_value(c.request_id, json_string(c.method)),
                            "call_return_value", c.request_id);
        } else {
            enum rpc_obj o =
                a.spec->ret == RPC_RET_CLIENT ? RPC_OBJ_CLIENT : RPC_OBJ_KERNEL_MANAGER;
            j = check_reply(rpc_reply_ref(c.request_id, o, c.ref_id),
                            "call_return_object_reference", c.request_id);
        }
        json_decref(j);
    } else {
        FUZZ_CHECK(r == -EINVAL);
        FUZZ_CHECK(memcmp(&a, &a0, sizeof(a)) == 0);
        FUZZ_CHECK(e.type == RPC_ERR_TYPE || e.type == RPC_ERR_VALUE ||
                   e.type == RPC_ERR_ATTRIBUTE);
        size_t n = strnlen(e.message, sizeof(e.message));
        FUZZ_CHECK(n > 0 && n < sizeof(e.message) && printable(e.message, n));
        json_t *j =
            check_reply(rpc_reply_exception(c.request_id, &e), "call_exception", c.request_id);
        json_t *err = json_object_get(j, "error");
        FUZZ_CHECK(strcmp(json_string_value(json_object_get(err, "type")), rpc_err_name(e.type)) ==
                   0);
        FUZZ_CHECK(strcmp(json_string_value(json_object_get(err, "message")), e.message) == 0);
        json_decref(j);
    }
    rpc_call_fini(&c);
    return 0;
}
