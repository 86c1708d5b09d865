"""Two owners through the official SDK: each client's `api_key` names its owner, and one
owner's threads, runs, assistants, crons and store items are invisible to the other.

Runs only when the harness gives a second key (`LG_API_KEY_B`); the first (`LG_API_KEY`) is
the owner every other test in the suite acts as.
"""

from __future__ import annotations

import os

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from conftest import HTTP_TIMEOUT, LG_API_KEY, LG_URL

LG_API_KEY_B = os.environ.get("LG_API_KEY_B") or None

pytestmark = pytest.mark.skipif(
    not (LG_API_KEY and LG_API_KEY_B), reason="needs two owners' keys"
)

INPUT = {"messages": [{"role": "user", "content": "hello"}]}


async def test_one_owner_cannot_see_or_touch_anothers_work(client):
    other = get_client(url=LG_URL, api_key=LG_API_KEY_B, timeout=HTTP_TIMEOUT)
    try:
        mine = await client.assistants.create("agent", name="mine")
        thread = await client.threads.create(metadata={"secret": "plans"})
        tid = thread["thread_id"]
        await client.runs.wait(tid, mine["assistant_id"], input=INPUT)
        [run] = await client.runs.list(tid)
        cron = await client.crons.create_for_thread(
            tid, mine["assistant_id"], schedule="0 0 1 1 *", input=INPUT
        )
        await client.store.put_item(["notes"], "k", {"text": "mine"})

        for call in (
            lambda: other.threads.get(tid),
            lambda: other.threads.get_state(tid),
            lambda: other.threads.get_history(tid),
            lambda: other.threads.update(tid, metadata={"secret": "stolen"}),
            lambda: other.threads.delete(tid),
            lambda: other.threads.copy(tid),
            lambda: other.runs.get(tid, run["run_id"]),
            lambda: other.runs.list(tid),
            lambda: other.runs.create(tid, "agent", input=INPUT),
            lambda: other.runs.cancel(tid, run["run_id"]),
            lambda: other.assistants.get(mine["assistant_id"]),
            lambda: other.assistants.update(mine["assistant_id"], name="theirs"),
            lambda: other.assistants.delete(mine["assistant_id"]),
            lambda: other.crons.delete(cron["cron_id"]),
        ):
            with pytest.raises(NotFoundError):
                await call()

        assert await other.store.get_item(["notes"], "k") is None
        assert (await other.store.search_items(["notes"]))["items"] == []
        theirs = await other.threads.search(limit=100)
        assert tid not in {t["thread_id"] for t in theirs}
        assistants = await other.assistants.search(limit=100)
        assert mine["assistant_id"] not in {a["assistant_id"] for a in assistants}
        assert cron["cron_id"] not in {c["cron_id"] for c in await other.crons.search()}

        # Untouched for its owner.
        kept = await client.threads.get(tid)
        assert kept["metadata"]["secret"] == "plans"
        assert (await client.assistants.get(mine["assistant_id"]))["name"] == "mine"
        assert (await client.store.get_item(["notes"], "k"))["value"] == {"text": "mine"}
    finally:
        await other.aclose()
        await client.threads.delete(tid)
        await client.assistants.delete(mine["assistant_id"])
        await client.store.delete_item(["notes"], "k")
