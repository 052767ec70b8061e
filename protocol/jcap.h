/* jcap: an output message cut to what is left under an execution's output cap, so the client
 * sees its output up to the cap and a notice where it ends. Pure. */
#ifndef KGW_PROTOCOL_JCAP_H
#define KGW_PROTOCOL_JCAP_H

#include <stddef.h>

#include "protocol/jmsg.h"

/* The line a cut output ends with (stream) or becomes (rich output), naming the cap. */
#define JCAP_NOTICE_FMT \
    "[output truncated: the execution's output exceeded its limit of %lld bytes]"
#define JCAP_NOTICE_MAX 128

/* Whether msg_type is an output message the cap counts (stream, display_data,
 * update_display_data, execute_result). */
bool jcap_is_output(const char *msg_type);

/* The content (a JSON object) of an output message of msg_type cut to room bytes: a stream's
 * "text" keeps at most room bytes, cut at a UTF-8 character boundary, then a new line and the
 * notice; a rich output's "data" becomes {"text/plain": notice} and its "metadata" {} (other
 * keys, e.g. transient and execution_count, stay). *ret_content: compact JSON, NUL-terminated,
 * to free(). 0; -EINVAL: not an output type; -EBADMSG: not a JSON object, or a stream without
 * a string "text"; -ENOMEM. */
int jcap_cut(const char *msg_type, jspan_t content, size_t room, long long cap, char **ret_content);

#endif
