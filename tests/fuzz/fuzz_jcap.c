/* jcap_cut on arbitrary message contents (the first byte picks the message type, the next two
 * the room). Invariants: the result is a JSON object; a stream's text is at most the room plus
 * the notice and ends with the notice; a rich output's data is only the notice. */
#include "fuzz.h"
#include <jansson.h>
#include <string.h>

#include "protocol/jcap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *types[] = {"stream", "display_data", "update_display_data",
                                  "execute_result", "error"};
    char notice[JCAP_NOTICE_MAX], *out = NULL;
    if (size < 3)
        return 0;
    const char *type = types[data[0] % 5];
    size_t room = (size_t)data[1] | (size_t)data[2] << 8;
    size_t n = size - 3;
    char *content = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    if (!content)
        return 0;
    memcpy(content, data + 3, n);
    int r = jcap_cut(type, (jspan_t){content, n}, room, 12345, &out);
    snprintf(notice, sizeof(notice), JCAP_NOTICE_FMT, 12345LL);
    FUZZ_CHECK(r == 0 || out == NULL);
    FUZZ_CHECK(r != 0 || jcap_is_output(type));
    if (r == 0) {
        json_t *c = json_loads(out, 0, NULL);
        FUZZ_CHECK(json_is_object(c));
        if (!strcmp(type, "stream")) {
            json_t *t = json_object_get(c, "text");
            size_t len = json_string_length(t), nl = strlen(notice);
            FUZZ_CHECK(json_is_string(t) && len <= room + 1 + nl + 1 && len >= nl + 1);
            FUZZ_CHECK(!memcmp(json_string_value(t) + len - nl - 1, notice, nl));
        } else {
            json_t *d = json_object_get(c, "data");
            FUZZ_CHECK(json_object_size(d) == 1 &&
                       !strcmp(json_string_value(json_object_get(d, "text/plain")), notice));
        }
        json_decref(c);
        free(out);
    }
    free(content);
    return 0;
}
