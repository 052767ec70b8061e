/* docs/mcp_tools.json, embedded at build time (scripts/embed.py): the MCP tools' titles,
 * descriptions and JSON Schemas, as tools/list gives them (mcptools.c loads them). */
#ifndef KGW_GATEWAY_MCP_TOOLS_JSON_H
#define KGW_GATEWAY_MCP_TOOLS_JSON_H

#include <stddef.h>

extern const unsigned char kgw_mcp_tools_json[];
extern const size_t kgw_mcp_tools_json_len;

#endif
