"""The compat suite's test graphs, written for the reference Python server.

`scripts/compat-reference.sh` serves these with `langgraph dev` (see
requirements.txt here) and runs tests/compat against it, to check that the
suite's expectations match the reference. The Rust server registers graphs with
the same ids and the same observable behaviour.
"""
import asyncio
from typing import Annotated

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

REPLY = "Hello there, I am a fake model."


class State(TypedDict):
    messages: Annotated[list, add_messages]


async def agent_node(state: State):
    # a fresh message object per call, so each reply gets its own id
    model = GenericFakeChatModel(messages=iter([AIMessage(content=REPLY)]))
    return {"messages": [await model.ainvoke(state["messages"])]}


def _agent_graph():
    g = StateGraph(State)
    g.add_node("agent", agent_node)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g


agent = _agent_graph().compile()


async def slow_node(state: State, config: RunnableConfig):
    secs = (config.get("configurable") or {}).get("sleep_secs", 3)
    await asyncio.sleep(float(secs))
    return {"messages": [AIMessage(content="slow done")]}


_slow = StateGraph(State)
_slow.add_node("slow", slow_node)
_slow.add_edge(START, "slow")
_slow.add_edge("slow", END)
slow = _slow.compile()


def fail_node(state: State):
    raise ValueError("kaboom")


_err = StateGraph(State)
_err.add_node("fail", fail_node)
_err.add_edge(START, "fail")
_err.add_edge("fail", END)
err = _err.compile()


def inner_node(state: State):
    return {"messages": [AIMessage(content="from child")]}


_child = StateGraph(State)
_child.add_node("inner", inner_node)
_child.add_edge(START, "inner")
_child.add_edge("inner", END)
child = _child.compile()

_parent = StateGraph(State)
_parent.add_node("child", child)
_parent.add_node("agent", agent_node)
_parent.add_edge(START, "child")
_parent.add_edge("child", "agent")
_parent.add_edge("agent", END)
parent = _parent.compile()
