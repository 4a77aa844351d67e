#!/usr/bin/env python3
"""Reads the mock LLM's wires with the providers' official Python SDKs.

Usage: check_mock_wire.py [-v] BASE_URL     (e.g. http://127.0.0.1:9099;
-v prints the traceback of an SDK error)

For each SDK (openai, anthropic, google-genai, ollama) and each mode
(streamed through the SDK's own accumulation, and not streamed) it sends
`!slowbatch4` and collects the tool calls the SDK reports (name and parsed
arguments), then sends `!text` and expects text without calls. It checks:
exactly 4 `demo_sleep` calls with `ms` = S, S+5, S+10, S+15 (S = the mock's
tool_sleep_ms from GET /stats, 150 by default) and tags
`done-<nonce>-0..3` sharing one nonce; the streamed and non-streamed calls
agree apart from the nonce. One line per SDK and mode; the exit status is
1 when anything disagrees, and each problem is named.
"""

from __future__ import annotations

import json
import re
import sys
import traceback
import urllib.request
from typing import Any, Callable

MODEL = "mock-llm"
TOOL = "demo_sleep"
TOOL_DESCRIPTION = "Sleeps for ms milliseconds and returns its tag."
TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "ms": {"type": "integer", "description": "How long to sleep."},
        "tag": {"type": "string", "description": "Returned as is."},
    },
    "required": ["ms", "tag"],
}
BATCH = "!slowbatch4"
TEXT = "!text"
TIMEOUT_S = 30.0

Call = tuple[str, dict[str, Any]]


class WireError(Exception):
    """What the SDK reported cannot be read as the calls the mock sent."""


def json_arguments(index: int, name: str, raw: str) -> dict[str, Any]:
    """A call's argument text (as the SDK joined it) as a JSON object."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise WireError(
            f"call {index} ({name}): the arguments the SDK joined are not JSON ({err}): {raw!r}"
        ) from None
    if not isinstance(value, dict):
        raise WireError(f"call {index} ({name}): the arguments are not a JSON object: {raw!r}")
    return value


class Outcome:
    """What one request produced, as the SDK reported it: the calls, the
    text, the finish reason in the SDK's own terms, and the call ids where
    the wire has them (None where it has none: Gemini)."""

    def __init__(
        self, calls: list[Call], text: str, finish: str | None, ids: list[str] | None
    ) -> None:
        self.calls = calls
        self.text = text
        self.finish = finish
        self.ids = ids


class Sdk:
    """One SDK's modes, and the finish reasons it must report."""

    def __init__(
        self, modes: dict[str, Callable[[str], Outcome]], finish_calls: str, finish_text: str
    ) -> None:
        self.modes = modes
        self.finish_calls = finish_calls
        self.finish_text = finish_text


# ---------------------------------------------------------------- openai


def openai_sdk(base: str) -> Sdk:
    import openai

    client = openai.OpenAI(base_url=f"{base}/v1", api_key="mock", timeout=TIMEOUT_S, max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {"name": TOOL, "description": TOOL_DESCRIPTION, "parameters": TOOL_SCHEMA},
        }
    ]

    def choice_outcome(choice: Any) -> Outcome:
        message = choice.message
        tool_calls = message.tool_calls or []
        calls = [
            (c.function.name, json_arguments(i, c.function.name, c.function.arguments))
            for i, c in enumerate(tool_calls)
        ]
        return Outcome(calls, message.content or "", choice.finish_reason, [c.id for c in tool_calls])

    def streamed(prompt: str) -> Outcome:
        # The SDK's own accumulation: it merges the delta fragments by index.
        with client.chat.completions.stream(
            model=MODEL, messages=[{"role": "user", "content": prompt}], tools=tools
        ) as stream:
            completion = stream.get_final_completion()
        return choice_outcome(completion.choices[0])

    def streamed_raw(prompt: str) -> Outcome:
        # `create(stream=True)`, accumulated by `index` as the API docs show.
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
        )
        by_index: dict[int, dict[str, str]] = {}
        text = ""
        finish = None
        for chunk in stream:
            if not chunk.choices:
                continue
            finish = chunk.choices[0].finish_reason or finish
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for frag in delta.tool_calls or []:
                acc = by_index.setdefault(frag.index, {"id": "", "name": "", "arguments": ""})
                if frag.id:
                    acc["id"] += frag.id
                if frag.function and frag.function.name:
                    acc["name"] += frag.function.name
                if frag.function and frag.function.arguments:
                    acc["arguments"] += frag.function.arguments
        ordered = [c for _, c in sorted(by_index.items())]
        calls = [
            (c["name"], json_arguments(i, c["name"], c["arguments"])) for i, c in enumerate(ordered)
        ]
        return Outcome(calls, text, finish, [c["id"] for c in ordered])

    def whole(prompt: str) -> Outcome:
        completion = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], tools=tools
        )
        return choice_outcome(completion.choices[0])

    modes = {"stream": streamed, "stream-raw": streamed_raw, "whole": whole}
    return Sdk(modes, finish_calls="tool_calls", finish_text="stop")


# ------------------------------------------------------------- anthropic


def anthropic_sdk(base: str) -> Sdk:
    import anthropic

    client = anthropic.Anthropic(base_url=base, api_key="mock", timeout=TIMEOUT_S, max_retries=0)
    tools = [{"name": TOOL, "description": TOOL_DESCRIPTION, "input_schema": TOOL_SCHEMA}]

    def message_outcome(message: Any) -> Outcome:
        uses = [b for b in message.content if b.type == "tool_use"]
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [(b.name, dict(b.input)) for b in uses]
        return Outcome(calls, text, message.stop_reason, [b.id for b in uses])

    def streamed(prompt: str) -> Outcome:
        with client.messages.stream(
            model=MODEL,
            max_tokens=1024,
            messages=[{"role": "user", "content": prompt}],
            tools=tools,
        ) as stream:
            message = stream.get_final_message()
        return message_outcome(message)

    def whole(prompt: str) -> Outcome:
        message = client.messages.create(
            model=MODEL,
            max_tokens=1024,
            messages=[{"role": "user", "content": prompt}],
            tools=tools,
        )
        return message_outcome(message)

    return Sdk({"stream": streamed, "whole": whole}, finish_calls="tool_use", finish_text="end_turn")


# ---------------------------------------------------------- google-genai


def gemini_sdk(base: str) -> Sdk:
    from google import genai
    from google.genai import types

    # The mock serves Gemini's `v1beta` paths (as HomeAgent's codec calls
    # them); google-genai 3.x defaults to `v1`, so the version is named.
    client = genai.Client(
        vertexai=False,
        api_key="mock",
        http_options=types.HttpOptions(
            base_url=base, api_version="v1beta", timeout=int(TIMEOUT_S * 1000)
        ),
    )
    config = types.GenerateContentConfig(
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name=TOOL, description=TOOL_DESCRIPTION, parameters_json_schema=TOOL_SCHEMA
                    )
                ]
            )
        ],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )

    def calls_of(response: Any) -> list[Call]:
        return [(c.name, dict(c.args or {})) for c in (response.function_calls or [])]

    def text_of(response: Any) -> str:
        parts = response.candidates[0].content.parts or [] if response.candidates else []
        return "".join(p.text or "" for p in parts if not p.function_call)

    def finish_of(response: Any) -> str | None:
        reason = response.candidates[0].finish_reason if response.candidates else None
        return getattr(reason, "value", reason)

    def streamed(prompt: str) -> Outcome:
        # The SDK yields one response per chunk; calls arrive whole in them.
        calls: list[Call] = []
        text = ""
        finish = None
        for chunk in client.models.generate_content_stream(
            model=MODEL, contents=prompt, config=config
        ):
            calls += calls_of(chunk)
            text += text_of(chunk)
            finish = finish_of(chunk) or finish
        return Outcome(calls, text, finish, None)

    def whole(prompt: str) -> Outcome:
        response = client.models.generate_content(model=MODEL, contents=prompt, config=config)
        return Outcome(calls_of(response), text_of(response), finish_of(response), None)

    return Sdk({"stream": streamed, "whole": whole}, finish_calls="STOP", finish_text="STOP")


# ---------------------------------------------------------------- ollama


def ollama_sdk(base: str) -> Sdk:
    import ollama

    client = ollama.Client(host=base, timeout=TIMEOUT_S)
    tools = [
        {
            "type": "function",
            "function": {"name": TOOL, "description": TOOL_DESCRIPTION, "parameters": TOOL_SCHEMA},
        }
    ]

    def calls_of(message: Any) -> list[Call]:
        return [(c.function.name, dict(c.function.arguments)) for c in (message.tool_calls or [])]

    def streamed(prompt: str) -> Outcome:
        # As the ollama-python examples do: collect tool_calls from every chunk.
        calls: list[Call] = []
        text = ""
        finish = None
        for chunk in client.chat(
            model=MODEL, messages=[{"role": "user", "content": prompt}], tools=tools, stream=True
        ):
            calls += calls_of(chunk.message)
            text += chunk.message.content or ""
            if chunk.done:
                finish = chunk.done_reason
        return Outcome(calls, text, finish, None)

    def whole(prompt: str) -> Outcome:
        response = client.chat(
            model=MODEL, messages=[{"role": "user", "content": prompt}], tools=tools, stream=False
        )
        message = response.message
        return Outcome(calls_of(message), message.content or "", response.done_reason, None)

    # Ollama ends a turn of tool calls with done_reason "stop".
    return Sdk({"stream": streamed, "whole": whole}, finish_calls="stop", finish_text="stop")


# ---------------------------------------------------------------- checks

TAG = re.compile(r"^done-(?P<nonce>[^-\s]+(?:-[^-\s]+)*)-(?P<i>\d+)$")


def batch_problems(calls: list[Call], sleep_ms: int) -> tuple[list[str], str | None]:
    """Problems with a `!slowbatch4` outcome, and the batch's nonce."""
    problems = []
    if len(calls) != 4:
        problems.append(f"expected exactly 4 calls, got {len(calls)}: {calls}")
    nonces = set()
    for i, (name, args) in enumerate(calls):
        if name != TOOL:
            problems.append(f"call {i}: name {name!r}, expected {TOOL!r}")
        want_ms = sleep_ms + 5 * i
        if args.get("ms") != want_ms:
            problems.append(f"call {i}: ms={args.get('ms')!r}, expected {want_ms}")
        if set(args) != {"ms", "tag"}:
            problems.append(f"call {i}: argument keys {sorted(args)}, expected ['ms', 'tag']")
        tag = args.get("tag")
        match = TAG.match(tag) if isinstance(tag, str) else None
        if not match:
            problems.append(f"call {i}: tag {tag!r} is not done-<nonce>-<i>")
            continue
        if int(match["i"]) != i:
            problems.append(f"call {i}: tag {tag!r} ends in {match['i']}, expected {i}")
        nonces.add(match["nonce"])
    if len(nonces) > 1:
        problems.append(f"the calls' tags carry different nonces: {sorted(nonces)}")
    return problems, (nonces.pop() if len(nonces) == 1 else None)


def normalized(calls: list[Call], nonce: str | None) -> list[Call]:
    """The calls with the batch's nonce replaced, to compare across modes."""
    out = []
    for name, args in calls:
        args = dict(args)
        if nonce and isinstance(args.get("tag"), str):
            args["tag"] = args["tag"].replace(f"-{nonce}-", "-<nonce>-")
        out.append((name, args))
    return out


def sleep_ms_of(base: str) -> int:
    with urllib.request.urlopen(f"{base}/stats", timeout=10) as response:
        stats = json.load(response)
    value = (stats.get("config") or {}).get("tool_sleep_ms")
    return int(value) if value is not None else 150


def main(argv: list[str]) -> int:
    verbose = "-v" in argv[1:]
    args = [a for a in argv[1:] if a != "-v"]
    if len(args) != 1:
        print("usage: check_mock_wire.py [-v] BASE_URL", file=sys.stderr)
        return 2
    base = args[0].rstrip("/")
    sleep_ms = sleep_ms_of(base)
    sdks = {
        "openai": openai_sdk,
        "anthropic": anthropic_sdk,
        "google-genai": gemini_sdk,
        "ollama": ollama_sdk,
    }
    failures: list[str] = []
    checks = 0
    failed_checks: set[str] = set()
    for sdk_name, make in sdks.items():
        try:
            sdk = make(base)
        except Exception as err:  # noqa: BLE001 - report and go on
            checks += 1
            failed_checks.add(sdk_name)
            failures.append(f"{sdk_name}: cannot set up the client: {err!r}")
            print(f"FAIL {sdk_name}: cannot set up the client: {err!r}")
            continue
        seen: dict[str, list[Call]] = {}
        for mode, run in sdk.modes.items():
            label = f"{sdk_name:<12} {mode:<10}"
            problems: list[str] = []
            summary = ""
            try:
                batch = run(BATCH)
                batch_bad, nonce = batch_problems(batch.calls, sleep_ms)
                problems += [f"{BATCH}: {p}" for p in batch_bad]
                if batch.finish != sdk.finish_calls:
                    problems.append(
                        f"{BATCH}: finish reason {batch.finish!r}, expected {sdk.finish_calls!r}"
                    )
                if batch.ids is not None and (
                    not all(batch.ids) or len(set(batch.ids)) != len(batch.ids)
                ):
                    problems.append(f"{BATCH}: call ids are not distinct and non-empty: {batch.ids}")
                seen[mode] = normalized(batch.calls, nonce)
                text = run(TEXT)
                if text.calls:
                    problems.append(f"{TEXT}: expected no calls, got {text.calls}")
                if not text.text.strip():
                    problems.append(f"{TEXT}: expected text, got none")
                if text.finish != sdk.finish_text:
                    problems.append(
                        f"{TEXT}: finish reason {text.finish!r}, expected {sdk.finish_text!r}"
                    )
                summary = (
                    f"{len(batch.calls)} calls "
                    + ",".join(str(a.get("ms")) for _, a in batch.calls)
                    + f" nonce={nonce} finish={batch.finish}; "
                    + f"!text -> {len(text.text)} chars finish={text.finish}"
                )
            except WireError as err:
                problems.append(str(err))
            except Exception as err:  # noqa: BLE001 - the SDK rejected the wire
                problems.append(f"the SDK raised {type(err).__name__}: {err}")
                if verbose:
                    traceback.print_exc()
            checks += 1
            if problems:
                failed_checks.add(f"{sdk_name} {mode}")
                for p in problems:
                    failures.append(f"{sdk_name} {mode}: {p}")
                    print(f"FAIL {label} {p}")
            else:
                print(f"ok   {label} {summary}")
        modes_seen = list(seen)
        for other in modes_seen[1:]:
            if seen[other] != seen[modes_seen[0]]:
                msg = (
                    f"{sdk_name}: {modes_seen[0]} and {other} disagree: "
                    f"{seen[modes_seen[0]]} vs {seen[other]}"
                )
                failures.append(msg)
                failed_checks.add(f"{sdk_name} {other}")
                print(f"FAIL {msg}")
    print(f"sdk-check: {checks - len(failed_checks)} passed, {len(failed_checks)} failed")
    if failures:
        print("\nThe mock's wire disagrees with an official SDK:", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
