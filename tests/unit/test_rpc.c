/* protocol/rpc.c: parsing /channel messages, binding calls against the allowlist, replies, and
 * docs/rpc.md kept in sync with the table. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#include "protocol/rpc.h"

static const char *const objs[] = {"multi_kernel_manager", "kernel_manager", "client"};

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, f);
    if (vasprintf(&s, f, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static char *call_msg(const char *obj, const char *method, const char *args, const char *kwargs)
{
    return fmt("{\"message_type\":\"call_request\",\"request_id\":\"r-1\",\"object_reference\":"
               "{\"type\":\"%s\",\"id\":\"ref-1\"},\"method\":\"%s\",\"args\":%s,\"kwargs\":%s}",
               obj, method, args, kwargs);
}

static bool ascii_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

/* Parses and binds msg. Returns the parse error, or the bind result; c is live when the parse
 * succeeded (c->root != NULL). */
static int run(const char *msg, size_t len, rpc_call_t *c, rpc_args_t *a, rpc_error_t *e)
{
    memset(c, 0, sizeof(*c));
    memset(e, 0, sizeof(*e));
    int r = rpc_parse(msg, len, c);
    if (r < 0)
        return r;
    CHECK_INT(c->kind, RPC_CALL_REQUEST);
    r = rpc_bind(c, a, e);
    if (r < 0) {
        CHECK_INT(r, -EINVAL);
        CHECK(e->type > RPC_ERR_NONE && e->type < RPC_ERR_N);
        CHECK(e->message[0] != '\0');
        CHECK(ascii_printable(e->message));
    }
    return r;
}

/* ---- the table ---- */

static size_t nparams(const rpc_spec_t *sp)
{
    size_t n = 0;
    while (n < RPC_MAX_PARAMS && sp->params[n].name)
        n++;
    return n;
}

static void test_table(void)
{
    CHECK_CASE("table");
    for (int m = 0; m < RPC_METHOD_N; m++) {
        const rpc_spec_t *sp = rpc_spec((enum rpc_method)m);
        CHECK(sp != NULL);
        if (!sp)
            continue;
        CHECK_CASE(sp->name);
        CHECK_INT(sp->method, m);
        CHECK((unsigned)sp->obj < RPC_OBJ_N);
        CHECK(sp->name[0] >= 'a' && sp->name[0] <= 'z');
        CHECK(strspn(sp->name, "abcdefghijklmnopqrstuvwxyz_") == strlen(sp->name));
        CHECK(strlen(sp->name) <= RPC_METHOD_MAX);
        if (m > 0) { /* strictly sorted by (obj, name) */
            const rpc_spec_t *prev = rpc_spec((enum rpc_method)(m - 1));
            CHECK(prev->obj < sp->obj ||
                  (prev->obj == sp->obj && strcmp(prev->name, sp->name) < 0));
        }
        size_t np = nparams(sp);
        CHECK(np < RPC_MAX_PARAMS); /* terminated */
        bool kwonly = false, optional = false;
        for (size_t i = 0; i < np; i++) {
            const rpc_param_t *p = &sp->params[i];
            CHECK(p->type >= RPC_T_STR && p->type <= RPC_T_DICT);
            CHECK(p->min <= p->max || p->type == RPC_T_BOOL);
            if (p->flags & RPC_P_KWONLY)
                kwonly = true;
            else
                CHECK(!kwonly); /* positional ones first */
            if (p->flags & RPC_P_REQUIRED) {
                CHECK(!optional && !kwonly); /* Python: no required after optional */
                CHECK_INT(p->def.type, RPC_T_NONE);
            } else if (!kwonly) {
                optional = true;
            }
            if (p->def.type == RPC_T_NULL)
                CHECK(p->flags & RPC_P_NULLABLE);
            else if (p->def.type != RPC_T_NONE)
                CHECK_INT(p->def.type, p->type);
            if (p->type == RPC_T_DICT)
                CHECK(p->item != NULL &&
                      (p->item->type == RPC_T_STR || p->item->type == RPC_T_INT));
            for (size_t j = 0; j < i; j++)
                CHECK(strcmp(sp->params[j].name, p->name) != 0);
        }
    }
    CHECK(rpc_spec(RPC_METHOD_N) == NULL);
    CHECK(rpc_spec((enum rpc_method) - 1) == NULL);
    CHECK_STR(rpc_err_name(RPC_ERR_ATTRIBUTE), "AttributeError");
    CHECK_STR(rpc_obj_name(RPC_OBJ_CLIENT), "client");
}

/* ---- accepted calls ---- */

static const struct {
    int obj;
    const char *method, *args, *kwargs;
} valid[] = {
    {0, "get_kernel", "[\"k1\"]", "{}"},
    {0, "get_kernel", "[]", "{\"kernel_id\":\"k1\"}"},
    {0, "interrupt_kernel", "[\"k1\"]", "{}"},
    {0, "interrupt_kernel", "[]", "{\"kernel_id\":\"k1\"}"},
    {0, "list_kernel_ids", "[]", "{}"},
    {0, "restart_kernel", "[\"k1\",true]", "{}"},
    {0, "restart_kernel", "[]", "{\"kernel_id\":\"k1\",\"now\":true}"},
    {0, "shutdown_kernel", "[\"k1\",false,true]", "{}"},
    {0, "shutdown_kernel", "[\"k1\"]", "{\"restart\":true,\"now\":false}"},
    {0, "start_kernel", "[]", "{}"},
    {0, "start_kernel", "null", "null"},
    {0, "start_kernel", "[]",
     "{\"kernel_name\":\"python3\",\"env\":{\"KERNEL_USERNAME\":\"ann\",\"KERNEL_X_1\":\"\"},"
     "\"workspace\":\"ws-1.a\",\"limits\":{\"memory\":1073741824,\"cpu\":500,\"exec_timeout\":60}"
     "}"},
    {0, "start_kernel", "[]",
     "{\"kernel_name\":null,\"env\":null,\"workspace\":null,\"limits\":{}}"},
    {1, "client", "[]", "{}"},
    {1, "interrupt_kernel", "[]", "{}"},
    {1, "is_alive", "[]", "{}"},
    {1, "restart_kernel", "[true]", "{}"},
    {1, "restart_kernel", "[]", "{\"now\":true}"},
    {1, "shutdown_kernel", "[true,false]", "{}"},
    {1, "shutdown_kernel", "[]", "{\"now\":true,\"restart\":true}"},
    {2, "comm_info", "[\"jupyter.widget\"]", "{}"},
    {2, "comm_info", "[]", "{\"target_name\":null}"},
    {2, "complete", "[\"impo\",4]", "{}"},
    {2, "complete", "[]", "{\"code\":\"impo\",\"cursor_pos\":null}"},
    {2, "execute", "[\"1+1\",false,true,{\"x\":\"a\"},null,true]", "{}"},
    {2, "execute", "[]",
     "{\"code\":\"1+1\",\"silent\":true,\"store_history\":false,\"user_expressions\":null,"
     "\"allow_stdin\":false,\"stop_on_error\":false}"},
    {2, "get_iopub_msg", "[1.5]", "{}"},
    {2, "get_iopub_msg", "[]", "{\"timeout\":null}"},
    {2, "get_shell_msg", "[0]", "{}"},
    {2, "get_shell_msg", "[]", "{\"timeout\":3600}"},
    {2, "get_stdin_msg", "[null]", "{}"},
    {2, "get_stdin_msg", "[]", "{\"timeout\":0.25}"},
    {2, "history", "[true,false,\"tail\"]", "{\"n\":10}"},
    {2, "history", "[]",
     "{\"raw\":false,\"output\":true,\"hist_access_type\":\"search\",\"pattern\":\"im*\","
     "\"unique\":true,\"n\":null}"},
    {2, "history", "[]",
     "{\"hist_access_type\":\"range\",\"session\":-1,\"start\":1,\"stop\":null}"},
    {2, "input", "[\"yes\"]", "{}"},
    {2, "input", "[]", "{\"string\":\"\"}"},
    {2, "inspect", "[\"print\",5,1]", "{}"},
    {2, "inspect", "[]", "{\"code\":\"print\",\"cursor_pos\":0,\"detail_level\":0}"},
    {2, "is_complete", "[\"for i in x:\"]", "{}"},
    {2, "is_complete", "[]", "{\"code\":\"\"}"},
    {2, "kernel_info", "[]", "{}"},
    {2, "start_channels", "[]", "{}"},
    {2, "stop_channels", "[]", "{}"},
    {2, "wait_for_ready", "[30]", "{}"},
    {2, "wait_for_ready", "[]", "{\"timeout\":0.001}"},
};

static void test_valid(void)
{
    bool pos[RPC_METHOD_N] = {false}, kw[RPC_METHOD_N] = {false};
    for (size_t k = 0; k < sizeof(valid) / sizeof(valid[0]); k++) {
        char name[128];
        rpc_call_t c;
        rpc_args_t a;
        rpc_error_t e;
        snprintf(name, sizeof(name), "valid %s.%s %s %s", objs[valid[k].obj], valid[k].method,
                 valid[k].args, valid[k].kwargs);
        CHECK_CASE(name);
        char *msg = call_msg(objs[valid[k].obj], valid[k].method, valid[k].args, valid[k].kwargs);
        int r = run(msg, strlen(msg), &c, &a, &e);
        CHECK_INT(r, 0);
        if (r < 0)
            fprintf(stderr, "  %s: %s\n", rpc_err_name(e.type), e.message);
        if (r == 0) {
            CHECK_INT(a.spec->obj, valid[k].obj);
            CHECK_STR(a.spec->name, valid[k].method);
            CHECK(a.spec == rpc_spec(a.method));
            CHECK_STR(c.request_id, "r-1");
            CHECK_STR(c.ref_id, "ref-1");
            size_t np = nparams(a.spec);
            bool has_pos = np > 0 && !(a.spec->params[0].flags & RPC_P_KWONLY);
            pos[a.method] |= !has_pos || json_array_size(c.args) > 0;
            kw[a.method] |= np == 0 || json_object_size(c.kwargs) > 0;
            for (size_t i = 0; i < np; i++) /* required ones are there, the rest typed */
                CHECK(a.v[i].type == a.spec->params[i].type || a.v[i].type == RPC_T_NULL ||
                      (a.v[i].type == RPC_T_NONE && !(a.spec->params[i].flags & RPC_P_REQUIRED)));
        }
        if (c.root)
            rpc_call_fini(&c);
        free(msg);
    }
    for (int m = 0; m < RPC_METHOD_N; m++) {
        CHECK_CASE(rpc_spec((enum rpc_method)m)->name);
        CHECK(pos[m]); /* every method tested positionally ... */
        CHECK(kw[m]);  /* ... and with keywords */
    }
}

/* Values after binding: positional order as jupyter_client, defaults filled. */
static void test_values(void)
{
    rpc_call_t c;
    rpc_args_t a;
    rpc_error_t e;
    char *msg;

    CHECK_CASE("execute positional order");
    msg = call_msg("client", "execute", "[\"x=1\",true,false,{\"k\":\"v\"},true,false]", "{}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK_INT(a.method, RPC_KC_EXECUTE);
    CHECK_INT(a.spec->ret, RPC_RET_VALUE);
    CHECK_STR(a.v[0].s, "x=1");
    CHECK_INT(a.v[0].len, 3);
    CHECK(a.v[1].type == RPC_T_BOOL && a.v[1].b);  /* silent */
    CHECK(a.v[2].type == RPC_T_BOOL && !a.v[2].b); /* store_history */
    CHECK(a.v[3].type == RPC_T_DICT && json_object_size(a.v[3].d) == 1);
    CHECK(a.v[4].type == RPC_T_BOOL && a.v[4].b);  /* allow_stdin */
    CHECK(a.v[5].type == RPC_T_BOOL && !a.v[5].b); /* stop_on_error */
    CHECK(rpc_args_get(&a, "stop_on_error") == &a.v[5]);
    CHECK(rpc_args_get(&a, "nope") == NULL);
    rpc_call_fini(&c);
    free(msg);

    CHECK_CASE("execute defaults");
    msg = call_msg("client", "execute", "[\"x\"]", "{}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK(!rpc_args_get(&a, "silent")->b);
    CHECK(rpc_args_get(&a, "store_history")->b);
    CHECK_INT(rpc_args_get(&a, "user_expressions")->type, RPC_T_NULL);
    CHECK_INT(rpc_args_get(&a, "allow_stdin")->type, RPC_T_NULL);
    CHECK(rpc_args_get(&a, "stop_on_error")->b);
    rpc_call_fini(&c);
    free(msg);

    CHECK_CASE("defaults: wait_for_ready, history, inspect, start_kernel");
    msg = call_msg("client", "wait_for_ready", "[]", "{}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK(a.v[0].type == RPC_T_NUM && a.v[0].n == 60);
    rpc_call_fini(&c);
    free(msg);
    msg = call_msg("client", "wait_for_ready", "[5]", "{}"); /* an int where a number goes */
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK(a.v[0].type == RPC_T_NUM && a.v[0].n == 5);
    rpc_call_fini(&c);
    free(msg);
    msg = call_msg("client", "history", "[]", "{\"n\":3}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK_STR(rpc_args_get(&a, "hist_access_type")->s, "range");
    CHECK_INT(rpc_args_get(&a, "n")->i, 3);
    CHECK_INT(rpc_args_get(&a, "pattern")->type, RPC_T_NONE);
    CHECK_INT(rpc_args_get(&a, "unique")->type, RPC_T_NONE);
    rpc_call_fini(&c);
    free(msg);
    msg = call_msg("client", "inspect", "[\"x\"]", "{}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK(a.v[1].type == RPC_T_NULL && a.v[2].type == RPC_T_INT && a.v[2].i == 0);
    rpc_call_fini(&c);
    free(msg);
    msg = call_msg("multi_kernel_manager", "start_kernel", "[]", "{\"env\":{\"KERNEL_A\":\"1\"}}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK_INT(rpc_args_get(&a, "kernel_name")->type, RPC_T_NULL); /* the gateway's default */
    CHECK_STR(json_string_value(json_object_get(rpc_args_get(&a, "env")->d, "KERNEL_A")), "1");
    rpc_call_fini(&c);
    free(msg);

    CHECK_CASE("returns");
    msg = call_msg("multi_kernel_manager", "get_kernel", "[\"k\"]", "{}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK_INT(a.spec->ret, RPC_RET_KERNEL_MANAGER);
    rpc_call_fini(&c);
    free(msg);
    msg = call_msg("kernel_manager", "client", "[]", "{}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK_INT(a.spec->ret, RPC_RET_CLIENT);
    rpc_call_fini(&c);
    free(msg);

    CHECK_CASE("code at the limit");
    char *code = malloc(RPC_CODE_MAX + 2);
    memset(code, 'x', RPC_CODE_MAX + 1);
    code[RPC_CODE_MAX] = '\0';
    msg = fmt("{\"message_type\":\"call_request\",\"request_id\":\"r\",\"object_reference\":"
              "{\"type\":\"client\",\"id\":\"c\"},\"method\":\"execute\",\"args\":[\"%s\"]}",
              code);
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    CHECK_INT(a.v[0].len, RPC_CODE_MAX);
    rpc_call_fini(&c);
    free(msg);
    code[RPC_CODE_MAX] = 'x';
    code[RPC_CODE_MAX + 1] = '\0';
    msg = fmt("{\"message_type\":\"call_request\",\"request_id\":\"r\",\"object_reference\":"
              "{\"type\":\"client\",\"id\":\"c\"},\"method\":\"execute\",\"args\":[\"%s\"]}",
              code);
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), -EINVAL);
    CHECK_INT(e.type, RPC_ERR_VALUE);
    rpc_call_fini(&c);
    free(msg);
    free(code);
}

/* ---- refused calls ---- */

enum { PARSE_OK = 0 };

static const struct {
    const char *what;
    const char *msg; /* NULL: built from obj/method/args/kwargs */
    int obj;
    const char *method, *args, *kwargs;
    int parse;            /* expected rpc_parse result */
    enum rpc_err err;     /* expected exception when it parsed */
    const char *contains; /* in the message */
} refused[] = {
    {"the published set_trait payload",
     "{\"message_type\":\"call_request\",\"request_id\":\"x\",\"object_reference\":{\"type\":"
     "\"multi_kernel_manager\",\"id\":\"\"},\"method\":\"set_trait\",\"args\":["
     "\"kernel_manager_class\",\"payload.X\"],\"kwargs\":{}}",
     0, NULL, NULL, NULL, PARSE_OK, RPC_ERR_ATTRIBUTE,
     "'multi_kernel_manager' object has no allowed method 'set_trait'"},
    {"set_trait on a kernel manager", NULL, 1, "set_trait", "[\"a\",1]", "{}", 0, RPC_ERR_ATTRIBUTE,
     "'kernel_manager' object has no allowed method 'set_trait'"},
    {"__dir__", NULL, 0, "__dir__", "[]", "{}", 0, RPC_ERR_ATTRIBUTE, "'__dir__'"},
    {"__class__", NULL, 2, "__class__", "[]", "{}", 0, RPC_ERR_ATTRIBUTE, "'__class__'"},
    {"__init_subclass__", NULL, 1, "__init_subclass__", "[]", "{}", 0, RPC_ERR_ATTRIBUTE, NULL},
    {"__getattribute__", NULL, 2, "__getattribute__", "[\"execute\"]", "{}", 0, RPC_ERR_ATTRIBUTE,
     NULL},
    {"_private", NULL, 0, "_kernels", "[]", "{}", 0, RPC_ERR_ATTRIBUTE, "'_kernels'"},
    {"_private method", NULL, 1, "_launch_kernel", "[[\"sh\"]]", "{}", 0, RPC_ERR_ATTRIBUTE, NULL},
    {"a.b chain", NULL, 2, "kernel_manager.start_kernel", "[]", "{}", 0, RPC_ERR_ATTRIBUTE,
     "'kernel_manager.start_kernel'"},
    {"dotted allowed name", NULL, 0, "list_kernel_ids.__self__", "[]", "{}", 0, RPC_ERR_ATTRIBUTE,
     NULL},
    {"method of another object", NULL, 0, "execute", "[\"1\"]", "{}", 0, RPC_ERR_ATTRIBUTE,
     "'multi_kernel_manager' object has no allowed method 'execute'"},
    {"case", NULL, 2, "Execute", "[\"1\"]", "{}", 0, RPC_ERR_ATTRIBUTE, NULL},
    {"trailing NUL escaped", NULL, 2, "execute\\u0000", "[\"1\"]", "{}", -EBADMSG, 0, NULL},
    {"empty method", NULL, 2, "", "[]", "{}", 0, RPC_ERR_ATTRIBUTE, NULL},
    {"method too long", NULL, 2,
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     "[]", "{}", 0, RPC_ERR_ATTRIBUTE, "...'"},
    {"CR/LF in the method", NULL, 2, "x\\r\\nX-Log: forged\\u0007\\\"'\\u00e9", "[]", "{}", 0,
     RPC_ERR_ATTRIBUTE,
     "'x??X-Log: forged????"
     "?'"},
    {"method not a string", NULL, 2, "x", "[]", "{}", 0, 0, NULL}, /* replaced below */
    {"unknown object type", NULL, -1, "execute", "[]", "{}", 0, RPC_ERR_TYPE,
     "unknown object_reference type 'kernel_manager_class'"},
    {"object reference not an object",
     "{\"message_type\":\"call_request\",\"request_id\":\"r\",\"object_reference\":\"client\","
     "\"method\":\"execute\",\"args\":[\"1\"]}",
     0, NULL, NULL, NULL, 0, RPC_ERR_TYPE, "object_reference"},
    {"object reference without id",
     "{\"message_type\":\"call_request\",\"request_id\":\"r\",\"object_reference\":{\"type\":"
     "\"client\"},\"method\":\"execute\",\"args\":[\"1\"]}",
     0, NULL, NULL, NULL, 0, RPC_ERR_TYPE, "object_reference.id"},
    {"reference id too long",
     "{\"message_type\":\"call_request\",\"request_id\":\"r\",\"object_reference\":{\"type\":"
     "\"client\",\"id\":\"0123456789012345678901234567890123456789012345678901234567890123456789"
     "012345678901234567890123456789012345678901234567890123456789\"},\"method\":\"kernel_info\"}",
     0, NULL, NULL, NULL, 0, RPC_ERR_TYPE, "object_reference.id"},
    {"missing method",
     "{\"message_type\":\"call_request\",\"request_id\":\"r\",\"object_reference\":{\"type\":"
     "\"client\",\"id\":\"c\"}}",
     0, NULL, NULL, NULL, 0, RPC_ERR_TYPE, "method must be a string"},
    {"method is a list",
     "{\"message_type\":\"call_request\",\"request_id\":\"r\",\"object_reference\":{\"type\":"
     "\"client\",\"id\":\"c\"},\"method\":[\"execute\"]}",
     0, NULL, NULL, NULL, 0, RPC_ERR_TYPE, "method must be a string"},
    {"args not a list", NULL, 2, "execute", "{\"code\":\"1\"}", "{}", 0, RPC_ERR_TYPE,
     "args must be a list"},
    {"kwargs not an object", NULL, 2, "execute", "[\"1\"]", "[]", 0, RPC_ERR_TYPE,
     "kwargs must be an object"},
    {"unknown kwarg", NULL, 2, "execute", "[\"1\"]", "{\"foo\":1}", 0, RPC_ERR_TYPE,
     "execute() got an unexpected keyword argument 'foo'"},
    {"unknown kwarg, private", NULL, 1, "restart_kernel", "[]", "{\"newports\":true}", 0,
     RPC_ERR_TYPE, "unexpected keyword argument 'newports'"},
    {"kwargs on a method without", NULL, 1, "client", "[]", "{\"session\":\"x\"}", 0, RPC_ERR_TYPE,
     "unexpected keyword argument 'session'"},
    {"start_kernel with kernel_id", NULL, 0, "start_kernel", "[]", "{\"kernel_id\":\"k\"}", 0,
     RPC_ERR_TYPE, "unexpected keyword argument 'kernel_id'"},
    {"start_kernel with cwd", NULL, 0, "start_kernel", "[]", "{\"cwd\":\"/\"}", 0, RPC_ERR_TYPE,
     NULL},
    {"duplicate argument", NULL, 2, "execute", "[\"1\"]", "{\"code\":\"2\"}", 0, RPC_ERR_TYPE,
     "execute() got multiple values for argument 'code'"},
    {"duplicate JSON key", NULL, 2, "execute", "[]", "{\"code\":\"1\",\"code\":\"2\"}", -EBADMSG, 0,
     NULL},
    {"too many positional", NULL, 2, "execute", "[\"1\",false,true,null,null,true,1]", "{}", 0,
     RPC_ERR_TYPE, "execute() takes at most 6 positional arguments (7 given)"},
    {"positional to a no-arg method", NULL, 2, "kernel_info", "[1]", "{}", 0, RPC_ERR_TYPE,
     "takes at most 0"},
    {"start_kernel is keyword-only", NULL, 0, "start_kernel", "[\"python3\"]", "{}", 0,
     RPC_ERR_TYPE, "start_kernel() takes at most 0 positional arguments (1 given)"},
    {"history kwargs are keyword-only", NULL, 2, "history", "[true,false,\"tail\",1]", "{}", 0,
     RPC_ERR_TYPE, "takes at most 3"},
    {"17 positional", NULL, 2, "execute", "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]", "{}", 0,
     RPC_ERR_TYPE, "too many arguments"},
    {"17 keyword", NULL, 2, "execute", "[]",
     "{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1,\"k\":1,"
     "\"l\":1,\"m\":1,\"n\":1,\"o\":1,\"p\":1,\"q\":1}",
     0, RPC_ERR_TYPE, "too many arguments"},
    {"missing required", NULL, 2, "execute", "[]", "{\"silent\":true}", 0, RPC_ERR_TYPE,
     "execute() missing required argument 'code'"},
    {"missing kernel_id", NULL, 0, "get_kernel", "[]", "{}", 0, RPC_ERR_TYPE,
     "missing required argument 'kernel_id'"},
    /* wrong types */
    {"code int", NULL, 2, "execute", "[1]", "{}", 0, RPC_ERR_TYPE,
     "execute() argument 'code' must be str, not int"},
    {"code null", NULL, 2, "execute", "[null]", "{}", 0, RPC_ERR_TYPE, "must be str, not None"},
    {"silent string", NULL, 2, "execute", "[\"1\"]", "{\"silent\":\"yes\"}", 0, RPC_ERR_TYPE,
     "argument 'silent' must be bool, not str"},
    {"silent int", NULL, 2, "execute", "[\"1\",1]", "{}", 0, RPC_ERR_TYPE, "not int"},
    {"user_expressions list", NULL, 2, "execute", "[\"1\"]", "{\"user_expressions\":[]}", 0,
     RPC_ERR_TYPE, "must be dict or None, not list"},
    {"user_expressions nested", NULL, 2, "execute", "[\"1\"]",
     "{\"user_expressions\":{\"a\":{\"b\":\"c\"}}}", 0, RPC_ERR_TYPE, "item 'a' must be str"},
    {"timeout string", NULL, 2, "wait_for_ready", "[\"1\"]", "{}", 0, RPC_ERR_TYPE,
     "must be number, not str"},
    {"timeout bool", NULL, 2, "get_iopub_msg", "[true]", "{}", 0, RPC_ERR_TYPE, "not bool"},
    {"wait_for_ready None", NULL, 2, "wait_for_ready", "[null]", "{}", 0, RPC_ERR_TYPE, NULL},
    {"detail_level bool", NULL, 2, "inspect", "[\"x\",1,true]", "{}", 0, RPC_ERR_TYPE, NULL},
    {"detail_level float", NULL, 2, "inspect", "[\"x\",1,1.0]", "{}", 0, RPC_ERR_TYPE, "not float"},
    {"kernel_id null", NULL, 0, "get_kernel", "[null]", "{}", 0, RPC_ERR_TYPE, NULL},
    {"kernel_id list", NULL, 0, "shutdown_kernel", "[[\"k\"]]", "{}", 0, RPC_ERR_TYPE, NULL},
    {"env list", NULL, 0, "start_kernel", "[]", "{\"env\":[\"KERNEL_A=1\"]}", 0, RPC_ERR_TYPE,
     NULL},
    {"env value int", NULL, 0, "start_kernel", "[]", "{\"env\":{\"KERNEL_A\":1}}", 0, RPC_ERR_TYPE,
     "item 'KERNEL_A' must be str, not int"},
    {"limits value string", NULL, 0, "start_kernel", "[]", "{\"limits\":{\"memory\":\"1G\"}}", 0,
     RPC_ERR_TYPE, NULL},
    /* bounds and values */
    {"timeout 0", NULL, 2, "wait_for_ready", "[0]", "{}", 0, RPC_ERR_VALUE, "must be in"},
    {"timeout over", NULL, 2, "wait_for_ready", "[3600.5]", "{}", 0, RPC_ERR_VALUE, NULL},
    {"timeout negative", NULL, 2, "get_shell_msg", "[-1]", "{}", 0, RPC_ERR_VALUE, NULL},
    {"timeout huge", NULL, 2, "get_stdin_msg", "[1e308]", "{}", 0, RPC_ERR_VALUE, NULL},
    {"detail_level 2", NULL, 2, "inspect", "[\"x\",0,2]", "{}", 0, RPC_ERR_VALUE,
     "inspect() argument 'detail_level' must be in 0..1"},
    {"cursor_pos negative", NULL, 2, "complete", "[\"x\",-1]", "{}", 0, RPC_ERR_VALUE, NULL},
    {"cursor_pos huge", NULL, 2, "complete", "[\"x\",9223372036854775807]", "{}", 0, RPC_ERR_VALUE,
     NULL},
    {"history n", NULL, 2, "history", "[]", "{\"n\":100001}", 0, RPC_ERR_VALUE, NULL},
    {"history session", NULL, 2, "history", "[]", "{\"session\":2147483648}", 0, RPC_ERR_VALUE,
     NULL},
    {"hist_access_type", NULL, 2, "history", "[true,false,\"all\"]", "{}", 0, RPC_ERR_VALUE,
     "'hist_access_type' is not an allowed value"},
    {"env LD_PRELOAD", NULL, 0, "start_kernel", "[]", "{\"env\":{\"LD_PRELOAD\":\"/tmp/x.so\"}}", 0,
     RPC_ERR_VALUE, "key 'LD_PRELOAD' is not allowed"},
    {"env PATH after a good one", NULL, 0, "start_kernel", "[]",
     "{\"env\":{\"KERNEL_A\":\"1\",\"PATH\":\"/tmp\"}}", 0, RPC_ERR_VALUE, "'PATH'"},
    {"env bad name", NULL, 0, "start_kernel", "[]", "{\"env\":{\"KERNEL_A=B\":\"1\"}}", 0,
     RPC_ERR_VALUE, NULL},
    {"env value too long", NULL, 0, "start_kernel", "[]", NULL, 0, RPC_ERR_VALUE, NULL},
    {"limits unknown key", NULL, 0, "start_kernel", "[]", "{\"limits\":{\"nice\":1}}", 0,
     RPC_ERR_VALUE, "key 'nice' is not allowed"},
    {"limits zero", NULL, 0, "start_kernel", "[]", "{\"limits\":{\"memory\":0}}", 0, RPC_ERR_VALUE,
     NULL},
    {"kernel_name path", NULL, 0, "start_kernel", "[]", "{\"kernel_name\":\"../../bin/sh\"}", 0,
     RPC_ERR_VALUE, "must be a name"},
    {"kernel_name empty", NULL, 0, "start_kernel", "[]", "{\"kernel_name\":\"\"}", 0, RPC_ERR_VALUE,
     NULL},
    {"workspace absolute", NULL, 0, "start_kernel", "[]", "{\"workspace\":\"/etc\"}", 0,
     RPC_ERR_VALUE, NULL},
    {"workspace dot", NULL, 0, "start_kernel", "[]", "{\"workspace\":\"..\"}", 0, RPC_ERR_VALUE,
     NULL},
    {"kernel_id empty", NULL, 0, "get_kernel", "[\"\"]", "{}", 0, RPC_ERR_VALUE, NULL},
    {"kernel_id control", NULL, 0, "get_kernel", "[\"a\\nb\"]", "{}", 0, RPC_ERR_VALUE,
     "printable"},
    {"kernel_id too long", NULL, 0, "get_kernel",
     "[\"012345678901234567890123456789012345678901234567890123456789012345678901234567890123456"
     "7890123456789012345678901234567890123456789\"]",
     "{}", 0, RPC_ERR_VALUE, "1 to 128 bytes"},
    /* malformed messages: nothing to answer */
    {"empty", "", 0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"truncated", "{\"message_type\":\"call_request\",\"request_id\":", 0, NULL, NULL, NULL,
     -EBADMSG, 0, NULL},
    {"not JSON", "call_request set_trait", 0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"array", "[\"call_request\"]", 0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"string", "\"call_request\"", 0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"number", "1", 0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"null", "null", 0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"trailing garbage", "{\"message_type\":\"call_request\",\"request_id\":\"r\"} x", 0, NULL,
     NULL, NULL, -EBADMSG, 0, NULL},
    {"no message_type", "{\"request_id\":\"r\",\"method\":\"execute\"}", 0, NULL, NULL, NULL,
     -EBADMSG, 0, NULL},
    {"message_type not a string", "{\"message_type\":1,\"request_id\":\"r\"}", 0, NULL, NULL, NULL,
     -EBADMSG, 0, NULL},
    {"unknown message_type", "{\"message_type\":\"exec_request\",\"request_id\":\"r\"}", 0, NULL,
     NULL, NULL, -ENOENT, 0, NULL},
    {"no request_id",
     "{\"message_type\":\"call_request\",\"object_reference\":{\"type\":\"client\",\"id\":\"c\"},"
     "\"method\":\"kernel_info\"}",
     0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"request_id number",
     "{\"message_type\":\"call_request\",\"request_id\":7,\"object_reference\":{\"type\":"
     "\"client\",\"id\":\"c\"},\"method\":\"kernel_info\"}",
     0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"request_id empty",
     "{\"message_type\":\"call_request\",\"request_id\":\"\",\"object_reference\":{\"type\":"
     "\"client\",\"id\":\"c\"},\"method\":\"kernel_info\"}",
     0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"request_id with LF",
     "{\"message_type\":\"call_request\",\"request_id\":\"a\\nb\",\"object_reference\":{\"type\":"
     "\"client\",\"id\":\"c\"},\"method\":\"kernel_info\"}",
     0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"request_id non-ASCII",
     "{\"message_type\":\"call_request\",\"request_id\":\"\xc3\xa9\",\"object_reference\":"
     "{\"type\":\"client\",\"id\":\"c\"},\"method\":\"kernel_info\"}",
     0, NULL, NULL, NULL, -EBADMSG, 0, NULL},
    {"invalid UTF-8", "{\"message_type\":\"call_request\",\"request_id\":\"\xff\"}", 0, NULL, NULL,
     NULL, -EBADMSG, 0, NULL},
    {"nested too deep", NULL, 2, "execute", "[[[[[[[[[\"1\"]]]]]]]]]", "{}", -EBADMSG, 0, NULL},
    {"nested too deep in an unused key",
     "{\"message_type\":\"call_request\",\"request_id\":\"r\",\"x\":{\"a\":[[[[[[[[]]]]]]]]}}", 0,
     NULL, NULL, NULL, -EBADMSG, 0, NULL},
};

static void test_refused(void)
{
    for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++) {
        rpc_call_t c;
        rpc_args_t a;
        rpc_error_t e;
        char *msg;
        CHECK_CASE(refused[k].what);
        if (refused[k].msg)
            msg = strdup(refused[k].msg);
        else if (strcmp(refused[k].what, "method not a string") == 0)
            msg = strdup("{\"message_type\":\"call_request\",\"request_id\":\"r\","
                         "\"object_reference\":{\"type\":\"client\",\"id\":\"c\"},\"method\":7}");
        else if (strcmp(refused[k].what, "env value too long") == 0) {
            char v[4098];
            memset(v, 'v', sizeof(v) - 1);
            v[sizeof(v) - 1] = '\0';
            char *kw = fmt("{\"env\":{\"KERNEL_A\":\"%s\"}}", v);
            msg = call_msg(objs[refused[k].obj], refused[k].method, refused[k].args, kw);
            free(kw);
        } else {
            msg = call_msg(refused[k].obj < 0 ? "kernel_manager_class" : objs[refused[k].obj],
                           refused[k].method, refused[k].args, refused[k].kwargs);
        }
        int r = run(msg, strlen(msg), &c, &a, &e);
        if (refused[k].parse < 0) {
            CHECK_INT(r, refused[k].parse);
        } else {
            enum rpc_err want = refused[k].err ? refused[k].err : RPC_ERR_TYPE;
            CHECK_INT(r, -EINVAL);
            CHECK_INT(e.type, want);
            if (refused[k].contains && !strstr(e.message, refused[k].contains))
                CHECK_STR(e.message, refused[k].contains);
            if (k == 0) /* the published payload: the exact message */
                CHECK_STR(e.message, refused[k].contains);
            if (k == 0)
                CHECK_STR(c.request_id, "x");
            /* the reply is valid JSON echoing the request_id */
            char *rep = rpc_reply_exception(c.request_id, &e);
            json_error_t je;
            json_t *j = rep ? json_loads(rep, 0, &je) : NULL;
            CHECK(j != NULL);
            CHECK_STR(json_string_value(json_object_get(j, "message_type")), "call_exception");
            CHECK_STR(json_string_value(json_object_get(j, "request_id")), c.request_id);
            json_t *err = json_object_get(j, "error");
            CHECK_STR(json_string_value(json_object_get(err, "type")), rpc_err_name(want));
            CHECK_STR(json_string_value(json_object_get(err, "message")), e.message);
            json_decref(j);
            free(rep);
        }
        if (r != -EBADMSG && r != -ENOENT && r != -EMSGSIZE)
            rpc_call_fini(&c);
        free(msg);
    }
}

static void test_limits(void)
{
    rpc_call_t c;
    rpc_args_t a;
    rpc_error_t e;

    CHECK_CASE("message over RPC_MAX_MESSAGE_BYTES");
    size_t big = RPC_MAX_MESSAGE_BYTES + 1;
    char *msg = malloc(big);
    memset(msg, ' ', big);
    memcpy(msg, "{}", 2);
    CHECK_INT(rpc_parse(msg, big, &c), -EMSGSIZE);
    CHECK_INT(rpc_parse(msg, big - 1, &c), -EBADMSG); /* {} then spaces: no message_type */
    free(msg);

    CHECK_CASE("request_id 128 / 129 bytes");
    char id[131];
    memset(id, 'i', sizeof(id));
    for (int n = 128; n <= 130; n++) {
        id[n] = '\0';
        msg = fmt("{\"message_type\":\"call_request\",\"request_id\":\"%s\",\"object_reference\":"
                  "{\"type\":\"client\",\"id\":\"c\"},\"method\":\"kernel_info\"}",
                  id);
        int r = run(msg, strlen(msg), &c, &a, &e);
        CHECK_INT(r, n == 128 ? 0 : -EBADMSG);
        if (r == 0) {
            CHECK_INT(strlen(c.request_id), 128);
            rpc_call_fini(&c);
        }
        free(msg);
        id[n] = 'i';
    }

    CHECK_CASE("huge request_id");
    size_t n = 1 << 20;
    char *huge = malloc(n + 1);
    memset(huge, 'A', n);
    huge[n] = '\0';
    msg = fmt("{\"message_type\":\"call_request\",\"request_id\":\"%s\"}", huge);
    CHECK_INT(rpc_parse(msg, strlen(msg), &c), -EBADMSG);
    free(msg);
    free(huge);

    CHECK_CASE("nesting at the limit");
    /* depth 8: message, kwargs, user_expressions ... then a non-str value */
    msg = call_msg("client", "execute", "[\"1\"]", "{\"user_expressions\":{\"a\":[[[[[1]]]]]}}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), -EINVAL);
    CHECK_INT(e.type, RPC_ERR_TYPE);
    rpc_call_fini(&c);
    free(msg);

    CHECK_CASE("a string with brackets does not count as nesting");
    msg = call_msg("client", "execute", "[\"[[[[[[[[[[{{{{{{{{{\\\"[[[[[[[[[[\"]", "{}");
    CHECK_INT(run(msg, strlen(msg), &c, &a, &e), 0);
    rpc_call_fini(&c);
    free(msg);
}

static void test_register_activity(void)
{
    rpc_call_t c;
    CHECK_CASE("register_activity_request");
    const char *m1 = "{\"message_type\":\"register_activity_request\",\"kernel_id\":\"k-1\"}";
    CHECK_INT(rpc_parse(m1, strlen(m1), &c), 0);
    CHECK_INT(c.kind, RPC_REGISTER_ACTIVITY_REQUEST);
    CHECK_STR(c.kernel_id, "k-1");
    CHECK_STR(c.request_id, "");
    rpc_call_fini(&c);
    const char *m2 = "{\"message_type\":\"register_activity_request\",\"request_id\":\"r9\"}";
    CHECK_INT(rpc_parse(m2, strlen(m2), &c), 0);
    CHECK_STR(c.kernel_id, "");
    CHECK_STR(c.request_id, "r9");
    rpc_call_fini(&c);
    const char *m3 = "{\"message_type\":\"register_activity_request\",\"kernel_id\":3}";
    CHECK_INT(rpc_parse(m3, strlen(m3), &c), -EBADMSG);
    const char *m4 = "{\"message_type\":\"register_activity_request\",\"kernel_id\":\"\"}";
    CHECK_INT(rpc_parse(m4, strlen(m4), &c), -EBADMSG);
}

static json_t *load(char *s)
{
    json_error_t je;
    json_t *j = s ? json_loads(s, 0, &je) : NULL;
    CHECK(j != NULL);
    free(s);
    return j;
}

static void test_replies(void)
{
    CHECK_CASE("rpc_reply_value");
    const char *rid = "a\"b\\c'd"; /* printable, needs escaping */
    json_t *j = load(rpc_reply_value(rid, json_pack("[s, i]", "k1", 2)));
    CHECK_STR(json_string_value(json_object_get(j, "message_type")), "call_return_value");
    CHECK_STR(json_string_value(json_object_get(j, "request_id")), rid);
    CHECK_INT(json_array_size(json_object_get(j, "value")), 2);
    CHECK_INT(json_object_size(j), 3);
    json_decref(j);
    j = load(rpc_reply_value("r", json_null()));
    CHECK(json_is_null(json_object_get(j, "value")));
    json_decref(j);
    char *s = rpc_reply_value("r", json_true());
    CHECK_STR(s, "{\"message_type\":\"call_return_value\",\"request_id\":\"r\",\"value\":true}");
    free(s);

    CHECK_CASE("rpc_reply_ref");
    j = load(rpc_reply_ref("r2", RPC_OBJ_KERNEL_MANAGER, "k-1"));
    CHECK_STR(json_string_value(json_object_get(j, "message_type")),
              "call_return_object_reference");
    CHECK_STR(json_string_value(json_object_get(j, "request_id")), "r2");
    json_t *ref = json_object_get(j, "object_reference");
    CHECK_STR(json_string_value(json_object_get(ref, "type")), "kernel_manager");
    CHECK_STR(json_string_value(json_object_get(ref, "id")), "k-1");
    json_decref(j);
    j = load(rpc_reply_ref("r3", RPC_OBJ_CLIENT, "c-7"));
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "object_reference"), "type")),
              "client");
    json_decref(j);

    CHECK_CASE("rpc_reply_exception");
    rpc_error_t e;
    CHECK_INT(rpc_error_set(&e, RPC_ERR_KEY, "no kernel %s", "'k'"), -EINVAL);
    j = load(rpc_reply_exception("r4", &e));
    json_t *err = json_object_get(j, "error");
    CHECK_STR(json_string_value(json_object_get(j, "message_type")), "call_exception");
    CHECK_STR(json_string_value(json_object_get(err, "type")), "KeyError");
    CHECK_STR(json_string_value(json_object_get(err, "message")), "no kernel 'k'");
    json_decref(j);
    /* a message with raw bytes (a gateway bug) still gives valid JSON */
    rpc_error_set(&e, RPC_ERR_RUNTIME, "bad \xff\xfe bytes\n");
    j = load(rpc_reply_exception("r5", &e));
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
              "bad ?? bytes?");
    json_decref(j);

    CHECK_CASE("reply failures");
    errno = 0;
    CHECK(rpc_reply_value(NULL, json_true()) == NULL);
    CHECK_INT(errno, EINVAL);
    CHECK(rpc_reply_value("r", NULL) == NULL);
    CHECK_INT(errno, ENOMEM);

    CHECK_CASE("rpc_quote");
    char q[RPC_QUOTE_MAX];
    CHECK_STR(rpc_quote(q, "a'b\"c\\d\r\n\xc3\xa9", 11), "'a?b?c?d???"
                                                         "?'");
    char long_name[200];
    memset(long_name, 'n', sizeof(long_name));
    rpc_quote(q, long_name, sizeof(long_name));
    CHECK(strlen(q) < RPC_QUOTE_MAX);
    CHECK(strstr(q, "...'") != NULL);
}

/* ---- docs/rpc.md lists exactly the table ---- */

static void render_type(char *out, size_t sz, const rpc_param_t *p)
{
    size_t o = 0;
    switch (p->type) {
    case RPC_T_STR:
        if (p->choices) {
            for (const char *const *c = p->choices; *c; c++)
                o += (size_t)snprintf(out + o, sz - o, "%s\"%s\"", c == p->choices ? "" : "/", *c);
        } else {
            o += (size_t)snprintf(out + o, sz - o, "str(%.0f..%.0f%s)", p->min, p->max,
                                  (p->flags & RPC_P_PRINTABLE) ? ", printable"
                                  : (p->flags & RPC_P_NAME)    ? ", name"
                                                               : "");
        }
        break;
    case RPC_T_INT:
        o += (size_t)snprintf(out + o, sz - o, "int(%.0f..%.0f)", p->min, p->max);
        break;
    case RPC_T_NUM:
        o += (size_t)snprintf(out + o, sz - o, "number(%g..%g)", p->min, p->max);
        break;
    case RPC_T_BOOL:
        o += (size_t)snprintf(out + o, sz - o, "bool");
        break;
    case RPC_T_DICT: {
        char keys[160] = "str", item[96];
        size_t k = 0;
        if (p->choices)
            for (const char *const *c = p->choices; *c; c++)
                k += (size_t)snprintf(keys + k, sizeof(keys) - k, "%s%s",
                                      c == p->choices ? "" : "/", *c);
        else if (p->prefix)
            snprintf(keys, sizeof(keys), "%s*", p->prefix);
        render_type(item, sizeof(item), p->item);
        o += (size_t)snprintf(out + o, sz - o, "dict(<=%.0f){%s: %s}", p->max, keys, item);
        break;
    }
    default:
        break;
    }
    if (p->flags & RPC_P_NULLABLE)
        snprintf(out + o, sz - o, " or None");
}

static void render_row(char *out, size_t sz, const rpc_spec_t *sp)
{
    static const char *const rets[] = {"value", "`kernel_manager` reference", "`client` reference"};
    size_t o = (size_t)snprintf(out, sz, "| `%s` | `%s(", rpc_obj_name(sp->obj), sp->name);
    bool kwonly = false;
    for (size_t i = 0; i < nparams(sp); i++) {
        const rpc_param_t *p = &sp->params[i];
        char t[256], d[64] = "";
        render_type(t, sizeof(t), p);
        switch (p->def.type) {
        case RPC_T_NONE:
            if (!(p->flags & RPC_P_REQUIRED))
                snprintf(d, sizeof(d), " = absent");
            break;
        case RPC_T_NULL:
            snprintf(d, sizeof(d), " = None");
            break;
        case RPC_T_BOOL:
            snprintf(d, sizeof(d), " = %s", p->def.b ? "True" : "False");
            break;
        case RPC_T_INT:
            snprintf(d, sizeof(d), " = %lld", p->def.i);
            break;
        case RPC_T_NUM:
            snprintf(d, sizeof(d), " = %g", p->def.n);
            break;
        case RPC_T_STR:
            snprintf(d, sizeof(d), " = \"%s\"", p->def.s);
            break;
        default:
            break;
        }
        o += (size_t)snprintf(out + o, sz - o, "%s%s%s: %s%s", i ? ", " : "",
                              (p->flags & RPC_P_KWONLY) && !kwonly ? "*, " : "", p->name, t, d);
        kwonly = kwonly || (p->flags & RPC_P_KWONLY);
    }
    snprintf(out + o, sz - o, ")` | %s |", rets[sp->ret]);
}

static void test_doc(void)
{
    CHECK_CASE("docs/rpc.md");
    char path[4096], exe[4096];
    /* __FILE__ is relative to the build directory (meson test's working directory); else
     * relative to build/tests/test_rpc */
    const char *src = __FILE__;
    const char *cut = strstr(src, "tests/unit/test_rpc.c");
    int plen = cut ? (int)(cut - src) : 0;
    snprintf(path, sizeof(path), "%.*sdocs/rpc.md", plen, src);
    FILE *f = fopen(path, "r");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (!f && src[0] != '/' && n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0'; /* build/tests */
        slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0'; /* build */
        snprintf(path, sizeof(path), "%s/%.*sdocs/rpc.md", exe, plen, src);
        f = fopen(path, "r");
    }
    CHECK(f != NULL);
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return;
    }
    char line[2048];
    bool found[RPC_METHOD_N] = {false};
    int rows = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        bool is_row = false;
        for (int o = 0; o < RPC_OBJ_N; o++) {
            char pre[64];
            snprintf(pre, sizeof(pre), "| `%s` |", objs[o]);
            is_row |= strncmp(line, pre, strlen(pre)) == 0;
        }
        if (!is_row)
            continue;
        rows++;
        for (int m = 0; m < RPC_METHOD_N; m++) {
            char want[2048];
            render_row(want, sizeof(want), rpc_spec((enum rpc_method)m));
            if (strcmp(line, want) == 0)
                found[m] = true;
        }
    }
    fclose(f);
    CHECK_INT(rows, RPC_METHOD_N); /* no row the table does not have */
    for (int m = 0; m < RPC_METHOD_N; m++) {
        if (found[m])
            continue;
        char want[2048];
        render_row(want, sizeof(want), rpc_spec((enum rpc_method)m));
        fprintf(stderr, "docs/rpc.md lacks the row:\n%s\n", want);
        check__failures++;
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--doc-table") == 0) { /* prints the rows for docs/rpc.md */
        for (int m = 0; m < RPC_METHOD_N; m++) {
            char row[2048];
            render_row(row, sizeof(row), rpc_spec((enum rpc_method)m));
            puts(row);
        }
        return 0;
    }
    test_table();
    test_valid();
    test_values();
    test_refused();
    test_limits();
    test_register_activity();
    test_replies();
    test_doc();
    CHECK_DONE();
}
