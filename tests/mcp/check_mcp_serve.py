"""Drives an MCP server over stdio with the official Python MCP client and
checks it against an expectation file. Used for HomeAgent's own MCP face
(`homeagent mcp-serve`, and crates/mcp/tests/serve.rs).

Usage: check_mcp_serve.py EXPECT.json [--env KEY=VALUE ...] -- COMMAND [ARG ...]

EXPECT.json:
  {"tools": {"<name>": {"readOnlyHint": true|false}, ...},   # each must be listed,
                                                             # with this annotation
   "absent": ["<name>", ...],                                # must not be listed
   "calls": [{"tool": "<name>", "arguments": {...},
              "is_error": false,
              "structured": {...},         # optional: exact structuredContent
              "text_contains": "..."}]}    # optional: in the text content

Prints one line per check and `N passed, M failed`; exits 1 on any failure.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def field(obj, snake: str, camel: str):
    """A model field by its v2 (snake_case) or v1 (camelCase) name."""
    if obj is None:
        return None
    return getattr(obj, snake, getattr(obj, camel, None))


def parse_args(argv: list[str]):
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    own, command = argv[:split], argv[split + 1 :]
    if not own or not command:
        sys.exit(__doc__)
    expect_file = own[0]
    env = {}
    rest = own[1:]
    while rest:
        if rest[0] == "--env" and len(rest) > 1 and "=" in rest[1]:
            key, value = rest[1].split("=", 1)
            env[key] = value
            rest = rest[2:]
        else:
            sys.exit(f"unexpected argument {rest[0]!r}\n{__doc__}")
    with open(expect_file) as f:
        expect = json.load(f)
    return expect, env, command


async def check(expect: dict, env: dict, command: list[str]) -> int:
    passed, failed = 0, 0

    def verdict(ok: bool, what: str) -> None:
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok: {what}")
        else:
            failed += 1
            print(f"FAILED: {what}")

    params = StdioServerParameters(command=command[0], args=command[1:], env=env or None)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            by_name = {tool.name: tool for tool in listed.tools}
            for name, annotations in expect.get("tools", {}).items():
                tool = by_name.get(name)
                if tool is None:
                    verdict(False, f"tool {name} listed (got {sorted(by_name)})")
                    continue
                got = field(tool.annotations, "read_only_hint", "readOnlyHint")
                want = annotations.get("readOnlyHint")
                verdict(got == want, f"tool {name} readOnlyHint is {want} (got {got})")
            for name in expect.get("absent", []):
                verdict(name not in by_name, f"tool {name} not listed")
            for call in expect.get("calls", []):
                result = await session.call_tool(call["tool"], call.get("arguments", {}))
                text = "\n".join(getattr(block, "text", "") for block in result.content)
                label = f"call {call['tool']} {json.dumps(call.get('arguments', {}))}"
                want_error = call.get("is_error", False)
                is_error = bool(field(result, "is_error", "isError"))
                verdict(
                    is_error == want_error,
                    f"{label}: isError is {want_error} (got {is_error}; text {text!r})",
                )
                if "structured" in call:
                    structured = field(result, "structured_content", "structuredContent")
                    verdict(
                        structured == call["structured"],
                        f"{label}: structuredContent is {call['structured']} (got {structured})",
                    )
                if "text_contains" in call:
                    verdict(
                        call["text_contains"] in text,
                        f"{label}: text contains {call['text_contains']!r} (got {text!r})",
                    )
    print(f"mcp-serve check: {passed} passed, {failed} failed")
    return 1 if failed else 0


def main() -> None:
    expect, env, command = parse_args(sys.argv[1:])
    sys.exit(asyncio.run(check(expect, env, command)))


if __name__ == "__main__":
    main()
