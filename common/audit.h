/* The audit log: one JSON object per line, {"ts", "event", ...fields}, appended to a file or
 * written to stderr. Fields come from jansson's pack format, so every string is JSON-escaped;
 * untrusted strings go through audit_str() to be capped. docs/audit.md lists the events. */
#ifndef KGW_COMMON_AUDIT_H
#define KGW_COMMON_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define AUDIT_STR_MAX 256 /* bytes of an untrusted string kept in an event */

/* path: "" (off), "-" (stderr) or a file opened for appending. 0 or -errno. */
int audit_open(const char *path);
void audit_close(void);
bool audit_enabled(void);
/* Writes {"ts", "event": event, ...} where fields is a jansson pack format for an object's
 * members without braces ("s:s, s:i", ...) or NULL. References passed for "o" are taken
 * whether or not the log is on. */
void audit_event(const char *event, const char *fields, ...);
/* A new JSON string of at most AUDIT_STR_MAX bytes of s (invalid UTF-8 replaced), for "s:o". */
json_t *audit_str(const char *s, size_t len);

#endif
