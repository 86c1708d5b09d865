"""LangGraph Server wire compatibility, checked through the real Python SDK.

Runs against a live server (env `LG_URL`). The contract is
shared/reference/langgraph-api.md; the "row N" comments point at its §8.2 table.

The server registers these deterministic test graphs (graph id = assistant name;
each has a system assistant with id uuid5(NAMESPACE, graph_id)):

* `agent`  - node `agent` streams "Hello there, I am a fake model." word by word
             as AIMessageChunk tokens (one message id) and returns it as one AI
             message.
* `slow`   - node `slow` sleeps `config.configurable.sleep_secs` seconds
             (default 3; stops promptly when cancelled), then says "slow done".
* `err`    - node `fail` raises ValueError("kaboom").
* `parent` - node `child` runs a subgraph (node `inner` says "from child"),
             then node `agent` as above.

Every test makes its own thread(s); nothing depends on test order.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError
from langgraph_sdk.schema import StreamPart

# --------------------------------------------------------------------------
# constants and helpers
# --------------------------------------------------------------------------

ASSISTANT_NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


def system_assistant_id(graph_id: str) -> str:
    return str(uuid.uuid5(ASSISTANT_NAMESPACE, graph_id))


AGENT_ID = system_assistant_id("agent")
assert AGENT_ID == "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
TEST_GRAPHS = ("agent", "slow", "err", "parent")
REPLY = "Hello there, I am a fake model."

ASSISTANT_KEYS = {
    "assistant_id", "graph_id", "config", "context", "metadata", "name",
    "description", "version", "created_at", "updated_at",
}
# `interrupts` is always sent by us (§5.2); the reference omits it on fresh threads.
THREAD_KEYS = {
    "thread_id", "created_at", "updated_at", "metadata", "status", "values",
    "interrupts",
}
RUN_KEYS = {
    "run_id", "thread_id", "assistant_id", "created_at", "updated_at", "status",
    "metadata", "multitask_strategy", "kwargs",
}
STATE_KEYS = {
    "values", "next", "tasks", "metadata", "created_at", "checkpoint",
    "parent_checkpoint", "interrupts",
}
STREAM_TIMEOUT = 60.0  # seconds for any single stream/wait to finish


def human(text: str = "hi") -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": text}]}


def slow_config(secs: float) -> dict[str, Any]:
    return {"configurable": {"sleep_secs": secs}}


def text_of(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def ckpt_id(state: dict[str, Any]) -> str:
    return state["checkpoint"]["checkpoint_id"]


def parent_id(state: dict[str, Any]) -> str | None:
    parent = state.get("parent_checkpoint")
    return parent["checkpoint_id"] if parent else None


async def collect(stream, timeout: float = STREAM_TIMEOUT) -> list[StreamPart]:
    """Drain an SDK stream, failing (not hanging) if it does not end in time."""

    async def drain():
        return [part async for part in stream]

    return await asyncio.wait_for(drain(), timeout)


async def bounded(awaitable, timeout: float = STREAM_TIMEOUT):
    return await asyncio.wait_for(awaitable, timeout)


async def wait_for_run_status(client, tid, rid, *wanted: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        run = await client.runs.get(tid, rid)
        if run["status"] in wanted:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(
                f"run {rid} is {run['status']!r} after {timeout}s, wanted {wanted}"
            )
        await asyncio.sleep(0.1)


async def start_running_slow(client, tid, secs: float = 30, **kwargs) -> dict:
    """Create a `slow` run and return once the server reports it running."""
    run = await client.runs.create(
        tid, "slow", input=human("go slow"), config=slow_config(secs), **kwargs
    )
    await wait_for_run_status(client, tid, run["run_id"], "running")
    return run


async def stream_agent(client, tid, text: str = "hi", **kwargs):
    """`runs.stream` on `agent`; returns (parts, run-created callbacks)."""
    created: list[dict] = []
    parts = await collect(
        client.runs.stream(
            tid, "agent", input=human(text), on_run_created=created.append, **kwargs
        )
    )
    return parts, created


def last_values(parts: list[StreamPart]) -> dict[str, Any]:
    values = [p.data for p in parts if p.event == "values"]
    assert values, f"no values event in {[p.event for p in parts]}"
    return values[-1]


def assert_ends_with_reply(values: dict[str, Any], reply: str = REPLY) -> None:
    last = values["messages"][-1]
    assert last["type"] == "ai", last
    assert text_of(last) == reply


def parse_event_id(event_id: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)-(\d+)", event_id)
    assert m, f"event id {event_id!r} is not <ms>-<seq>"
    return int(m.group(1)), int(m.group(2))


SSE_FRAME = re.compile(
    rb"event: (?P<event>[^\r\n]+)\r\ndata: (?P<data>[^\r\n]*)(?:\r\nid: (?P<id>[^\r\n]+))?"
)


def parse_sse_frames(raw: bytes) -> list[dict[str, Any]]:
    """Split a raw SSE body into frames, checking the byte-level framing of §4.2.

    Returns one dict per event frame ({event, data, id}); comment frames
    (heartbeats) are checked and dropped.
    """
    assert raw.endswith(b"\r\n\r\n"), f"body does not end with a blank CRLF line: {raw[-40:]!r}"
    frames = []
    for chunk in raw[: -len(b"\r\n\r\n")].split(b"\r\n\r\n"):
        assert b"\n" not in chunk.replace(b"\r\n", b""), f"bare LF in frame {chunk!r}"
        assert b"\r" not in chunk.replace(b"\r\n", b""), f"bare CR in frame {chunk!r}"
        if chunk.startswith(b":"):
            assert b"\r\n" not in chunk, f"multi-line comment frame {chunk!r}"
            continue
        m = SSE_FRAME.fullmatch(chunk)
        assert m, f"frame is not `event: X CRLF data: <json> CRLF [id: ...]`: {chunk!r}"
        frames.append(
            {
                "event": m["event"].decode(),
                "data": json.loads(m["data"]),  # one line of valid JSON
                "id": m["id"].decode() if m["id"] else None,
            }
        )
    return frames


# --------------------------------------------------------------------------
# meta
# --------------------------------------------------------------------------


async def test_ok_endpoint(http):
    r = await http.get("/ok")
    assert r.status_code == 200
    assert r.json()["ok"] is True


async def test_info_endpoint_returns_flags(http):
    r = await http.get("/info")
    assert r.status_code == 200
    assert isinstance(r.json().get("flags"), dict)


# --------------------------------------------------------------------------
# assistants (row 1 and extras)
# --------------------------------------------------------------------------


async def test_system_assistant_found_by_graph_id_search(client):
    found = await client.assistants.search(graph_id="agent", limit=100)
    by_id = {a["assistant_id"]: a for a in found}
    assert AGENT_ID in by_id, f"system assistant missing from {list(by_id)}"
    assistant = by_id[AGENT_ID]
    assert ASSISTANT_KEYS <= assistant.keys()
    assert assistant["graph_id"] == "agent"
    assert assistant["name"] == "agent"
    assert assistant["metadata"].get("created_by") == "system"
    assert assistant["version"] == 1
    assert all(a["graph_id"] == "agent" for a in found)


async def test_every_test_graph_has_uuid5_system_assistant(client):
    for graph_id in TEST_GRAPHS:
        assistant = await client.assistants.get(system_assistant_id(graph_id))
        assert ASSISTANT_KEYS <= assistant.keys()
        assert assistant["assistant_id"] == system_assistant_id(graph_id)
        assert assistant["graph_id"] == graph_id


async def test_get_graph_has_nodes_and_edges(client):
    for ref in (AGENT_ID, "agent"):  # a graph id works wherever an assistant id does
        graph = await client.assistants.get_graph(ref)
        node_ids = {n["id"] for n in graph["nodes"]}
        assert {"__start__", "agent", "__end__"} <= node_ids
        edges = {(e["source"], e["target"]) for e in graph["edges"]}
        assert ("__start__", "agent") in edges
        assert ("agent", "__end__") in edges


async def test_get_schemas_has_graph_id_and_state_schema(client):
    schemas = await client.assistants.get_schemas(AGENT_ID)
    assert schemas["graph_id"] == "agent"
    for key in ("input_schema", "output_schema", "state_schema", "config_schema"):
        assert key in schemas
    assert isinstance(schemas["state_schema"], dict)


async def test_assistant_create_returns_full_object(client):
    marker = uuid.uuid4().hex
    assistant = await client.assistants.create(
        "agent", metadata={"marker": marker}, name=f"compat-{marker}"
    )
    try:
        assert ASSISTANT_KEYS <= assistant.keys()
        uuid.UUID(assistant["assistant_id"])
        assert assistant["assistant_id"] != AGENT_ID
        assert assistant["graph_id"] == "agent"
        assert assistant["name"] == f"compat-{marker}"
        assert assistant["metadata"]["marker"] == marker
        found = await client.assistants.search(metadata={"marker": marker})
        assert [a["assistant_id"] for a in found] == [assistant["assistant_id"]]
    finally:
        await client.assistants.delete(assistant["assistant_id"])


async def test_assistant_create_if_exists(client):
    aid = str(uuid.uuid4())
    first = await client.assistants.create("agent", assistant_id=aid, name="first")
    try:
        assert first["assistant_id"] == aid
        same = await client.assistants.create(
            "agent", assistant_id=aid, name="second", if_exists="do_nothing"
        )
        assert same["assistant_id"] == aid
        assert same["name"] == "first"
        with pytest.raises(ConflictError):
            await client.assistants.create("agent", assistant_id=aid, if_exists="raise")
    finally:
        await client.assistants.delete(aid)


async def test_assistant_create_with_unknown_graph_is_not_found(client):
    with pytest.raises(NotFoundError):
        await client.assistants.create("no-such-graph-" + uuid.uuid4().hex)


async def test_assistant_update_merges_metadata_and_renames(client):
    assistant = await client.assistants.create("agent", metadata={"a": 1}, name="before")
    aid = assistant["assistant_id"]
    try:
        updated = await client.assistants.update(aid, metadata={"b": 2}, name="after")
        assert updated["assistant_id"] == aid
        assert updated["name"] == "after"
        assert updated["metadata"]["a"] == 1
        assert updated["metadata"]["b"] == 2
        fetched = await client.assistants.get(aid)
        assert fetched["name"] == "after"
        assert fetched["metadata"]["b"] == 2
    finally:
        await client.assistants.delete(aid)


async def test_assistant_delete_then_get_is_not_found(client, http):
    assistant = await client.assistants.create("agent")
    aid = assistant["assistant_id"]
    r = await http.delete(f"/assistants/{aid}")
    assert r.status_code == 204
    with pytest.raises(NotFoundError):
        await client.assistants.get(aid)


async def test_run_with_user_assistant_stamps_its_id_on_thread(client, new_thread):
    assistant = await client.assistants.create("agent")
    aid = assistant["assistant_id"]
    try:
        tid = await new_thread()
        values = await bounded(client.runs.wait(tid, aid, input=human()))
        assert_ends_with_reply(values)
        thread = await client.threads.get(tid)
        assert thread["metadata"]["assistant_id"] == aid
        assert thread["metadata"]["graph_id"] == "agent"
    finally:
        await client.assistants.delete(aid)


async def test_assistant_context_reaches_its_runs_and_a_run_overrides_it(client, new_thread):
    # `slow` sleeps `configurable.sleep_secs` (3 s by default)
    assistant = await client.assistants.create("slow", context={"sleep_secs": 0.05})
    aid = assistant["assistant_id"]
    try:
        tid = await new_thread()
        started = time.monotonic()
        await bounded(client.runs.wait(tid, aid, input=human()))
        assert time.monotonic() - started < 2.5, "the assistant's context was not applied"
        await bounded(client.runs.wait(tid, aid, input=human(), context={"sleep_secs": 0.01}))
        first, second = reversed(await client.runs.list(tid))
        assert first["kwargs"]["config"]["configurable"]["sleep_secs"] == 0.05
        assert second["kwargs"]["config"]["configurable"]["sleep_secs"] == 0.01
    finally:
        await client.assistants.delete(aid)


# --------------------------------------------------------------------------
# threads (rows 2, 6, 16 and extras)
# --------------------------------------------------------------------------


async def test_thread_create_is_idle_with_metadata_and_no_values(client, new_thread):
    marker = uuid.uuid4().hex
    tid = await new_thread(metadata={"marker": marker})
    uuid.UUID(tid)
    thread = await client.threads.get(tid)
    assert THREAD_KEYS <= thread.keys()
    assert thread["status"] == "idle"
    assert thread["metadata"]["marker"] == marker
    assert thread["values"] is None


async def test_thread_create_with_id_honours_if_exists(client, new_thread):
    tid = str(uuid.uuid4())
    assert await new_thread(thread_id=tid, metadata={"n": 1}) == tid
    with pytest.raises(ConflictError):
        await client.threads.create(thread_id=tid)
    same = await client.threads.create(thread_id=tid, if_exists="do_nothing")
    assert same["thread_id"] == tid
    assert same["metadata"]["n"] == 1


async def test_thread_update_merges_metadata(client, new_thread):
    tid = await new_thread(metadata={"a": 1})
    updated = await client.threads.update(tid, metadata={"b": 2})
    assert updated["metadata"]["a"] == 1
    assert updated["metadata"]["b"] == 2
    assert (await client.threads.get(tid))["metadata"]["b"] == 2


async def test_thread_update_with_return_minimal_answers_nothing_and_applies(
    client, new_thread
):
    tid = await new_thread(metadata={"a": 1})
    assert await client.threads.update(tid, metadata={"c": 3}, return_minimal=True) is None
    assert (await client.threads.get(tid))["metadata"] == {"a": 1, "c": 3}


async def test_thread_delete_then_get_is_not_found(client, http, new_thread):
    tid = await new_thread()
    r = await http.delete(f"/threads/{tid}")
    assert r.status_code == 204
    with pytest.raises(NotFoundError):
        await client.threads.get(tid)


async def test_thread_search_filters_metadata_newest_first(client, new_thread):
    marker = uuid.uuid4().hex
    tids = [await new_thread(metadata={"suite": marker, "i": i}) for i in range(3)]
    found = await client.threads.search(metadata={"suite": marker}, limit=10)
    assert [t["thread_id"] for t in found] == tids[::-1]
    assert all(THREAD_KEYS <= t.keys() for t in found)
    only_one = await client.threads.search(metadata={"suite": marker, "i": 1})
    assert [t["thread_id"] for t in only_one] == [tids[1]]


async def test_thread_search_pagination_headers(http, new_thread):
    marker = uuid.uuid4().hex
    for _ in range(3):
        await new_thread(metadata={"suite": marker})
    body = {"metadata": {"suite": marker}}

    r = await http.post("/threads/search", json={**body, "limit": 2, "offset": 0})
    assert r.status_code == 200
    assert len(r.json()) == 2
    assert r.headers["x-pagination-total"] == "3"
    assert r.headers["x-pagination-next"] == "2"

    r = await http.post("/threads/search", json={**body, "limit": 2, "offset": 2})
    assert len(r.json()) == 1
    assert r.headers["x-pagination-total"] == "3"
    assert "x-pagination-next" not in r.headers

    r = await http.post("/threads/search", json={**body, "limit": 10, "offset": 0})
    assert len(r.json()) == 3
    assert r.headers["x-pagination-total"] == "3"
    assert "x-pagination-next" not in r.headers


async def test_thread_search_finds_thread_by_graph_id_after_run(client, new_thread):
    # row 6
    marker = uuid.uuid4().hex
    tid = await new_thread(metadata={"marker": marker})
    await bounded(client.runs.wait(tid, "agent", input=human()))
    found = await client.threads.search(metadata={"graph_id": "agent", "marker": marker})
    assert [t["thread_id"] for t in found] == [tid]
    assert found[0]["values"]["messages"][-1]["type"] == "ai"  # sidebar needs values
    recent = await client.threads.search(metadata={"graph_id": "agent"}, limit=5)
    assert tid in [t["thread_id"] for t in recent]  # updated_at desc: it is among the newest


async def test_thread_copy_has_same_state(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human()))
    copy = await client.threads.copy(tid)
    try:
        assert copy["thread_id"] != tid
        original = await client.threads.get_state(tid)
        copied = await client.threads.get_state(copy["thread_id"])
        assert copied["values"] == original["values"]
        assert len(await client.threads.get_history(copy["thread_id"], limit=100)) == len(
            await client.threads.get_history(tid, limit=100)
        )
    finally:
        await client.threads.delete(copy["thread_id"])


async def test_fresh_thread_has_empty_state_and_history(client, new_thread):
    tid = await new_thread()
    state = await client.threads.get_state(tid)
    assert state["values"] == {}
    assert state["next"] == []
    assert state["checkpoint"] is None
    assert await client.threads.get_history(tid) == []


# --------------------------------------------------------------------------
# streaming a run (rows 3, 4)
# --------------------------------------------------------------------------

TUPLE_MODES = ["values", "updates", "messages-tuple"]


async def test_stream_first_event_is_metadata_and_on_run_created_gets_ids(client, new_thread):
    tid = await new_thread()
    parts, created = await stream_agent(client, tid, stream_mode=TUPLE_MODES)
    assert parts[0].event == "metadata"
    run_id = parts[0].data["run_id"]
    uuid.UUID(run_id)
    assert parts[0].data.get("attempt") == 1
    assert created == [{"run_id": run_id, "thread_id": tid}]  # from Content-Location


async def test_stream_emits_only_requested_modes(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES)
    events = {p.event for p in parts}
    assert events <= {"metadata", "values", "updates", "messages"}, events
    assert {"values", "updates", "messages"} <= events
    assert "end" not in events
    assert [p.event for p in parts].count("metadata") == 1


async def test_messages_tuple_events_are_message_meta_pairs(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES)
    messages = [p.data for p in parts if p.event == "messages"]
    assert messages
    for data in messages:
        assert isinstance(data, list) and len(data) == 2, data
        msg, meta = data
        assert msg["type"] and msg["id"], msg
        assert isinstance(meta, dict)
        assert meta["langgraph_node"] == "agent"


async def test_token_chunks_share_one_id_and_add_up_to_the_reply(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES)
    msgs = [p.data[0] for p in parts if p.event == "messages"]
    chunks = [m for m in msgs if m["type"] == "AIMessageChunk"]
    assert len(chunks) > 1, "expected word-by-word token chunks"
    assert {m["id"] for m in chunks} == {chunks[0]["id"]}
    assert "".join(text_of(m) for m in chunks) == REPLY
    # the finished message is not re-sent whole (its id was already streamed) ...
    assert {m["id"] for m in msgs} == {chunks[0]["id"]}
    # ... and the stored AI message keeps the streamed id, so clients merge them
    assert last_values(parts)["messages"][-1]["id"] == chunks[0]["id"]


async def test_updates_event_carries_node_output(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES)
    updates = [p.data for p in parts if p.event == "updates"]
    assert len(updates) == 1
    (ai,) = updates[0]["agent"]["messages"]
    assert ai["type"] == "ai" and text_of(ai) == REPLY


async def test_stream_values_start_with_input_and_end_with_reply(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES)
    values = [p.data for p in parts if p.event == "values"]
    assert [m["type"] for m in values[0]["messages"]] == ["human"]
    assert_ends_with_reply(values[-1])
    assert [m["type"] for m in values[-1]["messages"]] == ["human", "ai"]


async def test_thread_after_stream_is_idle_with_values_and_graph_metadata(client, new_thread):
    # row 4: the run's final status is written before the stream closes
    tid = await new_thread(metadata={"keep": "me"})
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES)
    thread = await client.threads.get(tid)
    assert thread["status"] == "idle"
    assert thread["values"] == last_values(parts)
    assert thread["metadata"]["graph_id"] == "agent"
    assert thread["metadata"]["assistant_id"] == AGENT_ID
    assert thread["metadata"]["keep"] == "me"


async def test_stateless_stream(client):
    created: list[dict] = []
    parts = await collect(
        client.runs.stream(None, "agent", input=human(), on_run_created=created.append)
    )
    assert parts[0].event == "metadata"
    assert created and created[0]["run_id"] == parts[0].data["run_id"]
    assert {p.event for p in parts} <= {"metadata", "values"}
    assert_ends_with_reply(last_values(parts))


# --------------------------------------------------------------------------
# state and history (row 5, update_state)
# --------------------------------------------------------------------------


async def test_get_state_after_run(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human()))
    state = await client.threads.get_state(tid)
    assert STATE_KEYS <= state.keys()
    assert state["next"] == []
    assert state["tasks"] == []
    assert_ends_with_reply(state["values"])
    assert state["checkpoint"]["thread_id"] == tid
    assert state["checkpoint"]["checkpoint_ns"] == ""
    assert state["checkpoint"]["checkpoint_id"]
    assert state["metadata"]["source"] == "loop"


async def test_history_is_newest_first_with_chained_parents(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human()))
    state = await client.threads.get_state(tid)
    history = await client.threads.get_history(tid, limit=10)
    assert all(STATE_KEYS <= s.keys() for s in history)
    assert history[0]["checkpoint"] == state["checkpoint"]
    for newer, older in zip(history, history[1:]):
        assert parent_id(newer) == ckpt_id(older)
    oldest = history[-1]
    assert oldest["metadata"]["source"] == "input"
    assert oldest["parent_checkpoint"] is None
    # one run of `agent`: input (step -1), loop (0, input applied), loop (1, reply)
    assert [s["metadata"]["step"] for s in history] == [1, 0, -1]
    assert [s["metadata"]["source"] for s in history] == ["loop", "loop", "input"]
    assert history[1]["next"] == ["agent"]


async def test_checkpoint_ids_sort_in_creation_order(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human("one")))
    await bounded(client.runs.wait(tid, "agent", input=human("two")))
    ids = [ckpt_id(s) for s in await client.threads.get_history(tid, limit=100)]
    assert len(ids) == 6
    assert ids == sorted(ids, reverse=True), "newest-first ids must sort descending"
    assert len(set(ids)) == len(ids)


async def test_get_state_at_checkpoint_id(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human()))
    history = await client.threads.get_history(tid, limit=10)
    older = history[1]  # input applied, `agent` still to run
    state = await client.threads.get_state(tid, checkpoint_id=ckpt_id(older))
    assert ckpt_id(state) == ckpt_id(older)
    assert state["values"] == older["values"]
    assert state["next"] == ["agent"]
    assert parent_id(state) == parent_id(older)


async def test_update_state_as_node_writes_update_checkpoint(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human()))
    head_before = ckpt_id(await client.threads.get_state(tid))
    msg_id = f"edit-{uuid.uuid4().hex}"
    resp = await client.threads.update_state(
        tid, {"messages": [{"type": "ai", "content": "edited", "id": msg_id}]}, as_node="agent"
    )
    state = await client.threads.get_state(tid)
    assert resp["checkpoint"]["checkpoint_id"] == ckpt_id(state)
    assert resp["checkpoint"]["thread_id"] == tid
    assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai", "ai"]
    assert state["values"]["messages"][-1]["id"] == msg_id
    assert text_of(state["values"]["messages"][-1]) == "edited"
    assert state["next"] == []
    history = await client.threads.get_history(tid, limit=10)
    assert history[0]["metadata"]["source"] == "update"
    assert ckpt_id(history[0]) == ckpt_id(state)
    assert parent_id(history[0]) == head_before


# --------------------------------------------------------------------------
# more runs on a thread (rows 7, 8, 9, 10)
# --------------------------------------------------------------------------


async def test_second_run_on_thread_adds_two_messages(client, new_thread):
    # row 7
    tid = await new_thread()
    first = await bounded(client.runs.wait(tid, "agent", input=human("one")))
    parts, _ = await stream_agent(client, tid, "two", stream_mode="values")
    assert {p.event for p in parts} <= {"metadata", "values"}
    second = last_values(parts)
    assert len(second["messages"]) == len(first["messages"]) + 2
    assert [text_of(m) for m in second["messages"]][-2:] == ["two", REPLY]
    ids = [m["id"] for m in second["messages"]]
    assert len(set(ids)) == len(ids), "each model call must produce a fresh message id"


async def test_runs_list_newest_first_and_get(client, new_thread):
    # row 8
    tid = await new_thread()
    created: list[dict] = []
    for text in ("one", "two"):
        await bounded(
            client.runs.wait(tid, "agent", input=human(text), on_run_created=created.append)
        )
    assert len(created) == 2
    runs = await client.runs.list(tid)
    assert [r["run_id"] for r in runs] == [created[1]["run_id"], created[0]["run_id"]]
    assert all(r["status"] == "success" for r in runs)
    assert all(RUN_KEYS <= r.keys() for r in runs)
    assert runs[0]["created_at"] >= runs[1]["created_at"]
    run = await client.runs.get(tid, created[0]["run_id"])
    assert run["status"] == "success"
    assert run["thread_id"] == tid
    assert run["assistant_id"] == AGENT_ID


async def test_runs_create_then_join_returns_final_values(client, new_thread):
    # row 9
    tid = await new_thread()
    run = await client.runs.create(tid, "agent", input=human())
    assert RUN_KEYS <= run.keys()
    assert run["status"] == "pending"
    assert run["thread_id"] == tid
    assert run["assistant_id"] == AGENT_ID
    assert run["multitask_strategy"] == "enqueue"
    values = await bounded(client.runs.join(tid, run["run_id"]))
    assert_ends_with_reply(values)
    assert (await client.runs.get(tid, run["run_id"]))["status"] == "success"


async def test_stateless_wait_returns_final_values(client):
    # row 10
    values = await bounded(client.runs.wait(None, "agent", input=human()))
    assert_ends_with_reply(values)


async def test_sync_client_runs_a_thread(sync_client):
    tid = sync_client.threads.create()["thread_id"]
    try:
        parts = list(sync_client.runs.stream(tid, "agent", input=human()))
        assert parts[0].event == "metadata"
        assert_ends_with_reply(sync_client.threads.get_state(tid)["values"])
    finally:
        sync_client.threads.delete(tid)


# --------------------------------------------------------------------------
# resumable streams and joining (row 11)
# --------------------------------------------------------------------------


async def test_resumable_stream_parts_have_increasing_ids(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES, stream_resumable=True)
    assert all(p.id for p in parts), [p.id for p in parts]
    # stricter than the reference, which repeats ids within one millisecond (§4.7)
    keys = [parse_event_id(p.id) for p in parts]
    assert keys == sorted(keys) and len(set(keys)) == len(keys), "ids must strictly increase"


async def test_join_stream_replay_from_minus_one_equals_original(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES, stream_resumable=True)
    run_id = parts[0].data["run_id"]
    replay = await collect(client.runs.join_stream(tid, run_id, last_event_id="-1"))
    assert replay == parts


async def test_join_stream_after_first_id_yields_the_rest(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode=TUPLE_MODES, stream_resumable=True)
    run_id = parts[0].data["run_id"]
    rest = await collect(client.runs.join_stream(tid, run_id, last_event_id=parts[0].id))
    assert len(rest) == len(parts) - 1
    assert rest == parts[1:]


async def test_join_stream_of_running_run_receives_final_values(client, new_thread):
    tid = await new_thread()
    run = await start_running_slow(client, tid, secs=4)
    parts = await collect(client.runs.join_stream(tid, run["run_id"]))
    values = [p.data for p in parts if p.event == "values"]
    assert values, f"no values while joined: {[p.event for p in parts]}"
    assert text_of(values[-1]["messages"][-1]) == "slow done"
    assert (await client.runs.get(tid, run["run_id"]))["status"] == "success"


async def test_join_stream_of_finished_run_is_empty(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid)
    run_id = parts[0].data["run_id"]
    assert await collect(client.runs.join_stream(tid, run_id), timeout=15) == []


# --------------------------------------------------------------------------
# cancel and multitask strategies (rows 14, 15)
# --------------------------------------------------------------------------


async def test_thread_is_busy_while_a_run_is_running(client, new_thread):
    tid = await new_thread()
    run = await start_running_slow(client, tid, secs=2)
    assert (await client.threads.get(tid))["status"] == "busy"
    await bounded(client.runs.join(tid, run["run_id"]))
    assert (await client.threads.get(tid))["status"] == "idle"


async def test_cancel_with_wait_marks_run_interrupted(client, new_thread):
    # row 15
    tid = await new_thread()
    run = await start_running_slow(client, tid, secs=60)
    started = time.monotonic()
    await bounded(client.runs.cancel(tid, run["run_id"], wait=True), timeout=30)
    assert time.monotonic() - started < 15, "the slow node must stop promptly when cancelled"
    assert (await client.runs.get(tid, run["run_id"]))["status"] == "interrupted"
    # the cancelled node left `slow` pending, so the thread is interrupted (§3.5)
    assert (await client.threads.get(tid))["status"] == "interrupted"


async def test_cancel_without_wait_is_202_then_interrupted(client, http, new_thread):
    tid = await new_thread()
    run = await start_running_slow(client, tid, secs=60)
    r = await http.post(f"/threads/{tid}/runs/{run['run_id']}/cancel", params={"wait": 0})
    assert r.status_code == 202
    await wait_for_run_status(client, tid, run["run_id"], "interrupted", timeout=15)


async def test_reject_strategy_conflicts_while_a_run_is_active(client, new_thread):
    # row 14
    tid = await new_thread()
    await start_running_slow(client, tid, secs=60)
    with pytest.raises(ConflictError):
        await client.runs.create(tid, "agent", input=human(), multitask_strategy="reject")


async def test_enqueue_strategy_runs_second_after_first(client, new_thread):
    tid = await new_thread()
    first = await start_running_slow(client, tid, secs=3)
    second = await client.runs.create(
        tid, "agent", input=human("second"), multitask_strategy="enqueue"
    )
    assert second["status"] == "pending"
    assert (await client.runs.get(tid, second["run_id"]))["status"] == "pending"
    assert (await client.runs.get(tid, first["run_id"]))["status"] == "running"
    values = await bounded(client.runs.join(tid, second["run_id"]))
    assert [text_of(m) for m in values["messages"]] == ["go slow", "slow done", "second", REPLY]
    assert (await client.runs.get(tid, first["run_id"]))["status"] == "success"
    assert (await client.runs.get(tid, second["run_id"]))["status"] == "success"


async def test_interrupt_strategy_interrupts_first_and_runs_second(client, new_thread):
    tid = await new_thread()
    first = await start_running_slow(client, tid, secs=60)
    second = await client.runs.create(
        tid, "agent", input=human("second"), multitask_strategy="interrupt"
    )
    values = await bounded(client.runs.join(tid, second["run_id"]))
    assert_ends_with_reply(values)
    assert "slow done" not in [text_of(m) for m in values["messages"]]
    await wait_for_run_status(client, tid, first["run_id"], "interrupted", timeout=10)
    assert (await client.runs.get(tid, second["run_id"]))["status"] == "success"


async def test_rollback_strategy_deletes_first_run_and_its_checkpoints(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human("base")))
    baseline = {ckpt_id(s) for s in await client.threads.get_history(tid, limit=100)}

    first = await start_running_slow(client, tid, secs=60)
    deadline = time.monotonic() + 15
    while True:  # wait until the slow run has written its own checkpoints
        seen = {ckpt_id(s) for s in await client.threads.get_history(tid, limit=100)}
        if seen - baseline:
            break
        assert time.monotonic() < deadline, "slow run wrote no checkpoint"
        await asyncio.sleep(0.1)
    slow_checkpoints = seen - baseline

    second = await client.runs.create(
        tid, "agent", input=human("second"), multitask_strategy="rollback"
    )
    values = await bounded(client.runs.join(tid, second["run_id"]))
    assert [text_of(m) for m in values["messages"]] == ["base", REPLY, "second", REPLY]

    deadline = time.monotonic() + 10
    while True:  # the rolled-back run is deleted
        try:
            await client.runs.get(tid, first["run_id"])
        except NotFoundError:
            break
        assert time.monotonic() < deadline, "rolled-back run still exists"
        await asyncio.sleep(0.1)
    history = {ckpt_id(s) for s in await client.threads.get_history(tid, limit=100)}
    assert baseline <= history
    assert not (slow_checkpoints & history), "rolled-back checkpoints still in history"


# --------------------------------------------------------------------------
# forking and branching (extra)
# --------------------------------------------------------------------------


async def test_fork_from_older_checkpoint_without_input(client, new_thread):
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human()))
    history = await client.threads.get_history(tid, limit=10)
    old_head = history[0]
    target = history[1]  # parent of the AI reply: input applied, `agent` pending
    assert target["next"] == ["agent"]

    values = await bounded(
        client.runs.wait(tid, "agent", input=None, checkpoint_id=ckpt_id(target))
    )
    assert [m["type"] for m in values["messages"]] == ["human", "ai"]
    assert_ends_with_reply(values)

    after = await client.threads.get_history(tid, limit=100)
    by_id = {ckpt_id(s): s for s in after}
    forks = [s for s in after if s["metadata"]["source"] == "fork"]
    assert len(forks) == 1, [s["metadata"]["source"] for s in after]
    fork = forks[0]
    assert parent_id(fork) == ckpt_id(target)
    assert fork["values"] == target["values"]
    # both branches are present: the old head and the new one hang off `target`
    assert ckpt_id(old_head) in by_id
    new_head = after[0]
    assert ckpt_id(new_head) != ckpt_id(old_head)
    assert ckpt_id(new_head) == ckpt_id(await client.threads.get_state(tid))
    chain, cur = [], new_head
    while cur is not None:
        chain.append(ckpt_id(cur))
        cur = by_id.get(parent_id(cur)) if parent_id(cur) else None
    assert ckpt_id(fork) in chain and ckpt_id(target) in chain
    assert ckpt_id(old_head) not in chain
    children = {ckpt_id(s) for s in after if parent_id(s) == ckpt_id(target)}
    assert {ckpt_id(old_head), ckpt_id(fork)} <= children


async def test_edit_from_older_checkpoint_with_new_input_branches(client, new_thread):
    # agent-chat-ui "edit": new input on the parent of the state where the
    # original human message first appeared (§3.4, §6.1 step 9)
    tid = await new_thread()
    await bounded(client.runs.wait(tid, "agent", input=human("original")))
    history = await client.threads.get_history(tid, limit=10)
    old_head, first = history[0], history[-1]
    values = await bounded(
        client.runs.wait(
            tid,
            "agent",
            input=human("edited"),
            checkpoint={"checkpoint_id": ckpt_id(first), "checkpoint_ns": ""},
        )
    )
    assert [text_of(m) for m in values["messages"]] == ["edited", REPLY]
    after = await client.threads.get_history(tid, limit=100)
    ids = {ckpt_id(s) for s in after}
    assert ckpt_id(old_head) in ids
    branch_inputs = [
        s for s in after
        if parent_id(s) == ckpt_id(first) and s["metadata"]["source"] == "input"
    ]
    assert len(branch_inputs) == 1


# --------------------------------------------------------------------------
# errors raised by a graph (extra)
# --------------------------------------------------------------------------

KABOOM = {"error": "ValueError", "message": "kaboom"}


async def test_error_graph_streams_error_event_last(client, new_thread):
    tid = await new_thread()
    parts = await collect(client.runs.stream(tid, "err", input=human()))
    assert parts[0].event == "metadata"
    assert parts[-1].event == "error"
    assert parts[-1].data == KABOOM


async def test_error_graph_marks_thread_and_run_as_error(client, new_thread):
    tid = await new_thread()
    created: list[dict] = []
    await collect(
        client.runs.stream(tid, "err", input=human(), on_run_created=created.append)
    )
    thread = await client.threads.get(tid)
    assert thread["status"] == "error"
    assert (await client.runs.get(tid, created[0]["run_id"]))["status"] == "error"


async def test_wait_on_error_graph_returns_error_dict(client, new_thread):
    tid = await new_thread()
    result = await bounded(client.runs.wait(tid, "err", input=human(), raise_error=False))
    assert result == {"__error__": KABOOM}


async def test_wait_on_error_graph_raises_by_default(client, new_thread):
    tid = await new_thread()
    with pytest.raises(Exception, match="ValueError: kaboom"):
        await bounded(client.runs.wait(tid, "err", input=human()))


# --------------------------------------------------------------------------
# subgraphs and the legacy messages mode (extra)
# --------------------------------------------------------------------------

SUBGRAPH_EVENT = re.compile(r"(values|updates|messages)\|child:[^|]+")


async def test_stream_subgraphs_names_events_with_namespace(client, new_thread):
    tid = await new_thread()
    parts = await collect(
        client.runs.stream(
            tid, "parent", input=human(), stream_mode=TUPLE_MODES, stream_subgraphs=True
        )
    )
    names = [p.event for p in parts]
    nested = [p for p in parts if "|" in p.event]
    assert all(SUBGRAPH_EVENT.fullmatch(p.event) for p in nested), names
    assert {p.event.split("|")[0] for p in nested} == {"values", "updates", "messages"}, names
    assert len({p.event.split("|", 1)[1] for p in nested}) == 1, "one child task namespace"
    child_messages = [p.data for p in nested if p.event.startswith("messages|")]
    assert any(text_of(msg) == "from child" for msg, _ in child_messages)
    assert all(meta["langgraph_node"] == "inner" for _, meta in child_messages)
    assert any("inner" in p.data for p in nested if p.event.startswith("updates|"))
    root = [p.event for p in parts if "|" not in p.event]
    assert {"metadata", "values", "updates", "messages"} <= set(root)
    assert_ends_with_reply(last_values(parts))


async def test_without_stream_subgraphs_no_namespaced_events(client, new_thread):
    tid = await new_thread()
    parts = await collect(
        client.runs.stream(tid, "parent", input=human(), stream_mode=TUPLE_MODES)
    )
    assert not [p.event for p in parts if "|" in p.event]
    assert_ends_with_reply(last_values(parts))


async def test_legacy_messages_mode_metadata_then_accumulating_partials(client, new_thread):
    tid = await new_thread()
    parts, _ = await stream_agent(client, tid, stream_mode="messages")
    events = [p.event for p in parts]
    assert set(events) <= {"metadata", "messages/metadata", "messages/partial", "messages/complete"}
    first_partial = events.index("messages/partial")
    assert "messages/metadata" in events[:first_partial]
    meta_part = next(p for p in parts if p.event == "messages/metadata")
    partials = [p.data for p in parts if p.event == "messages/partial"]
    assert all(isinstance(d, list) and len(d) == 1 for d in partials)
    msg_id = partials[0][0]["id"]
    assert msg_id in meta_part.data
    assert meta_part.data[msg_id]["metadata"]["langgraph_node"] == "agent"
    contents = [text_of(d[0]) for d in partials]
    assert all(d[0]["id"] == msg_id and d[0]["type"] == "ai" for d in partials)
    for prev, cur in zip(contents, contents[1:]):
        assert cur.startswith(prev), (prev, cur)
    assert contents[-1] == REPLY
    assert len(partials) > 1


# --------------------------------------------------------------------------
# HTTP errors (extra)
# --------------------------------------------------------------------------


async def test_get_missing_thread_is_not_found(client, http):
    missing = str(uuid.uuid4())
    with pytest.raises(NotFoundError):
        await client.threads.get(missing)
    r = await http.get(f"/threads/{missing}")
    assert r.status_code == 404
    assert isinstance(r.json()["detail"], str)


async def test_bad_uuid_in_path_is_422_with_detail(http):
    r = await http.get("/threads/not-a-uuid")
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "uuid" in detail.lower(), detail


async def test_malformed_json_body_is_422(http):
    r = await http.post(
        "/threads", content=b'{"metadata": ', headers={"content-type": "application/json"}
    )
    assert r.status_code == 422
    assert "detail" in r.json()


async def test_run_on_missing_thread_is_404(client, http):
    missing = str(uuid.uuid4())
    with pytest.raises(NotFoundError):
        await client.runs.create(missing, "agent", input=human())
    r = await http.post(f"/threads/{missing}/runs", json={"assistant_id": "agent"})
    assert r.status_code == 404
    assert r.json() == {"detail": "Thread or assistant not found."}


async def test_stream_on_missing_thread_is_plain_json_404(http):
    r = await http.post(
        f"/threads/{uuid.uuid4()}/runs/stream", json={"assistant_id": "agent", "input": human()}
    )
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["detail"] == "Thread or assistant not found."


async def test_unknown_stream_mode_is_422(http, new_thread):
    tid = await new_thread()
    r = await http.post(
        f"/threads/{tid}/runs/stream",
        json={"assistant_id": "agent", "input": human(), "stream_mode": ["values", "bogus"]},
    )
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/json")
    assert "detail" in r.json()


async def test_unknown_assistant_in_run_is_422(http, new_thread):
    tid = await new_thread()
    r = await http.post(f"/threads/{tid}/runs", json={"assistant_id": "nope", "input": human()})
    assert r.status_code == 422
    assert "nope" in r.json()["detail"]


# --------------------------------------------------------------------------
# CORS (extra)
# --------------------------------------------------------------------------

ORIGIN = "http://localhost:3000"


async def test_cors_preflight_mirrors_requested_headers(http):
    r = await http.options(
        "/threads",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-api-key,x-auth-scheme",
        },
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] in ("*", ORIGIN)
    allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
    assert {"content-type", "x-api-key", "x-auth-scheme"} <= allowed, allowed
    assert "POST" in r.headers["access-control-allow-methods"].upper()


async def test_cors_preflight_allows_private_network(http):
    r = await http.options(
        "/threads",
        headers={
            "Origin": "https://example.invalid",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Private-Network": "true",
        },
    )
    # the reference sends the header but answers 400; Chrome needs a 2xx (§1 CORS)
    assert r.status_code == 200
    assert r.headers.get("access-control-allow-private-network") == "true"


async def test_cors_exposes_location_and_pagination_headers(http):
    # browsers read Expose-Headers on the actual response, not on the preflight;
    # `location` is our addition (the reference exposes only content-location)
    r = await http.post("/threads/search", json={"limit": 1}, headers={"Origin": ORIGIN})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] in ("*", ORIGIN)
    exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
    assert {"content-location", "location", "x-pagination-total", "x-pagination-next"} <= exposed


# --------------------------------------------------------------------------
# raw SSE bytes (§4.1, §4.2)
# --------------------------------------------------------------------------


async def _raw_stream(http, tid: str, body: dict) -> tuple[httpx.Response, bytes]:
    async def go():
        async with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as r:
            return r, b"".join([chunk async for chunk in r.aiter_raw()])

    return await bounded(go())


async def test_raw_sse_resumable_framing_and_headers(http, new_thread):
    tid = await new_thread()
    r, raw = await _raw_stream(
        http,
        tid,
        {"assistant_id": "agent", "input": human(), "stream_mode": TUPLE_MODES,
         "stream_resumable": True},
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    frames = parse_sse_frames(raw)
    assert frames[0]["event"] == "metadata"
    run_id = frames[0]["data"]["run_id"]
    assert r.headers["content-location"] == f"/threads/{tid}/runs/{run_id}"
    assert r.headers["location"] == f"/threads/{tid}/runs/{run_id}/stream"
    assert "end" not in {f["event"] for f in frames}
    assert all(f["id"] is not None for f in frames)
    keys = [parse_event_id(f["id"]) for f in frames]
    assert all(a < b for a, b in zip(keys, keys[1:])), f"ids not strictly increasing: {keys}"
    now_ms = time.time() * 1000
    assert abs(keys[0][0] - now_ms) < 10 * 60 * 1000, "id ms part is not a unix-ms timestamp"


async def test_raw_sse_without_resumable_has_no_ids(http, new_thread):
    tid = await new_thread()
    r, raw = await _raw_stream(
        http, tid, {"assistant_id": "agent", "input": human(), "stream_mode": "values"}
    )
    assert r.status_code == 200
    frames = parse_sse_frames(raw)
    assert [f["event"] for f in frames][0] == "metadata"
    assert {f["event"] for f in frames} <= {"metadata", "values"}
    assert all(f["id"] is None for f in frames)
