/* protocol/jrpc.c on untrusted bytes: a POST body of /mcp. A parse either fails with a
 * JSON-RPC code and a message (and an id only when it was valid), or yields one message of a
 * known kind whose id, method and params are of the allowed types and within the limits. */
#include <errno.h>
#include <string.h>

#include "fuzz.h"

#include "protocol/jrpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct jrpc_msg m;
    struct jrpc_err e;
    int rc = jrpc_parse((const char *)data, size, 4096, &m, &e);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL);
    if (rc < 0) {
        FUZZ_CHECK(e.code == JRPC_PARSE_ERROR || e.code == JRPC_INVALID_REQUEST);
        FUZZ_CHECK(e.message[0] != '\0' && m.root == NULL);
        FUZZ_CHECK(!e.id || json_is_integer(e.id) || json_is_string(e.id));
        json_t *err = jrpc_error(e.id, e.code, e.message);
        FUZZ_CHECK(err != NULL); /* the message is always sayable in JSON */
        json_decref(err);
        json_decref(e.id);
        return 0;
    }
    FUZZ_CHECK(size <= 4096 && json_is_object(m.root));
    FUZZ_CHECK(m.kind == JRPC_REQUEST || m.kind == JRPC_NOTIFICATION || m.kind == JRPC_RESPONSE);
    if (m.id)
        FUZZ_CHECK(json_is_integer(m.id) ||
                   (json_is_string(m.id) && json_string_length(m.id) <= JRPC_ID_MAX));
    if (m.kind == JRPC_RESPONSE) {
        FUZZ_CHECK(m.id && !m.method);
    } else {
        FUZZ_CHECK(m.method && strlen(m.method) >= 1 && strlen(m.method) <= JRPC_METHOD_MAX);
        FUZZ_CHECK((m.kind == JRPC_REQUEST) == (m.id != NULL));
        FUZZ_CHECK(!m.params || json_is_object(m.params));
        for (const char *p = m.method; *p; p++)
            FUZZ_CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
    }
    json_t *r = jrpc_result(m.id, json_object());
    FUZZ_CHECK(r != NULL);
    json_decref(r);
    jrpc_fini(&m);
    return 0;
}
