"""The official Python MCP client (PyPI `mcp`) against strata, for tests/it/mcp.rs and
tests/it/mcp_http.rs.

Usage: drive_mcp_client.py STRATA_BINARY DB_DIR. Spawns `strata --db DB_DIR mcp` through
the SDK's stdio transport, then: initialize, tools/list, a call of each read tool, a
question, invalid arguments, an unknown tool and a ping.

Usage: drive_mcp_client.py http BASE_URL FULL_TOKEN SCOPED_TOKEN. Talks to a running
`strata serve` at BASE_URL/mcp through the SDK's streamable-HTTP client
(`mcp.client.streamable_http.streamable_http_client`; mcp 2.x's name for 1.x's
`streamablehttp_client`): a request without a token, then with the full token initialize,
tools/list, a document ingested through the REST API mid-session and found with grep,
context and query; then a session of the scoped token (which may read `team-a-*` only).

Prints one JSON object (what was seen) on stdout; the Rust test judges it. Exits non-zero
on anything unexpected.
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


async def http_main(base: str, full: str, scoped: str) -> dict:
    import httpx2
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    seen = {"sdk": version("mcp")}
    url = base + "/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with httpx2.AsyncClient() as h:
        r = await h.post(url, json=init, headers={"accept": "application/json, text/event-stream"})
        seen["no_token_status"] = r.status_code

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {full}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                seen["server"] = init.server_info.name
                seen["protocol"] = init.protocol_version
                tools = await session.list_tools()
                seen["tools"] = sorted(t.name for t in tools.tools)
                # The REST API of the same server, while the session is open.
                doc = {
                    "scope": "team-a-docs",
                    "source": "notes/tram.md",
                    "text": "The council chose the site. The tram depot will be at Millbrook, next to "
                    "the river.\n",
                }
                r = await http.post(base + "/api/v1/documents", json=doc)
                seen["rest_ingest_status"] = r.status_code
                job = r.json()["job_id"]
                r = await http.get(f"{base}/api/v1/jobs/{job}?wait=60")
                assert r.json()["state"] == "done", r.text
                grep = payload(
                    await session.call_tool(
                        "grep", {"pattern": "tram depot Millbrook", "scopes": ["team-a-docs"]}
                    )
                )
                seen["grep_new_doc"] = sorted({h["scope"] for h in grep["hits"]})
                ctx = payload(
                    await session.call_tool("context", {"scope": "team-a-docs", "budget": 300})
                )
                seen["context_text"] = ctx["text"]
                q = payload(
                    await session.call_tool(
                        "query",
                        {"question": "Where will the tram depot be?", "scopes": ["team-a-docs"]},
                    )
                )
                seen["answer"] = q["answer"]
                seen["citations"] = len(q["citations"])

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {scoped}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                grep = payload(await session.call_tool("grep", {"pattern": "Millbrook depot"}))
                seen["reader_grep_scopes"] = sorted({h["scope"] for h in grep["hits"]})
                try:
                    await session.call_tool("context", {"scope": "team-b-docs", "budget": 300})
                    seen["reader_other_scope"] = "read"
                except MCPError as e:
                    seen["reader_other_scope"] = e.error.message
    return seen


if __name__ == "__main__":
    if sys.argv[1] == "http":
        seen = asyncio.run(http_main(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        seen = asyncio.run(main(sys.argv[1], sys.argv[2]))
    print(json.dumps(seen))
