"""The service as an MCP server (/mcp) through the official Python client (mcp 2.x).

Run by tests/clients/agent_protocols.rs against a live server with the research graph on the provider
fakes (env DR_URL, DR_KEY_A, DR_KEY_B: two owners). Both ways the client connects are used:
"auto" (the stateless 2026-07-28 protocol, found by server/discover) and "legacy" (the
initialize handshake).
"""

import asyncio
import json
import os
import uuid

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL = os.environ["DR_URL"].rstrip("/")
KEY_A = os.environ["DR_KEY_A"]
KEY_B = os.environ["DR_KEY_B"]
MODES = ["auto", "legacy"]


def run(coro):
    return asyncio.run(coro)


def client(key, mode="auto"):
    http = httpx2.AsyncClient(headers={"x-api-key": key}, timeout=httpx2.Timeout(60, read=120))
    return Client(streamable_http_client(URL + "/mcp", http_client=http), mode=mode)


def text_of(result):
    return "\n".join(c.text for c in result.content if c.type == "text")


@pytest.mark.parametrize("mode", MODES)
def test_each_assistant_is_a_tool_that_takes_a_question(mode):
    async def go():
        async with client(KEY_A, mode) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert "deep_research" in tools, sorted(tools)
            research = tools["deep_research"]
            assert research.input_schema["required"] == ["question"]
            assert set(research.input_schema["properties"]) == {"question", "thread_id", "configurable"}
            assert "report" in research.description

    run(go())


@pytest.mark.parametrize("mode", MODES)
def test_a_clarification_round_trip_then_a_cited_report_with_progress(mode):
    async def go():
        async with client(KEY_A, mode) as c:
            asked = await c.call_tool("deep_research", {"question": "Tell me about batteries, it is vague"})
            assert not asked.is_error, asked
            assert asked.structured_content["status"] == "needs_input", asked
            assert "Which aspect do you mean?" in text_of(asked)
            thread_id = asked.structured_content["thread_id"]
            assert thread_id in text_of(asked)

            progress = []

            async def on_progress(done, total, message):
                progress.append(message)

            answered = await c.call_tool(
                "deep_research",
                {"question": "Their costs, please.", "thread_id": thread_id},
                progress_callback=on_progress,
            )
            assert not answered.is_error, answered
            report = text_of(answered)
            assert report.startswith("# Report") and "### Sources" in report, report
            assert "invented.example" not in report
            data = answered.structured_content
            assert data["status"] == "completed" and data["thread_id"] == thread_id
            links = [c for c in answered.content if c.type == "resource_link"]
            assert links and all(str(link.uri) in report for link in links), answered.content
            assert [s["url"] for s in data["sources"]] == [str(link.uri) for link in links]
            assert any(m and m.startswith("Brief: ") for m in progress), progress
            assert any(m and "Researcher 1" in m for m in progress), progress

    run(go())


def test_another_owners_thread_is_refused():
    async def go():
        async with client(KEY_A) as a:
            done = await a.call_tool("deep_research", {"question": "What is a flywheel battery?"})
            assert done.structured_content["status"] == "completed", done
            theirs = done.structured_content["thread_id"]
        async with client(KEY_B) as b:
            refused = await b.call_tool("deep_research", {"question": "continue", "thread_id": theirs})
            assert refused.is_error
            assert "not found" in text_of(refused), refused
        # Owner A's thread is untouched: still one run.
        async with httpx.AsyncClient(headers={"x-api-key": KEY_A}) as h:
            runs = (await h.get(f"{URL}/threads/{theirs}/runs")).json()
            assert len(runs) == 1, runs

    run(go())


def test_cancelling_the_call_interrupts_the_run():
    async def go():
        thread_id = str(uuid.uuid4())
        async with client(KEY_A) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert "slow" in tools, tools
            with anyio.move_on_after(2):
                await c.call_tool(
                    "slow",
                    {"question": "hi", "thread_id": thread_id, "configurable": {"sleep_secs": 30}},
                )
                pytest.fail("the slow run finished before it was cancelled")
        async with httpx.AsyncClient(headers={"x-api-key": KEY_A}) as h:
            for _ in range(100):
                runs = (await h.get(f"{URL}/threads/{thread_id}/runs")).json()
                if runs and runs[0]["status"] == "interrupted":
                    break
                await asyncio.sleep(0.1)
            assert runs and runs[0]["status"] == "interrupted", runs

    run(go())


def test_bad_calls_get_tool_errors_or_protocol_errors():
    async def go():
        async with client(KEY_A) as c:
            missing = await c.call_tool("deep_research", {})
            assert missing.is_error and "question is required" in text_of(missing)
            extra = await c.call_tool("deep_research", {"question": "q", "colour": "red"})
            assert extra.is_error and "colour" in text_of(extra)
            bad_thread = await c.call_tool("deep_research", {"question": "q", "thread_id": "nope"})
            assert bad_thread.is_error and "not a UUID" in text_of(bad_thread)
            with pytest.raises(MCPError) as unknown:
                await c.call_tool("no_such_tool", {"question": "q"})
            assert "Unknown tool" in str(unknown.value)

    run(go())


def test_no_key_no_mcp():
    async def go():
        async with httpx.AsyncClient() as h:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            response = await h.post(
                URL + "/mcp", json=body, headers={"accept": "application/json, text/event-stream"}
            )
            assert response.status_code == 401, response.text
            assert "detail" in response.json()

    run(go())


def test_what_is_not_json_rpc_gets_a_json_error():
    async def go():
        accept = {"accept": "application/json, text/event-stream", "x-api-key": KEY_A}
        async with httpx.AsyncClient() as h:
            for body in ("{}", "[1]", "not json"):
                response = await h.post(
                    URL + "/mcp", content=body, headers={**accept, "content-type": "application/json"}
                )
                assert response.status_code == 400, response.text
                assert response.json()["error"]["code"] == -32700
                assert response.json()["detail"]
            # The transport's own refusals are JSON too.
            no_stream = await h.post(
                URL + "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"x-api-key": KEY_A},
            )
            assert no_stream.status_code == 406 and "text/event-stream" in no_stream.json()["detail"]
            sessionless = await h.get(URL + "/mcp", headers=accept)
            assert sessionless.status_code == 405 and sessionless.json()["detail"]

    run(go())


class CallsWithContext(httpx2.AsyncBaseTransport):
    """Adds `params.context` to every tools/call, as a caller of LangGraph's server may (the
    mcp client has no argument for it)."""

    def __init__(self, context):
        self.inner = httpx2.AsyncHTTPTransport()
        self.context = context

    async def handle_async_request(self, request):
        if request.method == "POST":
            message = json.loads(await request.aread() or b"null")
            if isinstance(message, dict) and message.get("method") == "tools/call":
                message["params"]["context"] = self.context
                headers = [(k, v) for k, v in request.headers.items() if k.lower() != "content-length"]
                request = httpx2.Request("POST", request.url, headers=headers, content=json.dumps(message))
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


def test_params_context_of_a_call_is_the_runs_context():
    async def go():
        async def call_with(context, arguments):
            http = httpx2.AsyncClient(
                headers={"x-api-key": KEY_A}, timeout=60, transport=CallsWithContext(context)
            )
            async with Client(streamable_http_client(URL + "/mcp", http_client=http)) as c:
                return await c.call_tool("slow", arguments)

        thread_id = str(uuid.uuid4())
        done = await call_with({"sleep_secs": 0.1}, {"question": "hi", "thread_id": thread_id})
        assert not done.is_error, done
        async with httpx.AsyncClient(headers={"x-api-key": KEY_A}) as h:
            [made] = (await h.get(f"{URL}/threads/{thread_id}/runs")).json()
        assert made["kwargs"]["context"] == {"sleep_secs": 0.1}, made["kwargs"]
        assert made["kwargs"]["config"]["configurable"]["sleep_secs"] == 0.1
        # not an object, or beside configurable: a tool error, and no run
        other = str(uuid.uuid4())
        for context, extra in (("fast", {}), ({"sleep_secs": 0.1}, {"configurable": {"sleep_secs": 0.1}})):
            refused = await call_with(context, {"question": "hi", "thread_id": other, **extra})
            assert refused.is_error and "context" in text_of(refused), refused
        async with httpx.AsyncClient(headers={"x-api-key": KEY_A}) as h:
            assert (await h.get(f"{URL}/threads/{other}")).status_code == 404

    run(go())
