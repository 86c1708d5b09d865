"""Calls one tool of the service's MCP server with the official client (mcp 2.x) and prints
the result as one JSON line: used by tests/real_model.rs to get a report from the real model
through MCP. Not a pytest module.

usage: call_tool.py URL TOOL QUESTION [CONFIGURABLE_JSON]
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url, tool, question, configurable):
    progress = []

    async def on_progress(done, total, message):
        progress.append(message)

    # The research takes minutes; keep-alive comments arrive meanwhile.
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(60, read=600))
    async with Client(streamable_http_client(url.rstrip("/") + "/mcp", http_client=http)) as c:
        arguments = {"question": question}
        if configurable:
            arguments["configurable"] = configurable
        result = await c.call_tool(tool, arguments, progress_callback=on_progress)
    print(json.dumps({
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": "\n".join(c.text for c in result.content if c.type == "text"),
        "links": [str(c.uri) for c in result.content if c.type == "resource_link"],
        "progress": progress,
    }))


if __name__ == "__main__":
    configurable = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], configurable))
