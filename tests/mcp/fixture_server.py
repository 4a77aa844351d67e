"""A real MCP server, written with the official Python MCP SDK, that the
Rust interop tests (crates/mcp/tests/) start over stdio or Streamable HTTP.

Its tools make the client's behaviour observable from the server side:
`stats` reports how many calls of each tool reached the server, the peak
number of calls in flight at once, and how many calls were cancelled by a
`notifications/cancelled` from the client. Those counts are kept by this
process, independently of the code under test.

Usage: fixture_server.py            (stdio)
       fixture_server.py --http     (Streamable HTTP on 127.0.0.1, a free
                                      port, printed as `PORT <n>` on stdout)
       fixture_server.py --http --port N
                                    (the same on port N: a restarted server
                                      comes back where the client expects it)
"""

import asyncio
import os
import socket
import sys

from typing import TypedDict

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

server = MCPServer("homeagent-fixture")

# A server that does not implement `ping` (it answers Method not found):
# alive all the same.
if os.environ.get("FIXTURE_REFUSE_PING"):
    del server._lowlevel_server._request_handlers["ping"]

calls: dict[str, int] = {}
in_flight = 0
peak_in_flight = 0
cancelled = 0


class EchoResult(TypedDict):
    echo: str
    length: int


class Stats(TypedDict):
    calls: dict[str, int]
    peak_in_flight: int
    cancelled: int


def count(tool: str) -> None:
    calls[tool] = calls.get(tool, 0) + 1


async def timed(tool: str, ms: int) -> str:
    """Sleeps while counted as in flight, so overlap is measurable."""
    global in_flight, peak_in_flight, cancelled
    count(tool)
    in_flight += 1
    peak_in_flight = max(peak_in_flight, in_flight)
    try:
        await asyncio.sleep(ms / 1000)
    except asyncio.CancelledError:
        cancelled += 1
        raise
    finally:
        in_flight -= 1
    return f"{tool} slept {ms} ms"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> EchoResult:
    """Returns the text as structured content."""
    count("echo")
    return EchoResult(echo=text, length=len(text))


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def read_slow(ms: int) -> str:
    """A read-only tool that takes `ms` milliseconds."""
    return await timed("read_slow", ms)


@server.tool()
async def write_slow(ms: int) -> str:
    """A tool without annotations that takes `ms` milliseconds."""
    return await timed("write_slow", ms)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def fail(message: str) -> str:
    """Always fails with `message` (an isError result)."""
    count("fail")
    raise ToolError(message)


@server.tool()
async def hang(ms: int) -> str:
    """Sleeps `ms` milliseconds unless cancelled first."""
    return await timed("hang", ms)


@server.tool()
async def progress_sleep(ms: int, every_ms: int, ctx: Context) -> str:
    """Sleeps `ms` milliseconds, reporting progress every `every_ms`."""
    global cancelled
    count("progress_sleep")
    done = 0
    try:
        while done < ms:
            step = min(every_ms, ms - done)
            await asyncio.sleep(step / 1000)
            done += step
            await ctx.report_progress(done, ms)
    except asyncio.CancelledError:
        cancelled += 1
        raise
    return f"slept {ms} ms"


@server.tool()
def pid() -> int:
    """The server's process id."""
    count("pid")
    return os.getpid()


@server.tool()
def stderr_write(hex_bytes: str, repeat: int) -> str:
    """Writes the bytes `hex_bytes` to stderr `repeat` times; says whether it could."""
    count("stderr_write")
    data = bytes.fromhex(hex_bytes)
    try:
        for _ in range(repeat):
            os.write(2, data)
    except OSError as e:
        return f"stderr write failed: {e!r}"
    return "written"


@server.tool()
def env_names() -> list[str]:
    """The names of the environment variables this server process got."""
    count("env_names")
    return sorted(os.environ.keys())


@server.tool()
def summary() -> CallToolResult:
    """Structured content with its own, different text for people."""
    count("summary")
    return CallToolResult(
        content=[TextContent(type="text", text="3 items, all green")],
        structured_content={"items": 3, "status": "green"},
    )


@server.tool()
def bad_output() -> CallToolResult:
    """Structured content that breaks the outputSchema it declares."""
    count("bad_output")
    return CallToolResult(
        content=[TextContent(type="text", text="n is one")],
        structured_content={"n": "one"},
    )


# Declared by hand, so the SDK advertises the schema without enforcing it:
# the point is a server whose answer breaks its own outputSchema.
server._tool_manager.get_tool("bad_output").fn_metadata.output_schema = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
}


@server.tool()
def stats() -> Stats:
    """What reached this server so far."""
    return Stats(calls=dict(calls), peak_in_flight=peak_in_flight, cancelled=cancelled)


# How many of the next tools/list requests fail (add_tool's `fail_lists`).
failing_lists = 0
_list_tools = server.list_tools


async def list_tools_or_fail():
    """tools/list, failing while `failing_lists` says so."""
    global failing_lists
    if failing_lists > 0:
        failing_lists -= 1
        raise RuntimeError("tools/list failed on purpose (add_tool fail_lists)")
    tools = await _list_tools()
    if os.environ.get("FIXTURE_BAD_TOOL"):
        # A tool whose inputSchema is `true`, not an object: built without
        # validation, as a server written carelessly sends it.
        from mcp.types import Tool

        tools = [*tools, Tool.model_construct(name="malformed", input_schema=True)]
    return tools


if os.environ.get("FIXTURE_BAD_TOOL"):
    # The SDK checks its own answers against the spec before sending them;
    # this fixture stands for a server that does not (tools/list only).
    from mcp.server import runner as _runner

    _checked = _runner._methods.serialize_server_result

    def _unchecked_tool_list(method, version, dumped):
        if method == "tools/list":
            return dumped
        return _checked(method, version, dumped)

    _runner._methods.serialize_server_result = _unchecked_tool_list


# The SDK's tools/list handler calls `server.list_tools()` on each request.
server.list_tools = list_tools_or_fail


@server.tool()
async def add_tool(ctx: Context, fail_lists: int = 0) -> str:
    """Registers the tool `late` and tells the client the list changed; the
    next `fail_lists` tools/list requests fail."""
    global failing_lists
    count("add_tool")
    failing_lists = fail_lists

    def late() -> str:
        """A tool that exists only after add_tool ran."""
        count("late")
        return "late tool ran"

    server.add_tool(late, name="late")
    await ctx.session.send_tool_list_changed()
    return "added late"


def main() -> None:
    if "--http" in sys.argv:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 0
        sock.bind(("127.0.0.1", port))
        # Listening before the port is printed: a client that connects at
        # once waits in the backlog instead of being refused.
        sock.listen(128)
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        app = server.streamable_http_app()
        config = uvicorn.Config(app, log_level="warning")
        asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
    else:
        server.run("stdio")
        # Reached only when the client closed stdin (a graceful shutdown);
        # a kill or SIGTERM ends the process before this line.
        marker = os.environ.get("FIXTURE_EXIT_MARKER")
        # A server that takes a while to save its state on the way out, and
        # saves what it has when told to stop (SIGTERM) meanwhile.
        delay_ms = int(os.environ.get("FIXTURE_EXIT_DELAY_MS", "0"))
        if marker and delay_ms:
            import signal
            import time

            def on_sigterm(_signum, _frame):
                with open(marker, "w", encoding="utf-8") as f:
                    f.write("SIGTERM")
                os._exit(0)

            signal.signal(signal.SIGTERM, on_sigterm)
            time.sleep(delay_ms / 1000)
        if marker:
            with open(marker, "w", encoding="utf-8") as f:
                f.write("stdin closed")


if __name__ == "__main__":
    main()
