/* Egress policies: the destinations a kernel's proxy may connect to (docs/security.md,
 * "Network egress"). A policy is a list of "HOST:PORT" entries separated by commas or spaces:
 *
 *   pypi.org:443        this host name, this port
 *   *.pythonhosted.org:443   any subdomain (not the name itself)
 *   *:443               any host name (meant for the gateway's ceiling)
 *   api.example.com:*   any port
 *   203.0.113.7:80      an IP literal ([v6]:port for IPv6)
 *   +intranet.example:80  "+": the name may resolve to a private, loopback, link-local or
 *                         metadata address (otherwise such addresses are refused)
 *
 * IP literals are explicit by nature: an entry naming a private address allows it. Host names
 * are compared case-insensitively, without a trailing dot. An empty policy allows nothing. */
#ifndef KGW_COMMON_EGPOL_H
#define KGW_COMMON_EGPOL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define EGPOL_HOST_MAX    253
#define EGPOL_MAX_ENTRIES 64
#define EGPOL_TEXT_MAX    4096 /* bytes of a policy's text */

struct egpol_entry {
    char host[EGPOL_HOST_MAX + 1]; /* lowercase; for a wildcard the suffix after "*." */
    int port;                      /* 1-65535; 0: any */
    bool wild;                     /* "*.suffix" */
    bool any;                      /* "*" */
    bool ip;                       /* an IP literal (host holds it without brackets) */
    bool private_ok;               /* "+", or an IP literal */
};

typedef struct egpol {
    struct egpol_entry v[EGPOL_MAX_ENTRIES];
    size_t n;
} egpol_t;

/* Parses a policy's text. 0, or -EINVAL with the reason in err. */
int egpol_parse(const char *s, size_t len, egpol_t *out, char *err, size_t errsz);
/* The entry allowing host (lowercase, IPv6 without brackets) at port, or NULL. An IP literal
 * is allowed only by an entry naming that very address, or by "*" entries. */
const struct egpol_entry *egpol_match(const egpol_t *p, const char *host, int port);
/* True when every entry of inner is within some entry of outer (a kernel may ask for less
 * than its tenant is given, never more). Otherwise false, with the first entry not covered in
 * err. */
bool egpol_covers(const egpol_t *outer, const egpol_t *inner, char *err, size_t errsz);
/* Removes the entries of p that outer does not cover; returns how many were removed. */
size_t egpol_restrict(egpol_t *p, const egpol_t *outer);
/* Writes p as text (parseable by egpol_parse). The length, or -ENOSPC. */
int egpol_format(const egpol_t *p, char *out, size_t outsz);
/* NULL when addr is a public unicast address; else why it is refused unless named ("loopback",
 * "private", "link-local", "metadata", "multicast", "unspecified", "reserved"). IPv4-mapped
 * IPv6 addresses are judged as the IPv4 address. */
const char *egpol_addr_refusal(const struct sockaddr *addr);
/* Lowercases host in place and strips one trailing dot, and writes an IPv4 literal in any
 * form inet_aton takes (127.1, 2130706442, 0x7f00000a) as a dotted quad (host has room for
 * INET_ADDRSTRLEN bytes); false if it is not a valid host name or IP literal (brackets not
 * included). */
bool egpol_host_normalize(char *host);

#endif
