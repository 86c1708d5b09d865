"""Fixtures for the LangGraph wire-compatibility suite.

The suite drives a *running* server through the official Python `langgraph-sdk`.
Point it at the server with `LG_URL` (e.g. `LG_URL=http://127.0.0.1:2024`); an
optional `LG_API_KEY` is sent as `x-api-key`. Without `LG_URL` every test is
skipped (the Rust harness in tests/ starts the server and sets it).

The server must register the deterministic test graphs `agent`, `slow`, `err`
and `parent` (see the module docstring of test_sdk.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import httpx
import pytest
import pytest_asyncio
from langgraph_sdk import get_client, get_sync_client

LG_URL = (os.environ.get("LG_URL") or "").rstrip("/")
LG_API_KEY = os.environ.get("LG_API_KEY") or None

# Generous but bounded: a test that waits longer than this is broken anyway.
HTTP_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
READY_TIMEOUT_S = float(os.environ.get("LG_READY_TIMEOUT", "60"))


def _headers() -> dict[str, str]:
    return {"x-api-key": LG_API_KEY} if LG_API_KEY else {}


def pytest_collection_modifyitems(config, items):
    if LG_URL:
        return
    skip = pytest.mark.skip(reason="LG_URL is not set: no server to test against")
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def server_ready():
    """Wait (bounded) until GET /ok answers, so a just-started server is fine."""
    if not LG_URL:
        return
    deadline = time.monotonic() + READY_TIMEOUT_S
    last_err: object = None
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{LG_URL}/ok", timeout=2.0, headers=_headers())
            if r.status_code == 200:
                return
            last_err = f"status {r.status_code}: {r.text[:200]}"
        except httpx.HTTPError as e:  # not listening yet
            last_err = e
        time.sleep(0.2)
    pytest.fail(f"server at {LG_URL} not ready after {READY_TIMEOUT_S}s: {last_err}")


@pytest_asyncio.fixture
async def client():
    """The async SDK client (`get_client`)."""
    c = get_client(url=LG_URL, api_key=LG_API_KEY, timeout=HTTP_TIMEOUT)
    try:
        yield c
    finally:
        await c.aclose()


@pytest.fixture
def sync_client():
    """The sync SDK client (`get_sync_client`)."""
    c = get_sync_client(url=LG_URL, api_key=LG_API_KEY, timeout=HTTP_TIMEOUT)
    try:
        yield c
    finally:
        c.close()


@pytest_asyncio.fixture
async def http():
    """A raw httpx client for status codes, headers and bytes."""
    async with httpx.AsyncClient(
        base_url=LG_URL, timeout=HTTP_TIMEOUT, headers=_headers()
    ) as c:
        yield c


@pytest_asyncio.fixture
async def new_thread(client):
    """Factory: `tid = await new_thread(metadata=...)`.

    Every thread made through it is cleaned up afterwards: runs still pending or
    running are cancelled (so a failed test cannot leave a `slow` run holding a
    worker), then the thread is deleted. Cleanup errors are ignored.
    """
    created: list[str] = []

    async def make(**kwargs) -> str:
        thread = await client.threads.create(**kwargs)
        created.append(thread["thread_id"])
        return thread["thread_id"]

    yield make

    async def cleanup(tid: str) -> None:
        with contextlib.suppress(Exception):
            for run in await client.runs.list(tid, limit=100):
                if run["status"] in ("pending", "running"):
                    with contextlib.suppress(Exception):
                        await client.runs.cancel(tid, run["run_id"])
        with contextlib.suppress(Exception):
            await client.threads.delete(tid)

    for tid in created:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(cleanup(tid), timeout=15)
