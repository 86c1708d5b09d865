"""The platform API around runs, through the official Python SDK: assistant
versions, the Store API (cross-thread memory), crons and webhooks.

Graphs are the deterministic test graphs described in test_sdk.py.
"""

from __future__ import annotations

import uuid

import pytest
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

HI = {"messages": [{"role": "human", "content": "hi"}]}

# ---- assistant versions ---------------------------------------------------------------


async def test_each_patch_is_a_version_listed_newest_first(client):
    a = await client.assistants.create("agent", config={"configurable": {"x": 1}}, name="v1")
    aid = a["assistant_id"]
    try:
        await client.assistants.update(aid, config={"configurable": {"x": 2}}, name="v2")
        third = await client.assistants.update(aid, metadata={"stage": "final"})
        assert third["version"] == 3
        versions = await client.assistants.get_versions(aid)
        assert [v["version"] for v in versions] == [3, 2, 1]
        assert [v["name"] for v in versions] == ["v2", "v2", "v1"]
        assert versions[2]["config"] == {"configurable": {"x": 1}}
        assert all(v["assistant_id"] == aid for v in versions)
        assert "updated_at" not in versions[0]
        # Paging and the metadata filter.
        page = await client.assistants.get_versions(aid, limit=1, offset=1)
        assert [v["version"] for v in page] == [2]
        final = await client.assistants.get_versions(aid, metadata={"stage": "final"})
        assert [v["version"] for v in final] == [3]
    finally:
        await client.assistants.delete(aid)


async def test_set_latest_points_back_and_the_next_patch_gets_a_new_number(client):
    a = await client.assistants.create("agent", config={"configurable": {"x": 1}}, name="first")
    aid = a["assistant_id"]
    try:
        await client.assistants.update(aid, config={"configurable": {"x": 2}}, name="second")
        back = await client.assistants.set_latest(aid, 1)
        assert back["version"] == 1
        assert back["name"] == "first"
        assert back["config"] == {"configurable": {"x": 1}}
        fetched = await client.assistants.get(aid)
        assert fetched["version"] == 1 and fetched["name"] == "first"
        # A patch after pointing back gets a number never used before.
        patched = await client.assistants.update(aid, name="third")
        assert patched["version"] == 3
        assert patched["config"] == {"configurable": {"x": 1}}
        assert [v["version"] for v in await client.assistants.get_versions(aid)] == [3, 2, 1]
    finally:
        await client.assistants.delete(aid)


async def test_set_latest_to_a_missing_version_is_404_and_changes_nothing(client):
    a = await client.assistants.create("agent", name="only")
    aid = a["assistant_id"]
    try:
        with pytest.raises(NotFoundError):
            await client.assistants.set_latest(aid, 7)
        fetched = await client.assistants.get(aid)
        assert fetched["version"] == 1 and fetched["updated_at"] == a["updated_at"]
        with pytest.raises(NotFoundError):
            await client.assistants.get_versions(str(uuid.uuid4()))
    finally:
        await client.assistants.delete(aid)


async def test_versions_of_bad_input_are_422(http):
    a = (await http.post("/assistants", json={"graph_id": "agent"})).json()
    aid = a["assistant_id"]
    try:
        for body in ({"version": "one"}, {}, {"version": 1, "extra": True}):
            r = await http.post(f"/assistants/{aid}/latest", json=body)
            assert r.status_code == 422, body
            assert "detail" in r.json()
        r = await http.post(f"/assistants/{aid}/versions", json={"limit": 0})
        assert r.status_code == 422
    finally:
        await http.delete(f"/assistants/{aid}")


async def test_a_run_uses_the_version_set_latest(client, new_thread):
    # `slow` sleeps `configurable.sleep_secs`; a version with a tiny sleep is observable
    # through the run's kwargs, which record the settings it ran with.
    a = await client.assistants.create("slow", config={"configurable": {"sleep_secs": 0.05}})
    aid = a["assistant_id"]
    try:
        await client.assistants.update(aid, config={"configurable": {"sleep_secs": 0.06}})
        await client.assistants.set_latest(aid, 1)
        tid = await new_thread()
        run = await client.runs.create(tid, aid, input=HI)
        await client.runs.join(tid, run["run_id"])
        stored = await client.runs.get(tid, run["run_id"])
        assert stored["kwargs"]["config"]["configurable"]["sleep_secs"] == 0.05
    finally:
        await client.assistants.delete(aid)


async def test_unprocessable_error_class_is_what_the_sdk_raises(client):
    a = await client.assistants.create("agent")
    try:
        with pytest.raises(UnprocessableEntityError):
            await client.assistants.update(a["assistant_id"], config="nope")
    finally:
        await client.assistants.delete(a["assistant_id"])
