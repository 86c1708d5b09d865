"""The service's A2A endpoint through the official Python client (a2a-sdk 1.x), v1.0 and v0.3.

Run by tests/clients/agent_protocols.rs against a live server with the research graph on the provider fakes
(env DR_URL, DR_KEY_A, DR_KEY_B: two owners).
"""

import asyncio
import os
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import (
    AgentCapabilities,
    InvalidParamsError,
    UnsupportedOperationError,
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)

URL = os.environ["DR_URL"].rstrip("/")
KEY_A = os.environ["DR_KEY_A"]
KEY_B = os.environ["DR_KEY_B"]
CARD_PATH = "/.well-known/agent-card.json?assistant_id=deep_research"


def run(coro):
    return asyncio.run(coro)


def http(key):
    return httpx.AsyncClient(headers={"x-api-key": key}, timeout=60)


async def card_of(key, path=CARD_PATH):
    async with http(key) as h:
        return await A2ACardResolver(h, URL).get_agent_card(relative_card_path=path)


async def client(key, streaming=False, card=None, polling=False):
    h = http(key)
    config = ClientConfig(streaming=streaming, polling=polling, httpx_client=h)
    return await create_client(card or await card_of(key), client_config=config)


def message(text, context_id=None, task_id=None):
    m = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    if context_id:
        m.context_id = context_id
    if task_id:
        m.task_id = task_id
    return m


async def send(c, text, context_id=None, task_id=None, metadata=None):
    request = SendMessageRequest(message=message(text, context_id, task_id))
    if metadata:
        request.metadata.update(metadata)
    events = [e async for e in c.send_message(request)]
    return events


def test_the_card_names_the_assistant_and_both_protocol_versions():
    card = run(card_of(KEY_A))
    assert card.name
    assert card.capabilities.streaming
    versions = {i.protocol_version for i in card.supported_interfaces}
    assert {"1.0", "0.3"} <= versions, versions
    assert all(i.url.startswith(URL + "/a2a/") for i in card.supported_interfaces)
    assert card.skills[0].id == "deep_research"
    # The card beside the endpoint is the same.
    again = run(card_of(KEY_A, "/a2a/deep_research/.well-known/agent-card.json"))
    assert again.name == card.name


def test_a_clarification_round_trip_then_a_cited_report_on_one_context():
    async def go():
        c = await client(KEY_A)
        [first] = await send(c, "Tell me about batteries, it is vague")
        task = first.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
        assert "Which aspect do you mean?" in get_message_text(task.status.message)
        context = task.context_id
        # The answer on the same context (and task): the research goes on there.
        [second] = await send(c, "Their costs, please.", context_id=context, task_id=task.id)
        done = second.task
        assert done.context_id == context
        assert done.status.state == TaskState.TASK_STATE_COMPLETED, done
        report = get_artifact_text(done.artifacts[0])
        assert report.startswith("# Report") and "### Sources" in report, report
        assert "invented.example" not in report
        # Read back, with the conversation.
        got = await c.get_task(GetTaskRequest(id=done.id, history_length=10))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        assert any("batteries" in get_message_text(m) for m in got.history)
        listed = await c.list_tasks(ListTasksRequest(context_id=context))
        assert {t.id for t in listed.tasks} == {task.id, done.id}
        assert listed.total_size == 2
        # The first task is over: it takes no more messages.
        with pytest.raises(UnsupportedOperationError):
            await send(c, "more", context_id=context, task_id=done.id)
        await c.close()

    run(go())


def test_streaming_shows_progress_then_the_report():
    async def go():
        c = await client(KEY_A, streaming=True)
        events = await send(c, "Compare solar and wind for a small farm")
        assert events[0].HasField("task")
        updates = [e.status_update for e in events if e.HasField("status_update")]
        texts = [get_message_text(u.status.message) for u in updates if u.status.HasField("message")]
        assert any(t.startswith("Brief: ") for t in texts), texts
        assert any("Researcher 1" in t for t in texts), texts
        artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
        assert len(artifacts) == 1
        assert get_artifact_text(artifacts[0].artifact).startswith("# Report")
        assert updates[-1].status.state == TaskState.TASK_STATE_COMPLETED
        await c.close()

    run(go())


def test_a_v03_client_gets_the_report_too():
    async def go():
        full = await card_of(KEY_A)
        url = full.supported_interfaces[0].url
        legacy = AgentCard(
            name=full.name,
            description=full.description,
            version=full.version,
            supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3")],
            capabilities=AgentCapabilities(streaming=True),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
        )
        for streaming in (False, True):
            c = await client(KEY_A, streaming=streaming, card=legacy)
            events = await send(c, "What is pumped hydro storage?")
            last = events[-1]
            state = last.status_update.status.state if last.HasField("status_update") else last.task.status.state
            assert state == TaskState.TASK_STATE_COMPLETED, events
            await c.close()

    run(go())


def test_cancel_and_what_a_finished_task_refuses():
    async def go():
        # The slow test graph keeps the task working long enough to cancel it.
        full = await card_of(KEY_A, "/a2a/slow/.well-known/agent-card.json")
        c = await client(KEY_A, card=full, polling=True)
        [started] = await send(c, "hi", metadata={"configurable": {"sleep_secs": 30}})
        task = started.task
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        cancelled = await c.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED, cancelled
        with pytest.raises(TaskNotCancelableError):
            await c.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await c.get_task(GetTaskRequest(id=str(uuid.uuid4())))
        await c.close()

    run(go())


def test_another_owner_cannot_see_or_continue_a_task():
    async def go():
        a = await client(KEY_A)
        [done] = await send(a, "What is a flywheel battery?")
        task = done.task
        b = await client(KEY_B)
        with pytest.raises(TaskNotFoundError):
            await b.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await b.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(InvalidParamsError):
            await send(b, "continue theirs", context_id=task.context_id)
        listed = await b.list_tasks(ListTasksRequest())
        assert task.id not in {t.id for t in listed.tasks}
        await a.close()
        await b.close()

    run(go())


def test_bad_requests_get_json_rpc_errors():
    async def go():
        async with http(KEY_A) as h:
            endpoint = URL + "/a2a/deep_research"

            async def call(body, raw=None):
                r = await h.post(endpoint, content=raw, json=None if raw else body,
                                 headers={"content-type": "application/json"})
                assert r.status_code == 200, r.text
                return r.json()["error"]

            assert (await call(None, raw=b"{not json"))["code"] == -32700
            assert (await call({"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}}))["code"] == -32601
            assert (await call({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {}}))["code"] == -32602
            assert (await call({"jsonrpc": "1.0", "id": 3, "method": "SendMessage"}))["code"] == -32600
            file_part = {"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"url": "https://x.example/a.pdf"}]}}
            assert (await call({"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": file_part}))["code"] == -32005
            push = {"jsonrpc": "2.0", "id": 5, "method": "CreateTaskPushNotificationConfig", "params": {}}
            assert (await call(push))["code"] == -32003
            error = await call({"jsonrpc": "2.0", "id": 6, "method": "GetTask", "params": {"id": "not-a-uuid"}})
            assert error["code"] == -32602 and set(error) == {"code", "message"}
            # What cannot be honoured is refused, not ignored.
            ask = {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "hi"}]}
            images = {"message": ask, "configuration": {"acceptedOutputModes": ["image/png"]}}
            assert (await call({"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": images}))["code"] == -32005
            hooks = {"message": ask, "configuration": {"taskPushNotificationConfig": {"url": "https://x.example/"}}}
            assert (await call({"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": hooks}))["code"] == -32003
            later = {"statusTimestampAfter": "2999-01-01T00:00:00Z"}
            r = await h.post(endpoint, json={"jsonrpc": "2.0", "id": 10, "method": "ListTasks", "params": later})
            assert r.json()["result"]["tasks"] == [], r.text
            bad = {"statusTimestampAfter": "yesterday"}
            assert (await call({"jsonrpc": "2.0", "id": 11, "method": "ListTasks", "params": bad}))["code"] == -32602
            # Without credentials: the API's own 401.
            r = await httpx.AsyncClient().post(endpoint, json={"jsonrpc": "2.0", "id": 7, "method": "GetTask"})
            assert r.status_code == 401

    run(go())


def test_params_context_is_the_runs_context_as_on_langgraphs_server():
    # LangGraph's server reads `params.context` of a send into the run's context; a2a-sdk has
    # no field for it, so this is raw JSON-RPC.
    async def go():
        async with http(KEY_A) as h:
            endpoint = URL + "/a2a/slow"
            ask = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": "hi"}]}

            async def send_raw(params):
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
                r = await h.post(endpoint, json=body)
                assert r.status_code == 200, r.text
                return r.json()

            sent = await send_raw({"message": ask, "context": {"sleep_secs": 0.1}})
            task = sent["result"]["task"]
            # the slow graph's answer ends its turn: the task then waits for the next message
            assert task["status"]["message"]["parts"] == [{"text": "slow done"}], task
            r = await h.get(f"{URL}/threads/{task['contextId']}/runs/{task['id']}")
            kwargs = r.json()["kwargs"]
            assert kwargs["context"] == {"sleep_secs": 0.1}, kwargs
            assert kwargs["config"]["configurable"]["sleep_secs"] == 0.1, kwargs
            # not an object, or beside configurable: refused, nothing started
            for params in (
                {"message": ask, "context": "fast"},
                {"message": ask, "context": {"sleep_secs": 0.1},
                 "metadata": {"configurable": {"sleep_secs": 0.1}}},
            ):
                error = (await send_raw(params))["error"]
                assert error["code"] == -32602, error
                assert "context" in error["message"], error
            r = await h.post(f"{URL}/threads/count", json={})
            assert r.json() >= 1

    run(go())
