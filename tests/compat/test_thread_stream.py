"""The thread-centric protocol through the Python SDK's `client.threads.stream`, over both of
its transports: SSE (commands over HTTP, events on `POST /threads/{id}/stream/events`) and
WebSocket (events on one socket at `GET /threads/{id}/stream/events`).

Runs against a live server (env `LG_URL`); the graphs are those test_sdk.py describes.
"""

from __future__ import annotations

import asyncio
import os

import pytest

REPLY = "Hello there, I am a fake model."


def session(client, transport):
    # The SDK's WebSocket handshake carries only the stream's own headers, not the client's
    # (its commands, sent over HTTP, carry both): a keyed server needs the key here too.
    key = {"x-api-key": os.environ["LG_API_KEY"]}
    return client.threads.stream(assistant_id="agent", transport=transport, headers=key)


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_a_run_started_on_the_stream_ends_with_its_reply(client, transport):
    async with session(client, transport) as thread:
        started = await thread.run.start(
            input={"messages": [{"type": "human", "content": "hi"}]}
        )
        assert started["run_id"]
        values = await thread.output.with_timeout(30)
        kind = type(thread._transport).__name__
    assert values["messages"][-1]["content"] == REPLY
    assert ("WebSocket" in kind) == (transport == "websocket"), kind
    state = await client.threads.get_state(thread.thread_id)
    assert state["values"]["messages"][-1]["content"] == REPLY


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_the_events_of_a_run_arrive_once_and_in_order(client, transport):
    async with session(client, transport) as thread:
        events = thread.events
        await thread.run.start(input={"messages": [{"type": "human", "content": "hi"}]})
        seen = []

        async def read():
            async for event in events:
                # over a socket, the answer to the SDK's own subscribe comes this way too
                if event.get("type") != "event":
                    continue
                seen.append(event)
                data = event.get("params", {}).get("data", {})
                if event.get("method") == "lifecycle" and data.get("event") == "completed":
                    return

        await asyncio.wait_for(read(), timeout=30)
    ids = [e["event_id"] for e in seen]
    assert len(set(ids)) == len(ids), ids
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(seqs), seqs
    methods = {e["method"] for e in seen}
    assert {"lifecycle", "values", "messages"} <= methods, methods
