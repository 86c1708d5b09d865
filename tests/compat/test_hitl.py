"""Human in the loop through the official Python SDK: interrupts, `command`
(resume / update / goto), static breakpoints, and the bad input around them.

Graphs (see test_sdk.py): `hitl` has node `ask`, which interrupts with
{"question": "Approve?", "options": ["yes", "no"]} and then says
"answer: <resume value>", followed by node `agent` (the fake model's REPLY).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import httpx
import pytest

REPLY = "Hello there, I am a fake model."
QUESTION = {"question": "Approve?", "options": ["yes", "no"]}
TIMEOUT = 60.0


def human(text: str = "hi") -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": text}]}


def texts(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values.get("messages", [])]


async def collect(stream) -> list:
    async def drain():
        return [part async for part in stream]

    return await asyncio.wait_for(drain(), TIMEOUT)


async def interrupted_thread(client, new_thread) -> tuple[str, list]:
    """A `hitl` thread paused at `ask`, and the parts of the run that paused it."""
    tid = await new_thread()
    parts = await collect(
        client.runs.stream(tid, "hitl", input=human(), stream_mode=["values", "updates"])
    )
    return tid, parts


async def history_len(client, tid: str) -> int:
    return len(await client.threads.get_history(tid, limit=100))


# --------------------------------------------------------------------------
# interrupt()
# --------------------------------------------------------------------------


async def test_interrupt_is_shown_in_stream_run_thread_state_and_history(client, new_thread):
    tid, parts = await interrupted_thread(client, new_thread)
    values = [p.data for p in parts if p.event == "values"]
    pending = values[-1]["__interrupt__"]
    assert len(pending) == 1, values[-1]
    interrupt = pending[0]
    assert interrupt["value"] == QUESTION
    assert re.fullmatch(r"[0-9a-f]{32}", interrupt["id"]), interrupt
    assert "response_schema" in interrupt
    assert all("__interrupt__" not in v for v in values[:-1])
    updates = [p.data for p in parts if p.event == "updates"]
    assert updates[-1] == {"__interrupt__": pending}

    run_id = parts[0].data["run_id"]
    assert (await client.runs.get(tid, run_id))["status"] == "interrupted"

    thread = await client.threads.get(tid)
    assert thread["status"] == "interrupted"
    [(task_id, listed)] = thread["interrupts"].items()
    assert listed == [{"id": interrupt["id"], "value": QUESTION}]

    state = await client.threads.get_state(tid)
    assert state["next"] == ["ask"]
    assert state["tasks"][0]["id"] == task_id
    assert state["tasks"][0]["interrupts"] == listed
    assert state["interrupts"] == listed
    assert "resume" not in state["tasks"][0]
    head = (await client.threads.get_history(tid, limit=1))[0]
    assert head["tasks"][0]["interrupts"] == listed


async def test_wait_returns_values_with_the_interrupt(client, new_thread):
    tid = await new_thread()
    result = await client.runs.wait(tid, "hitl", input=human())
    assert result["__interrupt__"][0]["value"] == QUESTION
    assert texts(result) == ["hi"]


async def test_resume_answers_the_interrupt_and_the_graph_goes_on(client, new_thread):
    tid, _ = await interrupted_thread(client, new_thread)
    parts = await collect(client.runs.stream(tid, "hitl", command={"resume": "yes"}))
    final = [p.data for p in parts if p.event == "values"][-1]
    assert "__interrupt__" not in final
    assert texts(final) == ["hi", "answer: yes", REPLY]
    thread = await client.threads.get(tid)
    assert thread["status"] == "idle"
    assert thread["interrupts"] == {}
    state = await client.threads.get_state(tid)
    assert state["next"] == [] and state["interrupts"] == []


async def test_resume_by_interrupt_id(client, new_thread):
    tid, parts = await interrupted_thread(client, new_thread)
    interrupt_id = [p.data for p in parts if p.event == "values"][-1]["__interrupt__"][0]["id"]
    result = await client.runs.wait(tid, "hitl", command={"resume": {interrupt_id: "no"}})
    assert texts(result) == ["hi", "answer: no", REPLY]


async def test_interrupt_ids_are_stable_across_a_repeated_pause(client, new_thread):
    # agent-chat-ui resumes by the id it saw; an update without an answer keeps it pending
    tid, parts = await interrupted_thread(client, new_thread)
    first = [p.data for p in parts if p.event == "values"][-1]["__interrupt__"][0]["id"]
    again = await client.runs.wait(
        tid, "hitl", command={"update": {"messages": [{"type": "human", "content": "note"}]}}
    )
    assert again["__interrupt__"][0]["id"] == first
    assert texts(again) == ["hi", "note"]
    result = await client.runs.wait(tid, "hitl", command={"resume": {first: "yes"}})
    assert texts(result) == ["hi", "note", "answer: yes", REPLY]


async def test_update_and_goto_skip_the_question(client, new_thread):
    tid, _ = await interrupted_thread(client, new_thread)
    result = await client.runs.wait(
        tid,
        "hitl",
        command={"update": {"messages": [{"type": "ai", "content": "skipped"}]}, "goto": "agent"},
    )
    assert texts(result) == ["hi", "skipped", REPLY]
    assert (await client.threads.get(tid))["status"] == "idle"


async def test_goto_end_marks_the_thread_resolved(client, new_thread):
    # agent-chat-ui's "Mark as resolved"
    tid, _ = await interrupted_thread(client, new_thread)
    result = await client.runs.wait(tid, "hitl", input={}, command={"goto": "__end__"})
    assert texts(result) == ["hi"]
    thread = await client.threads.get(tid)
    assert thread["status"] == "idle" and thread["interrupts"] == {}
    assert (await client.threads.get_state(tid))["next"] == []


async def test_resume_after_a_cancel_runs_the_pending_node(client, new_thread):
    # a cancelled run leaves its node pending: the thread is interrupted without interrupts,
    # and agent-chat-ui's Resume continues it
    tid = await new_thread()
    run = await client.runs.create(
        tid, "slow", input=human("go"), config={"configurable": {"sleep_secs": 60}}
    )
    for _ in range(300):
        if (await client.runs.get(tid, run["run_id"]))["status"] == "running":
            break
        await asyncio.sleep(0.1)
    await asyncio.wait_for(client.runs.cancel(tid, run["run_id"], wait=True), TIMEOUT)
    assert (await client.threads.get(tid))["status"] == "interrupted"
    result = await client.runs.wait(
        tid, "slow", command={"resume": "go on"}, config={"configurable": {"sleep_secs": 0.1}}
    )
    assert texts(result) == ["go", "slow done"]


# --------------------------------------------------------------------------
# breakpoints
# --------------------------------------------------------------------------


async def test_interrupt_before_pauses_and_a_null_input_run_goes_on(client, new_thread):
    tid = await new_thread()
    parts = await collect(
        client.runs.stream(
            tid, "agent", input=human(), interrupt_before=["agent"], stream_mode=["updates"]
        )
    )
    assert [p.data for p in parts if p.event == "updates"] == [{"__interrupt__": []}]
    run_id = parts[0].data["run_id"]
    assert (await client.runs.get(tid, run_id))["status"] == "interrupted"
    thread = await client.threads.get(tid)
    assert thread["status"] == "interrupted" and thread["interrupts"] == {}
    assert (await client.threads.get_state(tid))["next"] == ["agent"]
    # the run that goes on does not stop at the same breakpoint again
    result = await client.runs.wait(tid, "agent", input=None, interrupt_before=["agent"])
    assert texts(result)[-1] == REPLY
    assert (await client.threads.get(tid))["status"] == "idle"


async def test_interrupt_after_pauses_between_nodes(client, new_thread):
    tid = await new_thread()
    result = await client.runs.wait(tid, "parent", input=human(), interrupt_after=["child"])
    assert texts(result) == ["hi", "from child"]
    assert (await client.threads.get_state(tid))["next"] == ["agent"]
    result = await client.runs.wait(tid, "parent", input=None)
    assert texts(result) == ["hi", "from child", REPLY]


async def test_interrupt_before_star_stops_before_every_node(client, new_thread):
    tid = await new_thread()
    await client.runs.wait(tid, "parent", input=human(), interrupt_before="*")
    assert (await client.threads.get_state(tid))["next"] == ["child"]
    await client.runs.wait(tid, "parent", input=None, interrupt_before="*")
    assert (await client.threads.get_state(tid))["next"] == ["agent"]
    result = await client.runs.wait(tid, "parent", input=None, interrupt_before="*")
    assert texts(result)[-1] == REPLY


async def test_breakpoints_from_the_assistant_config(client, new_thread):
    assistant = await client.assistants.create(
        "agent", config={"interrupt_before": ["agent"]}, name=f"bp-{uuid.uuid4()}"
    )
    try:
        tid = await new_thread()
        await client.runs.wait(tid, assistant["assistant_id"], input=human())
        assert (await client.threads.get_state(tid))["next"] == ["agent"]
    finally:
        await client.assistants.delete(assistant["assistant_id"])


# --------------------------------------------------------------------------
# bad input: a 4xx naming the problem, and the thread unchanged
# --------------------------------------------------------------------------


async def post_run(http: httpx.AsyncClient, tid: str, body: dict) -> httpx.Response:
    return await http.post(f"/threads/{tid}/runs/wait", json=body)


async def test_resume_on_a_thread_that_is_not_interrupted_is_409(client, http, new_thread):
    tid = await new_thread()
    await client.runs.wait(tid, "agent", input=human())
    before = await history_len(client, tid)
    r = await post_run(http, tid, {"assistant_id": "agent", "command": {"resume": "yes"}})
    assert r.status_code == 409, r.text
    assert "not interrupted" in r.json()["detail"]
    assert await history_len(client, tid) == before
    assert (await client.threads.get(tid))["status"] == "idle"
    assert await client.runs.list(tid) and len(await client.runs.list(tid)) == 1


async def test_unknown_interrupt_id_is_422(client, http, new_thread):
    tid, _ = await interrupted_thread(client, new_thread)
    before = await history_len(client, tid)
    unknown = "0" * 32
    r = await post_run(http, tid, {"assistant_id": "hitl", "command": {"resume": {unknown: "x"}}})
    assert r.status_code == 422, r.text
    assert unknown in r.json()["detail"]
    assert await history_len(client, tid) == before
    assert (await client.threads.get(tid))["status"] == "interrupted"


@pytest.mark.parametrize(
    "body, named",
    [
        ({"command": {"goto": "nowhere"}}, "nowhere"),
        ({"command": {"goto": ["agent", "nowhere"]}}, "nowhere"),
        ({"command": {"goto": {"node": "agent", "input": {}}}}, "goto"),
        ({"command": {"resume": "x", "jump": 1}}, "jump"),
        ({"command": {}}, "command"),
        ({"command": "yes"}, "command"),
        ({"command": {"update": 5}}, "command.update"),
        ({"input": {}, "interrupt_before": ["nowhere"]}, "nowhere"),
        ({"input": {}, "interrupt_after": "agent"}, "interrupt_after"),
        ({"input": {}, "interrupt_after": [1]}, "interrupt_after"),
    ],
)
async def test_bad_command_or_breakpoint_is_422_and_changes_nothing(
    client, http, new_thread, body, named
):
    tid, _ = await interrupted_thread(client, new_thread)
    before = await history_len(client, tid)
    r = await post_run(http, tid, {"assistant_id": "hitl", **body})
    assert r.status_code == 422, r.text
    assert named in r.json()["detail"]
    assert await history_len(client, tid) == before
    assert len(await client.runs.list(tid)) == 1


async def test_command_on_a_stateless_run_is_400(http):
    r = await http.post("/runs/wait", json={"assistant_id": "hitl", "command": {"resume": "x"}})
    assert r.status_code == 400, r.text
