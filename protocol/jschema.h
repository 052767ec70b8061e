/* jschema: an untrusted JSON value checked against a JSON Schema (draft 2020-12) of a small
 * subset, the one the MCP tools' inputSchema use (docs/mcp_tools.json): type (object, string,
 * integer, number, boolean, array), properties, required, additionalProperties (true or
 * false), enum (of strings, numbers, booleans, null), minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum, minLength, maxLength (in characters), maxItems, items. The annotations
 * title, description, default, examples and $comment are taken and mean nothing here;
 * pattern too: the caller checks what a pattern says (no regular expressions here). A schema
 * is checked once (jschema_check) and then trusted; the values are not. Pure; fuzzed
 * (tests/fuzz/fuzz_jschema.c). */
#ifndef KGW_PROTOCOL_JSCHEMA_H
#define KGW_PROTOCOL_JSCHEMA_H

#include <jansson.h>

#define JSCHEMA_DEPTH_MAX 8   /* schemas nested in a schema (so values looked into) */
#define JSCHEMA_KEYS_MAX  64  /* properties, required names, enum values of one schema */
#define JSCHEMA_NAME_MAX  64  /* bytes of a property's name an error quotes */
#define JSCHEMA_WHERE_MAX 128 /* bytes of an error's path */
#define JSCHEMA_WHAT_MAX  256 /* bytes of an error's rule */

/* Why a value (or a schema) was refused. */
struct jschema_err {
    /* the value's path: "timeout", "files[2].path"; "" for the value itself. Names are cut
     * at JSCHEMA_NAME_MAX bytes on a character boundary, control characters become '?'. */
    char where[JSCHEMA_WHERE_MAX];
    /* the rule it breaks, as a predicate: "must be an integer >= 1", "is required" */
    char what[JSCHEMA_WHAT_MAX];
};

/* Whether schema keeps to the subset (every keyword known, of the right type, nesting within
 * JSCHEMA_DEPTH_MAX, lists within JSCHEMA_KEYS_MAX, required names among the properties when
 * no others are allowed): 0, or -EINVAL with err saying where and what. */
int jschema_check(const json_t *schema, struct jschema_err *err);

/* Whether value matches schema (one jschema_check took): 0, or -EINVAL with err naming the
 * first value found wrong and the rule it breaks. An object's members are looked at in their
 * order (an unknown one, or a wrong value), then its required ones. */
int jschema_validate(const json_t *schema, const json_t *value, struct jschema_err *err);

#endif
