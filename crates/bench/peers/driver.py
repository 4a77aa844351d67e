"""Peer driver for `homeagent bench` (issue 8, scenario 6).

Runs a list of inputs through one peer framework (the OpenAI Agents SDK or
LangGraph), pointed at `homeagent mock-llm` over its OpenAI chat-completions
wire, with the same tools HomeAgent's demo module registers:

- demo_sleep {ms, tag}: async, sleeps `ms` ms, returns the tag and how many
  demo_sleep calls were in flight when it started and when it ended;
- demo_echo {tag}: async and instant, returns the tag;
- demo_note {text}: async and instant (the peers have no notion of a serial
  tool; the bench does not send inputs that use it).

The mock counts the executed tools itself from the done-tags in the tool
results; this driver only times each input and reports what happened.

Input: one JSON object on stdin:
    {"framework": "openai-agents" | "langgraph",
     "base_url": "http://127.0.0.1:PORT/v1",
     "warmup": ["!batch1-warm-..."],
     "inputs": ["!slowbatch4-...", ...],
     "max_tool_concurrency": null | 1}
Output: one JSON object per line on stdout:
    {"ready": true, "framework": ..., "version": ..., "python": ...}
    {"text": ..., "elapsed_s": ..., "error": null | "...", "output": "...",
     "peak_in_flight": n}    (one per input, in order; warm-ups not printed)
    {"done": true}
Anything else goes to stderr.
"""

import asyncio
import json
import sys
import time
from importlib import metadata


class Gauge:
    """demo_sleep calls in flight, and the most seen since the last reset."""

    def __init__(self):
        self.now = 0
        self.peak = 0

    def enter(self):
        self.now += 1
        self.peak = max(self.peak, self.now)
        return self.now

    def leave(self):
        self.now -= 1


GAUGE = Gauge()


async def demo_sleep_impl(ms: int, tag: str) -> str:
    start = GAUGE.enter()
    try:
        await asyncio.sleep(ms / 1000.0)
        end = GAUGE.now
    finally:
        GAUGE.leave()
    return json.dumps(
        {"slept_ms": ms, "tag": tag, "in_flight_at_start": start, "in_flight_at_end": end}
    )


async def demo_echo_impl(tag: str) -> str:
    return json.dumps({"tag": tag})


async def demo_note_impl(text: str) -> str:
    return json.dumps({"noted": text})


SLEEP_DOC = "Sleeps for `ms` milliseconds and returns the tag."
ECHO_DOC = "Returns its arguments unchanged. Instant."
NOTE_DOC = "Appends a note."


def openai_agents_runner(spec):
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        RunConfig,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    # No trace export: there is no network and no key here, and exporting
    # would add work HomeAgent does not do.
    set_tracing_disabled(True)

    @function_tool(name_override="demo_sleep", description_override=SLEEP_DOC)
    async def demo_sleep(ms: int, tag: str) -> str:
        return await demo_sleep_impl(ms, tag)

    @function_tool(name_override="demo_echo", description_override=ECHO_DOC)
    async def demo_echo(tag: str) -> str:
        return await demo_echo_impl(tag)

    @function_tool(name_override="demo_note", description_override=NOTE_DOC)
    async def demo_note(text: str) -> str:
        return await demo_note_impl(text)

    client = AsyncOpenAI(base_url=spec["base_url"], api_key="unused", max_retries=0)
    model = OpenAIChatCompletionsModel(model="mock", openai_client=client)
    agent = Agent(
        name="bench",
        instructions="You are a benchmark agent.",
        model=model,
        tools=[demo_sleep, demo_echo, demo_note],
    )
    config = RunConfig(tracing_disabled=True)
    limit = spec.get("max_tool_concurrency")
    if limit is not None:
        from agents.run_config import ToolExecutionConfig

        config = RunConfig(
            tracing_disabled=True,
            tool_execution=ToolExecutionConfig(max_function_tool_concurrency=limit),
        )

    async def run(text):
        result = await Runner.run(agent, text, run_config=config, max_turns=4)
        return str(result.final_output)

    return run, metadata.version("openai-agents")


def langgraph_runner(spec):
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    if spec.get("max_tool_concurrency") is not None:
        raise SystemExit(
            "langgraph: ToolNode's async path gathers every call of a message at once "
            "and has no concurrency limit to set"
        )
    tools = [
        StructuredTool.from_function(coroutine=demo_sleep_impl, name="demo_sleep", description=SLEEP_DOC),
        StructuredTool.from_function(coroutine=demo_echo_impl, name="demo_echo", description=ECHO_DOC),
        StructuredTool.from_function(coroutine=demo_note_impl, name="demo_note", description=NOTE_DOC),
    ]
    llm = ChatOpenAI(
        model="mock", base_url=spec["base_url"], api_key="unused", max_retries=0
    ).bind_tools(tools)

    async def call_model(state: MessagesState):
        return {"messages": [await llm.ainvoke(state["messages"])]}

    # The canonical tool loop of the LangGraph docs: model node, ToolNode,
    # and tools_condition routing between them.
    graph = StateGraph(MessagesState)
    graph.add_node("agent", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile()

    async def run(text):
        state = await app.ainvoke(
            {"messages": [{"role": "user", "content": text}]}, {"recursion_limit": 8}
        )
        return str(state["messages"][-1].content)

    return run, metadata.version("langgraph")


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main():
    spec = json.loads(sys.stdin.read())
    framework = spec["framework"]
    if framework == "openai-agents":
        run, version = openai_agents_runner(spec)
    elif framework == "langgraph":
        run, version = langgraph_runner(spec)
    else:
        raise SystemExit(f"unknown framework {framework!r}")
    emit({"ready": True, "framework": framework, "version": version, "python": sys.version.split()[0]})
    for text in spec.get("warmup", []):
        try:
            await run(text)
        except Exception as error:  # a failed warm-up shows again in the measured inputs
            print(f"warm-up {text}: {error!r}", file=sys.stderr)
    for text in spec["inputs"]:
        GAUGE.peak = GAUGE.now
        started = time.perf_counter()
        error, output = None, ""
        try:
            output = await run(text)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        elapsed = time.perf_counter() - started
        emit({"text": text, "elapsed_s": elapsed, "error": error, "output": output, "peak_in_flight": GAUGE.peak})
    emit({"done": True})


if __name__ == "__main__":
    asyncio.run(main())
