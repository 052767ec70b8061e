/* A JSON Schema subset's checker and validator (jschema.h): what a schema may say is a fixed
 * table of keywords; a value is looked into only where its schema says (properties, items), so
 * the schema's depth bounds the work on a value of any depth. */
#include "protocol/jschema.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/jstr.h"

enum type { T_NONE, T_OBJECT, T_STRING, T_INTEGER, T_NUMBER, T_BOOLEAN, T_ARRAY };

static const struct {
    const char *name, *noun;
} types[] = {
    [T_NONE] = {"", ""},
    [T_OBJECT] = {"object", "an object"},
    [T_STRING] = {"string", "a string"},
    [T_INTEGER] = {"integer", "an integer"},
    [T_NUMBER] = {"number", "a number"},
    [T_BOOLEAN] = {"boolean", "true or false"},
    [T_ARRAY] = {"array", "an array"},
};

enum kind {
    K_ANY,     /* an annotation: any value */
    K_STRING,  /* an annotation that is a string */
    K_TYPE,    /* one of types[]'s names */
    K_SCHEMAS, /* an object of schemas */
    K_SCHEMA,  /* a schema */
    K_NAMES,   /* an array of strings */
    K_BOOL,    /* true or false */
    K_ENUM,    /* an array of scalars */
    K_NUMBER,  /* a number */
    K_COUNT,   /* an integer >= 0 */
};

/* The keywords of the subset, sorted. */
static const struct {
    const char *name;
    enum kind kind;
} keywords[] = {
    {"$comment", K_STRING},
    {"additionalProperties", K_BOOL},
    {"default", K_ANY},
    {"description", K_STRING},
    {"enum", K_ENUM},
    {"examples", K_ANY},
    {"exclusiveMaximum", K_NUMBER},
    {"exclusiveMinimum", K_NUMBER},
    {"items", K_SCHEMA},
    {"maxItems", K_COUNT},
    {"maxLength", K_COUNT},
    {"maximum", K_NUMBER},
    {"minLength", K_COUNT},
    {"minimum", K_NUMBER},
    {"pattern", K_STRING}, /* not checked: the caller's (jschema.h) */
    {"properties", K_SCHEMAS},
    {"required", K_NAMES},
    {"title", K_STRING},
    {"type", K_TYPE},
};

static int fail(struct jschema_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct jschema_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->what, sizeof(err->what), fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Appends fmt's text to out (NUL-terminated, size bytes) as far as it fits. */
static void say(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(char *out, size_t size, const char *fmt, ...)
{
    size_t n = strlen(out);
    va_list ap;
    va_start(ap, fmt);
    if (n + 1 < size)
        vsnprintf(out + n, size - n, fmt, ap);
    va_end(ap);
}

/* Appends sep and name (cut at JSCHEMA_NAME_MAX bytes, and at where's room, on a character
 * boundary; control characters as '?') to where, whose text is len bytes: the new length. */
static size_t where_push(char *where, size_t len, const char *sep, const char *name)
{
    size_t room = JSCHEMA_WHERE_MAX - 1 - len, sl = strlen(sep);
    if (room < sl)
        return len;
    memcpy(where + len, sep, sl);
    len += sl;
    room -= sl;
    size_t n = jstr_utf8_cut(name, strlen(name), room < JSCHEMA_NAME_MAX ? room : JSCHEMA_NAME_MAX);
    for (size_t i = 0; i < n; i++)
        where[len + i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    len += n;
    where[len] = '\0';
    return len;
}

static enum type type_named(const char *name)
{
    for (size_t i = T_OBJECT; name && i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcmp(types[i].name, name))
            return (enum type)i;
    return T_NONE;
}

static int keyword(const char *name)
{
    size_t lo = 0, hi = sizeof(keywords) / sizeof(keywords[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, keywords[mid].name);
        if (c == 0)
            return (int)keywords[mid].kind;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

/* ---- schemas ---- */

static int check(const json_t *s, char *where, size_t len, int depth, struct jschema_err *err);

static int check_keyword(const json_t *s, const char *key, const json_t *v, char *where,
                         size_t len, int depth, struct jschema_err *err)
{
    int kind = keyword(key);
    size_t n = where_push(where, len, "/", key);
    size_t i;
    const char *name;
    const json_t *m;
    switch (kind) {
    case K_ANY:
        break;
    case K_STRING:
        if (!json_is_string(v))
            return fail(err, "must be a string");
        break;
    case K_TYPE:
        if (!type_named(json_string_value(v)))
            return fail(err, "must be one of \"object\", \"string\", \"integer\", \"number\", "
                             "\"boolean\", \"array\"");
        break;
    case K_SCHEMAS:
        if (!json_is_object(v) || json_object_size(v) > JSCHEMA_KEYS_MAX)
            return fail(err, "must be an object of at most %d schemas", JSCHEMA_KEYS_MAX);
        json_object_foreach((json_t *)v, name, m)
        {
            if (check(m, where, where_push(where, n, "/", name), depth + 1, err) < 0)
                return -EINVAL;
            where[n] = '\0';
        }
        break;
    case K_SCHEMA:
        if (check(v, where, n, depth + 1, err) < 0)
            return -EINVAL;
        break;
    case K_NAMES:
        if (!json_is_array(v) || json_array_size(v) > JSCHEMA_KEYS_MAX)
            return fail(err, "must be an array of at most %d names", JSCHEMA_KEYS_MAX);
        json_array_foreach(v, i, m)
        {
            if (!json_is_string(m))
                return fail(err, "must hold strings");
            /* a required name no property allows could never be given */
            if (json_is_false(json_object_get(s, "additionalProperties")) &&
                !json_object_get(json_object_get(s, "properties"), json_string_value(m)))
                return fail(err, "names \"%.64s\", which is not among the properties",
                            json_string_value(m));
        }
        break;
    case K_BOOL:
        if (!json_is_boolean(v))
            return fail(err, "must be true or false");
        break;
    case K_ENUM:
        if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > JSCHEMA_KEYS_MAX)
            return fail(err, "must be an array of 1 to %d values", JSCHEMA_KEYS_MAX);
        json_array_foreach(v, i, m)
        {
            if (json_is_object(m) || json_is_array(m))
                return fail(err, "must hold strings, numbers, booleans or null");
        }
        break;
    case K_NUMBER:
        if (!json_is_number(v))
            return fail(err, "must be a number");
        break;
    case K_COUNT:
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return fail(err, "must be an integer >= 0");
        break;
    default:
        where[len] = '\0';
        return fail(err, "has the keyword \"%.64s\", which is not in the subset taken", key);
    }
    where[len] = '\0';
    return 0;
}

static int check(const json_t *s, char *where, size_t len, int depth, struct jschema_err *err)
{
    if (depth > JSCHEMA_DEPTH_MAX)
        return fail(err, "nests deeper than %d schemas", JSCHEMA_DEPTH_MAX);
    if (!json_is_object(s))
        return fail(err, "must be a schema (an object)");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        if (check_keyword(s, key, v, where, len, depth, err) < 0)
            return -EINVAL;
    }
    return 0;
}

int jschema_check(const json_t *schema, struct jschema_err *err)
{
    err->where[0] = err->what[0] = '\0';
    return check(schema, err->where, 0, 0, err);
}

/* ---- values ---- */

static enum type kind_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return T_OBJECT;
    case JSON_ARRAY:
        return T_ARRAY;
    case JSON_STRING:
        return T_STRING;
    case JSON_INTEGER:
        return T_INTEGER;
    case JSON_REAL:
        return T_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOLEAN;
    default:
        return T_NONE;
    }
}

/* An integer by JSON Schema's measure: 1.0 is one. (Doubles beyond 2^53 are all whole.) */
static bool whole(const json_t *v)
{
    if (json_is_integer(v))
        return true;
    double d = json_real_value(v);
    return json_is_real(v) &&
           (d >= 9007199254740992.0 || d <= -9007199254740992.0 || d == (double)(long long)d);
}

static bool type_ok(enum type t, const json_t *v)
{
    switch (t) {
    case T_INTEGER:
        return whole(v);
    case T_NUMBER:
        return json_is_number(v);
    default:
        return kind_of(v) == t;
    }
}

static bool enum_has(const json_t *e, const json_t *v)
{
    size_t i;
    const json_t *m;
    json_array_foreach(e, i, m)
    {
        if (json_is_number(m) && json_is_number(v) ? json_number_value(m) == json_number_value(v)
                                                   : json_equal((json_t *)m, (json_t *)v))
            return true;
    }
    return false;
}

static long long count(const json_t *s, const char *key)
{
    const json_t *v = json_object_get(s, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* What a value of type t must be to match s: "must be a number > 0 and <= 604800". */
static int refuse(const json_t *s, enum type t, struct jschema_err *err)
{
    char *out = err->what;
    size_t size = sizeof(err->what);
    const json_t *e = json_object_get(s, "enum");
    out[0] = '\0';
    if (e) {
        size_t i;
        const json_t *m;
        say(out, size, "must be one of ");
        json_array_foreach(e, i, m)
        {
            char *j = json_dumps(m, JSON_ENCODE_ANY | JSON_COMPACT);
            say(out, size, "%s%.64s", i ? ", " : "", j ? j : "?");
            free(j);
        }
        return -EINVAL;
    }
    say(out, size, "must be %s", types[t].noun);
    long long lo = count(s, "minLength"), hi = count(s, "maxLength");
    if (t == T_STRING && lo >= 0 && hi >= 0)
        say(out, size, " of %lld to %lld characters", lo, hi);
    else if (t == T_STRING && lo >= 0)
        say(out, size, " of at least %lld characters", lo);
    else if (t == T_STRING && hi >= 0)
        say(out, size, " of at most %lld characters", hi);
    if (t == T_ARRAY && (hi = count(s, "maxItems")) >= 0)
        say(out, size, " of at most %lld items", hi);
    if (t == T_INTEGER || t == T_NUMBER) {
        static const struct {
            const char *key, *op;
        } bounds[] = {{"minimum", ">="},
                      {"exclusiveMinimum", ">"},
                      {"maximum", "<="},
                      {"exclusiveMaximum", "<"}};
        const char *sep = " ";
        for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
            const json_t *b = json_object_get(s, bounds[i].key);
            if (json_is_number(b)) {
                say(out, size, "%s%s %.15g", sep, bounds[i].op, json_number_value(b));
                sep = " and ";
            }
        }
    }
    return -EINVAL;
}

static size_t chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

static bool number_ok(const json_t *s, double d)
{
    const json_t *b;
    if ((b = json_object_get(s, "minimum")) && !(d >= json_number_value(b)))
        return false;
    if ((b = json_object_get(s, "exclusiveMinimum")) && !(d > json_number_value(b)))
        return false;
    if ((b = json_object_get(s, "maximum")) && !(d <= json_number_value(b)))
        return false;
    if ((b = json_object_get(s, "exclusiveMaximum")) && !(d < json_number_value(b)))
        return false;
    return true;
}

static int validate(const json_t *s, const json_t *v, char *where, size_t len, int depth,
                    struct jschema_err *err);

/* An unknown member where no others are allowed: the ones allowed. */
static int unknown(const json_t *props, struct jschema_err *err)
{
    const char *name;
    const json_t *m;
    const char *sep = " (allowed: ";
    err->what[0] = '\0';
    say(err->what, sizeof(err->what), "is unknown");
    json_object_foreach((json_t *)props, name, m)
    {
        say(err->what, sizeof(err->what), "%s%.64s", sep, name);
        sep = ", ";
    }
    say(err->what, sizeof(err->what), "%s", strcmp(sep, ", ") ? " (none allowed)" : ")");
    return -EINVAL;
}

static int validate_object(const json_t *s, const json_t *v, char *where, size_t len, int depth,
                           struct jschema_err *err)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    bool closed = json_is_false(json_object_get(s, "additionalProperties"));
    const char *name;
    const json_t *m;
    size_t i;
    json_object_foreach((json_t *)v, name, m)
    {
        const json_t *ps = json_object_get(props, name);
        size_t n = where_push(where, len, len ? "." : "", name);
        if (!ps && closed)
            return unknown(props, err);
        if (ps && validate(ps, m, where, n, depth + 1, err) < 0)
            return -EINVAL;
        where[len] = '\0';
    }
    json_array_foreach(req, i, m)
    {
        if (!json_object_get(v, json_string_value(m))) {
            where_push(where, len, len ? "." : "", json_string_value(m));
            return fail(err, "is required");
        }
    }
    return 0;
}

static int validate(const json_t *s, const json_t *v, char *where, size_t len, int depth,
                    struct jschema_err *err)
{
    if (depth > JSCHEMA_DEPTH_MAX || !json_is_object(s))
        return fail(err, "cannot be checked: its schema is not one jschema_check takes");
    enum type t = type_named(json_string_value(json_object_get(s, "type"))), k = kind_of(v);
    if (t && !type_ok(t, v))
        return refuse(s, t, err);
    t = t ? t : k; /* what the rules below speak of */
    const json_t *e = json_object_get(s, "enum");
    if (e && !enum_has(e, v))
        return refuse(s, t, err);
    long long lo, hi;
    size_t i, n;
    const json_t *m;
    switch (k) {
    case T_STRING:
        n = chars(json_string_value(v), json_string_length(v));
        lo = count(s, "minLength");
        hi = count(s, "maxLength");
        if ((lo >= 0 && n < (unsigned long long)lo) || (hi >= 0 && n > (unsigned long long)hi))
            return refuse(s, t, err);
        break;
    case T_INTEGER:
    case T_NUMBER:
        if (!number_ok(s, json_number_value(v)))
            return refuse(s, t, err);
        break;
    case T_ARRAY:
        hi = count(s, "maxItems");
        if (hi >= 0 && json_array_size(v) > (unsigned long long)hi)
            return refuse(s, t, err);
        if (!(m = json_object_get(s, "items")))
            break;
        for (i = 0; i < json_array_size(v); i++) {
            char idx[24];
            snprintf(idx, sizeof(idx), "[%zu]", i);
            if (validate(m, json_array_get(v, i), where, where_push(where, len, "", idx),
                         depth + 1, err) < 0)
                return -EINVAL;
            where[len] = '\0';
        }
        break;
    case T_OBJECT:
        return validate_object(s, v, where, len, depth, err);
    default:
        break;
    }
    return 0;
}

int jschema_validate(const json_t *schema, const json_t *value, struct jschema_err *err)
{
    err->where[0] = err->what[0] = '\0';
    return validate(schema, value, err->where, 0, 0, err);
}
