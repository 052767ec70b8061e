/* jstr: one JSON string literal in untrusted bytes, checked (and decoded) without a JSON tree,
 * so a kernel's output text can be passed on as the literal it already is. A literal is
 * accepted exactly when jansson (json_loadb, flags 0) would take it as a string: valid UTF-8,
 * no raw control character, only JSON's escapes, \u surrogates in pairs, no \u0000. Pure. */
#ifndef KGW_PROTOCOL_JSTR_H
#define KGW_PROTOCOL_JSTR_H

#include <stddef.h>

/* The literal that starts at p[0] (a '"'), within n bytes: 0, *ret_len its length with both
 * quotes and *ret_text_len the length of its text (as jstr_decode writes it); -EBADMSG when p
 * does not start with a complete, valid literal. */
int jstr_scan(const char *p, size_t n, size_t *ret_len, size_t *ret_text_len);

/* The text of the literal p[0..n) (exactly one literal, as jstr_scan accepts it): written to
 * out, which has room for n bytes (the text is never longer than its literal), not
 * NUL-terminated; *ret_len its length. 0 or -EBADMSG (out's contents are then undefined). */
int jstr_decode(const char *p, size_t n, char *out, size_t *ret_len);

/* The length of the UTF-8 sequence at p (at most n bytes), 0 when it is not a valid one
 * (overlong, surrogate, past U+10FFFF, cut). */
size_t jstr_utf8_seq(const unsigned char *p, size_t n);

/* The longest prefix of text s (n bytes of valid UTF-8) within max bytes that ends on a
 * character boundary: its length. */
size_t jstr_utf8_cut(const char *s, size_t n, size_t max);

#endif
