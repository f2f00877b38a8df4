"""The official Python MCP client (PyPI `mcp`) against `strata mcp`, for tests/it/mcp.rs.

Usage: drive_mcp_client.py STRATA_BINARY DB_DIR. Spawns `strata --db DB_DIR mcp` through
the SDK's stdio transport, then: initialize, tools/list, a call of each read tool, a
question, invalid arguments, an unknown tool and a ping. Prints one JSON object (what was
seen) on stdout; the Rust test judges it. Exits non-zero on anything unexpected.
"""

import asyncio
import json
import sys
from importlib.metadata import version

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError


def payload(result):
    """The JSON a tool returned (strata sends it as one text block)."""
    texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
    assert len(texts) == 1, result
    return json.loads(texts[0])


async def main(binary: str, db: str) -> dict:
    seen = {"sdk": version("mcp")}
    params = StdioServerParameters(command=binary, args=["--db", db, "mcp"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["server"] = init.server_info.name
            seen["protocol"] = init.protocol_version
            tools = await session.list_tools()
            seen["tools"] = sorted(t.name for t in tools.tools)
            seen["schemas"] = all(t.input_schema.get("type") == "object" for t in tools.tools)

            grep = payload(
                await session.call_tool(
                    "grep", {"pattern": "Harbour Line", "scopes": ["debate"], "limit": 3}
                )
            )
            seen["grep_hits"] = len(grep["hits"])
            hit = grep["hits"][0]
            peek = payload(await session.call_tool("peek", {"ids": [hit["id"]]}))
            seen["peek_same_text"] = peek["nodes"][0]["text"] == hit["text"]

            ctx = payload(
                await session.call_tool("context", {"scope": "debate", "budget": 300})
            )
            seen["context_tokens"] = ctx["tokens"]

            q = payload(
                await session.call_tool(
                    "query",
                    {"question": "How long is the Harbour Line?", "scopes": ["debate"]},
                )
            )
            seen["answer"] = q["answer"]
            # Every citation's quote is the source's bytes, read back by span.
            exact = True
            for c in q["citations"]:
                back = payload(
                    await session.call_tool(
                        "peek",
                        {
                            "scope": "debate",
                            "source": c["source"],
                            "start": c["start"],
                            "end": c["end"],
                        },
                    )
                )
                exact = exact and back["text"] == c["quote"]
            seen["citations"] = len(q["citations"])
            seen["citations_exact"] = exact

            for name, args, key in [
                ("grep", {"pattern": "x", "limit": "many"}, "invalid_code"),
                ("no_such_tool", {}, "unknown_code"),
            ]:
                try:
                    r = await session.call_tool(name, args)
                    seen[key] = "result, is_error=%s" % r.is_error
                except MCPError as e:
                    seen[key] = e.error.code
            await session.send_ping()
            seen["ping"] = True
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
