/* The /channel RPC: JSON calls on jupyter_client-like objects, checked against one static
 * allowlist. A client sends
 *   {"message_type": "call_request", "request_id": ID, "object_reference": {"type": T, "id": R},
 *    "method": M, "args": [...], "kwargs": {...}}
 * and gets exactly one call_return_value, call_return_object_reference or call_exception with
 * the same request_id. Methods are found only in the table in rpc.c (docs/rpc.md lists it): a
 * name that is not there (set_trait, __class__, _private, a.b, ...) is an AttributeError, never
 * a lookup anywhere else. Every quantity a client controls has a limit below. */
#ifndef KGW_PROTOCOL_RPC_H
#define KGW_PROTOCOL_RPC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define RPC_MAX_MESSAGE_BYTES (4 * 1024 * 1024) /* one JSON message */
#define RPC_MAX_DEPTH         8                 /* nesting of arrays/objects; calls need 3 */
#define RPC_REQUEST_ID_MAX    128               /* bytes, printable ASCII, not empty */
#define RPC_REF_ID_MAX        128               /* object_reference.id, printable ASCII */
#define RPC_METHOD_MAX        64
#define RPC_MAX_ARGS          16            /* positional arguments, and keyword arguments, each */
#define RPC_MAX_PARAMS        10            /* per method in the table, including the terminator */
#define RPC_KEY_MAX           128           /* bytes of a key in a dict argument */
#define RPC_CODE_MAX          (1024 * 1024) /* code / input strings, bytes */
#define RPC_ERROR_MAX         256           /* exception message, bytes with the NUL */
#define RPC_QUOTE_MAX         72            /* a quoted untrusted string in a message */

enum rpc_kind {
    RPC_CALL_REQUEST = 0,
    RPC_REGISTER_ACTIVITY_REQUEST,
    RPC_CALL_RETURN_VALUE, /* a client answers a callback: value (any JSON, NULL: None) */
    RPC_CALL_EXCEPTION,    /* ... or fails it: err (type mapped, message quoted) */
};

enum rpc_obj {
    RPC_OBJ_MULTI_KERNEL_MANAGER = 0,
    RPC_OBJ_KERNEL_MANAGER,
    RPC_OBJ_CLIENT,
    RPC_OBJ_N
};

/* The handler the gateway switches on: one per table row, in table order. */
enum rpc_method {
    RPC_MKM_GET_KERNEL = 0,
    RPC_MKM_INTERRUPT_KERNEL,
    RPC_MKM_LIST_KERNEL_IDS,
    RPC_MKM_RESTART_KERNEL,
    RPC_MKM_SHUTDOWN_KERNEL,
    RPC_MKM_START_KERNEL,
    RPC_KM_CLIENT,
    RPC_KM_INTERRUPT_KERNEL,
    RPC_KM_IS_ALIVE,
    RPC_KM_RESTART_KERNEL,
    RPC_KM_SHUTDOWN_KERNEL,
    RPC_KC_COMM_INFO,
    RPC_KC_COMPLETE,
    RPC_KC_EXECUTE,
    RPC_KC_GET_IOPUB_MSG,
    RPC_KC_GET_SHELL_MSG,
    RPC_KC_GET_STDIN_MSG,
    RPC_KC_HISTORY,
    RPC_KC_INPUT,
    RPC_KC_INSPECT,
    RPC_KC_IS_COMPLETE,
    RPC_KC_KERNEL_INFO,
    RPC_KC_START_CHANNELS,
    RPC_KC_STOP_CHANNELS,
    RPC_KC_WAIT_FOR_READY,
    RPC_METHOD_N
};

/* What a method answers with: call_return_value, or call_return_object_reference. */
enum rpc_ret { RPC_RET_VALUE = 0, RPC_RET_KERNEL_MANAGER, RPC_RET_CLIENT };

/* Parameter types; a value has one of them, RPC_T_NULL (None) or RPC_T_NONE (absent). */
enum rpc_type {
    RPC_T_NONE = 0,
    RPC_T_NULL,
    RPC_T_STR,
    RPC_T_INT,
    RPC_T_NUM,
    RPC_T_BOOL,
    RPC_T_DICT
};

/* Exceptions as the Python client expects them. */
enum rpc_err {
    RPC_ERR_NONE = 0,
    RPC_ERR_TYPE,      /* TypeError: bad call shape, argument types, unknown kwargs */
    RPC_ERR_VALUE,     /* ValueError: out of bounds, not an allowed value */
    RPC_ERR_ATTRIBUTE, /* AttributeError: no such allowed method */
    RPC_ERR_KEY,       /* KeyError: unknown reference (set by the gateway) */
    RPC_ERR_RUNTIME,   /* RuntimeError: the operation failed (set by the gateway) */
    RPC_ERR_TIMEOUT,   /* TimeoutError (set by the gateway) */
    RPC_ERR_EMPTY,     /* Empty (queue.Empty): get_*_msg timed out, as jupyter_client raises */
    RPC_ERR_N
};

typedef struct rpc_error {
    enum rpc_err type;
    char message[RPC_ERROR_MAX]; /* printable ASCII when made by this module */
} rpc_error_t;

/* An argument value. Strings and dicts are borrowed from the rpc_call_t (or from the table, for
 * defaults): valid until rpc_call_fini(). */
typedef struct rpc_val {
    enum rpc_type type;
    union {
        const char *s; /* STR: NUL-terminated, no NUL inside, len bytes of UTF-8 */
        long long i;   /* INT */
        double n;      /* NUM (a JSON integer is accepted and converted) */
        bool b;        /* BOOL */
        json_t *d;     /* DICT: do not modify; keys and values checked against .item */
    };
    size_t len;
} rpc_val_t;

enum {
    RPC_P_REQUIRED = 1 << 0,
    RPC_P_NULLABLE = 1 << 1,  /* None is accepted */
    RPC_P_KWONLY = 1 << 2,    /* keyword only (after Python's '*'); after positional ones */
    RPC_P_PRINTABLE = 1 << 3, /* STR: bytes 0x20..0x7e */
    RPC_P_NAME = 1 << 4,      /* STR: an IDENT_NAME, [A-Za-z0-9._-] not starting with '.'/'-' */
    RPC_P_ENVNAME = 1 << 5,   /* DICT: keys are IDENT_ENVNAME names, [A-Za-z0-9_] */
};

/* One parameter. Bounds are inclusive: INT/NUM the value, STR its length in bytes, DICT its
 * number of items. */
typedef struct rpc_param {
    const char *name; /* NULL ends the list */
    enum rpc_type type;
    unsigned flags;
    double min, max;
    const char *const *choices;   /* STR: the allowed values; DICT: the allowed keys (NULL) */
    const char *prefix;           /* DICT: every key starts with it */
    const struct rpc_param *item; /* DICT: every value */
    rpc_val_t def;                /* when not given: RPC_T_NONE leaves the argument absent */
} rpc_param_t;

/* One row of the allowlist. */
typedef struct rpc_spec {
    enum rpc_obj obj;
    const char *name;
    enum rpc_method method;
    enum rpc_ret ret;
    rpc_param_t params[RPC_MAX_PARAMS]; /* jupyter_client's positional order */
} rpc_spec_t;

/* One parsed message; owns the JSON. For a call_request with a usable request_id but a bad
 * shape (no method, unknown object type, too many arguments, ...), err is set and rpc_bind()
 * returns it, so the client still gets its call_exception. */
typedef struct rpc_call {
    enum rpc_kind kind;
    char request_id[RPC_REQUEST_ID_MAX + 1]; /* may be "" for register_activity_request */
    enum rpc_obj obj;
    char ref_id[RPC_REF_ID_MAX + 1];
    char method[RPC_METHOD_MAX + 1];
    json_t *args;                       /* array, borrowed from root */
    json_t *kwargs;                     /* object, borrowed from root */
    char kernel_id[RPC_REF_ID_MAX + 1]; /* register_activity_request; "" when absent */
    json_t *value;                      /* call_return_value, borrowed from root */
    rpc_error_t err;
    json_t *root;
} rpc_call_t;

/* A call bound to its table row: v[i] is the value of spec->params[i]. */
typedef struct rpc_args {
    enum rpc_method method;
    const rpc_spec_t *spec;
    rpc_val_t v[RPC_MAX_PARAMS];
} rpc_args_t;

/* Parses one message. Returns 0 (call rpc_call_fini() after), -EMSGSIZE (over
 * RPC_MAX_MESSAGE_BYTES), -EBADMSG (not a JSON object, nested too deep, bad request_id, ...:
 * nothing to answer), -ENOENT (unknown message_type), -ENOMEM. */
int rpc_parse(const char *data, size_t len, rpc_call_t *ret);
void rpc_call_fini(rpc_call_t *c);

/* Resolves a call_request's positional and keyword arguments against its table row: type and
 * bound checks, defaults filled. Returns 0 and fills ret_args, or -EINVAL and fills ret_err. */
int rpc_bind(const rpc_call_t *c, rpc_args_t *ret_args, rpc_error_t *ret_err);

/* The argument named name (a parameter of a->spec), or NULL. */
const rpc_val_t *rpc_args_get(const rpc_args_t *a, const char *name);

/* Table access, for the gateway, tests and docs: the row of m, or NULL. */
const rpc_spec_t *rpc_spec(enum rpc_method m);
const char *rpc_obj_name(enum rpc_obj o);
const char *rpc_err_name(enum rpc_err e); /* "TypeError", ... */
const char *rpc_type_name(enum rpc_type t);

/* Sets e; returns -EINVAL. Quote untrusted strings with rpc_quote(). */
int rpc_error_set(rpc_error_t *e, enum rpc_err type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 'untrusted' in single quotes, capped, control characters, quotes, backslashes and non-ASCII
 * bytes replaced by '?' (see log_quote). out has RPC_QUOTE_MAX bytes; returns out. */
const char *rpc_quote(char *out, const char *s, size_t len);

/* Compact JSON replies, malloc'd; NULL + errno on failure. rpc_reply_value takes the reference
 * to value (NULL is treated as a failed allocation). */
char *rpc_reply_value(const char *request_id, json_t *value);
char *rpc_reply_ref(const char *request_id, enum rpc_obj type, const char *id);
char *rpc_reply_exception(const char *request_id, const rpc_error_t *err);

#endif
