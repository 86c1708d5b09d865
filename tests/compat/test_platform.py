"""The platform API around runs, through the official Python SDK: assistant
versions, the Store API (cross-thread memory), crons and webhooks.

Graphs are the deterministic test graphs described in test_sdk.py.
"""

from __future__ import annotations

import asyncio
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


# ---- the Store API ----------------------------------------------------------------------


def fresh_ns(*rest: str) -> list[str]:
    return ["t" + uuid.uuid4().hex[:12], *rest]


async def test_store_put_get_search_delete(client):
    root = fresh_ns()
    await client.store.put_item([*root, "u1"], "prefs", {"tone": "dry", "level": 3})
    await client.store.put_item([*root, "u1"], "notes", {"tone": "warm", "level": 8})
    await client.store.put_item([*root, "u2"], "prefs", {"tone": "dry", "level": 5})

    item = await client.store.get_item([*root, "u1"], "prefs")
    assert item["namespace"] == [*root, "u1"]
    assert item["key"] == "prefs"
    assert item["value"] == {"tone": "dry", "level": 3}
    assert item["created_at"] and item["updated_at"]
    assert await client.store.get_item([*root, "u1"], "missing") is None

    found = await client.store.search_items(root, filter={"tone": "dry"})
    assert [(i["namespace"][-1], i["key"]) for i in found["items"]] == [("u1", "prefs"), ("u2", "prefs")]
    assert all(i["score"] is None for i in found["items"])
    high = await client.store.search_items(root, filter={"level": {"$gte": 5}})
    assert sorted(i["key"] for i in high["items"]) == ["notes", "prefs"]
    page = await client.store.search_items(root, limit=1, offset=2)
    assert [i["namespace"][-1] for i in page["items"]] == ["u2"]

    spaces = await client.store.list_namespaces(prefix=root)
    assert spaces["namespaces"] == [[*root, "u1"], [*root, "u2"]]
    assert (await client.store.list_namespaces(prefix=root, max_depth=1))["namespaces"] == [root]
    assert (await client.store.list_namespaces(prefix=root, suffix=["u2"]))["namespaces"] == [[*root, "u2"]]

    await client.store.delete_item([*root, "u1"], "prefs")
    assert await client.store.get_item([*root, "u1"], "prefs") is None
    remaining = await client.store.search_items(root)
    assert sorted(i["key"] for i in remaining["items"]) == ["notes", "prefs"]


async def test_store_item_with_ttl_is_kept_then_expires(client, http):
    root = fresh_ns()
    # 0.02 minutes = 1.2 s.
    await client.store.put_item(root, "short", {"v": 1}, ttl=0.02)
    assert (await client.store.get_item(root, "short", refresh_ttl=False))["value"] == {"v": 1}
    await asyncio.sleep(1.5)
    assert await client.store.get_item(root, "short") is None
    assert (await client.store.search_items(root))["items"] == []


async def test_store_bad_input_is_422_and_stores_nothing(http):
    root = fresh_ns()
    bad_puts = [
        {"namespace": [*root, "a.b"], "key": "k", "value": {}},
        {"namespace": [], "key": "k", "value": {}},
        {"namespace": [*root, ""], "key": "k", "value": {}},
        {"namespace": root, "key": "", "value": {}},
        {"namespace": root, "key": "k", "value": [1, 2]},
        {"namespace": root, "key": "k", "value": {}, "ttl": -1},
        {"namespace": root, "key": "k", "value": {}, "index": ["$.text"]},
        {"namespace": root, "key": "k", "value": {}, "surprise": 1},
        {"namespace": "users", "key": "k", "value": {}},
    ]
    for body in bad_puts:
        r = await http.put("/store/items", json=body)
        assert r.status_code == 422, (body, r.text)
        assert "detail" in r.json()
    r = await http.post("/store/items/search", json={"namespace_prefix": root})
    assert r.json() == {"items": []}

    r = await http.get("/store/items", params={"namespace": ".".join(root)})
    assert r.status_code == 422 and "key" in r.json()["detail"]
    r = await http.post("/store/items/search", json={"namespace_prefix": root, "query": "cats"})
    assert r.status_code == 422 and "semantic search" in r.json()["detail"]
    r = await http.post("/store/items/search", json={"filter": {"n": {"$near": 1}}})
    assert r.status_code == 422 and "$near" in r.json()["detail"]
    r = await http.post("/store/items/search", json={"limit": 0})
    assert r.status_code == 422
    r = await http.post("/store/namespaces", json={"max_depth": 0})
    assert r.status_code == 422


# ---- crons ------------------------------------------------------------------------------


async def test_info_says_crons_are_served(http):
    assert (await http.get("/info")).json()["flags"]["crons"] is True


async def test_thread_cron_is_saved_with_its_next_tick(client, new_thread):
    tid = await new_thread()
    cron = await client.crons.create_for_thread(
        tid, "agent", schedule="0 9 * * MON", input=HI, metadata={"kind": "briefing"},
        timezone="Europe/Paris",
    )
    try:
        assert cron["thread_id"] == tid
        assert cron["schedule"] == "0 9 * * MON"
        assert cron["timezone"] == "Europe/Paris"
        assert cron["enabled"] is True
        assert cron["metadata"] == {"kind": "briefing"}
        assert cron["payload"]["input"] == HI
        # Monday 9:00 in Paris is 8:00 or 7:00 UTC, depending on the season.
        assert cron["next_run_date"][11:16] in ("07:00", "08:00"), cron["next_run_date"]
        system = await client.assistants.search(graph_id="agent", metadata={"created_by": "system"})
        assert cron["assistant_id"] == system[0]["assistant_id"]

        found = await client.crons.search(thread_id=tid)
        assert [c["cron_id"] for c in found] == [cron["cron_id"]]
        assert await client.crons.count(thread_id=tid) == 1
        picked = await client.crons.search(thread_id=tid, select=["cron_id", "schedule"])
        assert picked == [{"cron_id": cron["cron_id"], "schedule": "0 9 * * MON"}]
    finally:
        await client.crons.delete(cron["cron_id"])
    assert await client.crons.count(thread_id=tid) == 0


async def test_stateless_cron_update_and_delete(client, http):
    cron = await client.crons.create("agent", schedule="*/5 * * * *", input=HI)
    cid = cron["cron_id"]
    try:
        assert cron["thread_id"] is None
        updated = await client.crons.update(cid, schedule="0 0 1 1 *", enabled=False,
                                            on_run_completed="keep")
        assert updated["schedule"] == "0 0 1 1 *"
        assert updated["enabled"] is False
        assert updated["on_run_completed"] == "keep"
        assert updated["next_run_date"][5:16] == "01-01T00:00"
        assert (await http.get(f"/runs/crons/{cid}")).json()["schedule"] == "0 0 1 1 *"
        disabled = await client.crons.search(enabled=False)
        assert cid in [c["cron_id"] for c in disabled]
    finally:
        await client.crons.delete(cid)
    assert (await http.get(f"/runs/crons/{cid}")).status_code == 404
    with pytest.raises(NotFoundError):
        await client.crons.delete(cid)


async def test_a_thread_cron_goes_with_its_thread(client, new_thread):
    tid = await new_thread()
    cron = await client.crons.create_for_thread(tid, "agent", schedule="* * * * *", input=HI)
    await client.threads.delete(tid)
    with pytest.raises(NotFoundError):
        await client.crons.update(cron["cron_id"], enabled=False)


async def test_cron_bad_input_is_refused_and_saves_nothing(http, new_thread):
    tid = await new_thread()
    before = (await http.post("/runs/crons/count", json={})).json()
    bad = [
        ({"assistant_id": "agent", "schedule": "every monday"}, 422, "schedule"),
        ({"assistant_id": "agent", "schedule": "* * * * * *"}, 422, "five-field"),
        ({"assistant_id": "agent", "schedule": "* * * * *", "timezone": "Mars/Base"}, 422, "timezone"),
        ({"assistant_id": "agent"}, 422, "schedule is required"),
        ({"schedule": "* * * * *"}, 422, "assistant_id"),
        ({"assistant_id": "nope", "schedule": "* * * * *"}, 422, "nope"),
        ({"assistant_id": "agent", "schedule": "* * * * *", "end_time": "soon"}, 422, "end_time"),
        ({"assistant_id": "agent", "schedule": "* * * * *", "command": {"resume": 1}}, 422, "command"),
        ({"assistant_id": "agent", "schedule": "* * * * *", "multitask_strategy": "sometimes"}, 422, "multitask_strategy"),
        ({"assistant_id": "agent", "schedule": "* * * * *", "interrupt_before": ["nowhere"]}, 422, "nowhere"),
        ({"assistant_id": "agent", "schedule": "* * * * *", "on_run_completed": "explode"}, 422, "on_run_completed"),
    ]
    for body, status, words in bad:
        r = await http.post("/runs/crons", json=body)
        assert r.status_code == status, (body, r.text)
        assert words in r.json()["detail"], (body, r.text)
    r = await http.post(f"/threads/{tid}/runs/crons",
                        json={"assistant_id": "agent", "schedule": "* * * * *", "on_run_completed": "keep"})
    assert r.status_code == 422 and "stateless" in r.json()["detail"]
    r = await http.post(f"/threads/{uuid.uuid4()}/runs/crons",
                        json={"assistant_id": "agent", "schedule": "* * * * *"})
    assert r.status_code == 404
    assert (await http.post("/runs/crons/count", json={})).json() == before

    cron = (await http.post("/runs/crons", json={"assistant_id": "agent", "schedule": "0 0 * * *"})).json()
    try:
        r = await http.patch(f"/runs/crons/{cron['cron_id']}", json={"schedule": "nope"})
        assert r.status_code == 422
        assert (await http.get(f"/runs/crons/{cron['cron_id']}")).json()["schedule"] == "0 0 * * *"
        r = await http.post("/runs/crons/search", json={"select": ["secret"]})
        assert r.status_code == 422
        assert (await http.get("/runs/crons/not-a-uuid")).status_code == 422
    finally:
        await http.delete(f"/runs/crons/{cron['cron_id']}")


# ---- webhooks ---------------------------------------------------------------------------


class Receiver:
    """A local webhook receiver: answers 500 to the first `fail_first` POSTs, then 200."""

    def __init__(self, fail_first: int = 0):
        import http.server
        import threading

        self.requests: list[tuple[dict, bytes]] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                failing = len(receiver.requests) <= receiver.fail_first
                self.send_response(500 if failing else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/run-done"

    def close(self):
        self.server.shutdown()

    async def wait_for(self, count: int, timeout: float = 20.0):
        deadline = asyncio.get_running_loop().time() + timeout
        while len(self.requests) < count:
            assert asyncio.get_running_loop().time() < deadline, f"got {len(self.requests)} webhook calls"
            await asyncio.sleep(0.05)


def verify(headers: dict, body: bytes) -> None:
    import hashlib
    import hmac
    import os

    secret = os.environ["LG_WEBHOOK_SECRET"].encode()
    fields = dict(part.split("=", 1) for part in headers["x-webhook-signature"].split(","))
    expected = hmac.new(secret, fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected), "bad signature"


async def test_a_finished_run_is_posted_signed_to_its_webhook_and_retried(client, new_thread):
    import json

    receiver = Receiver(fail_first=1)
    try:
        tid = await new_thread()
        run = await client.runs.create(tid, "agent", input=HI, webhook=receiver.url)
        await client.runs.join(tid, run["run_id"])
        # The first attempt gets a 500; the retry (after about a second) is accepted.
        await receiver.wait_for(2)
        for headers, body in receiver.requests:
            verify(headers, body)
            assert headers["content-type"] == "application/json"
        payload = json.loads(receiver.requests[-1][1])
        assert payload["run_id"] == run["run_id"]
        assert payload["thread_id"] == tid
        assert payload["status"] == "success"
        assert payload["values"]["messages"][-1]["type"] == "ai"
        assert payload["webhook_sent_at"]
        await asyncio.sleep(0.5)
        assert len(receiver.requests) == 2, "no more attempts after a 200"
        stored = await client.runs.get(tid, run["run_id"])
        assert stored["kwargs"]["webhook"] == receiver.url
    finally:
        receiver.close()


async def test_a_stateless_run_and_a_failed_run_report_too(client, new_thread):
    import json

    receiver = Receiver()
    try:
        await client.runs.wait(None, "agent", input=HI, webhook=receiver.url)
        tid = await new_thread()
        failed = await client.runs.create(tid, "err", input=HI, webhook=receiver.url)
        await client.runs.join(tid, failed["run_id"])
        await receiver.wait_for(2)
        statuses = sorted(json.loads(body)["status"] for _, body in receiver.requests)
        assert statuses == ["error", "success"]
    finally:
        receiver.close()


# ---- the thread stream ------------------------------------------------------------------


async def test_thread_join_stream_replays_runs_from_last_event_id(client, new_thread):
    tid = await new_thread()
    for _ in range(2):
        run = await client.runs.create(tid, "agent", input=HI, stream_resumable=True)
        await client.runs.join(tid, run["run_id"])

    async def read(last_event_id, runs):
        parts = []
        async def go():
            async for part in await client.threads.join_stream(tid, last_event_id=last_event_id):
                parts.append(part)
                if sum(1 for p in parts if isinstance(p.data, dict) and p.data.get("status") == "run_done") == runs:
                    return
        await asyncio.wait_for(go(), timeout=20)
        return parts

    everything = await read("-1", 2)
    done = [p for p in everything if isinstance(p.data, dict) and p.data.get("status") == "run_done"]
    assert len(done) == 2
    assert any(p.event == "values" for p in everything)
    rest = await read(done[0].id, 1)
    at = [p.id for p in everything].index(done[0].id)
    assert [(p.event, p.id) for p in rest] == [(p.event, p.id) for p in everything[at + 1:]]


# ---- fields that do what they say, or are refused ---------------------------------------


async def test_durability_sync_and_async_run_and_exit_is_refused(client, http, new_thread):
    tid = await new_thread()
    for durability in ("sync", "async"):
        run = await client.runs.create(tid, "agent", input=HI, durability=durability)
        await client.runs.join(tid, run["run_id"])
        assert (await client.runs.get(tid, run["run_id"]))["status"] == "success"
    before = len(await client.runs.list(tid))
    for extra, words in (({"durability": "exit"}, "durability"), ({"checkpoint_during": False}, "durability"),
                         ({"durability": "later"}, "durability"), ({"feedback_keys": ["score"]}, "LangSmith")):
        r = await http.post(f"/threads/{tid}/runs", json={"assistant_id": "agent", "input": HI, **extra})
        assert r.status_code == 422, (extra, r.text)
        assert words in r.json()["detail"]
    assert len(await client.runs.list(tid)) == before
    # Every step was checkpointed: the history has the run's steps, not just its end.
    history = await client.threads.get_history(tid, limit=50)
    assert len(history) > 2


async def test_events_stream_mode_is_refused(http, new_thread):
    tid = await new_thread()
    r = await http.post(f"/threads/{tid}/runs/stream",
                        json={"assistant_id": "agent", "input": HI, "stream_mode": "events"})
    assert r.status_code == 422
    assert "events" in r.json()["detail"]
