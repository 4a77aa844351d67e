"""`homeagent serve` read by the official OpenAI Python client, unchanged.

Usage: check_openai_client.py BASE_URL API_KEY

BASE_URL is the server's root (http://127.0.0.1:PORT). The agent behind it
answers with a model that follows the mock LLM's script, so `!slowbatch4`
makes it run four demo_sleep calls in one parallel batch and the final
message states `executed=4` (counted by the script from the tool results,
independently of the server).
"""

import sys

import openai

MODEL = "homeagent"


def main() -> int:
    base, key = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
    failures = []

    def check(name, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""))
        if not ok:
            failures.append(name)

    models = [m.id for m in client.models.list()]
    check("models.list names homeagent", models == [MODEL], repr(models))
    model = client.models.retrieve(MODEL)
    check("models.retrieve finds homeagent", model.id == MODEL and model.object == "model", repr(model))
    try:
        client.models.retrieve("gpt-4o")
        check("models.retrieve of another model is NotFound", False, "no error")
    except openai.NotFoundError as e:
        code = (e.body or {}).get("code") if isinstance(e.body, dict) else None
        check("models.retrieve of another model is NotFound", code == "model_not_found", repr(e.body))

    # Non-streaming, with fields clients commonly send.
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "!slowbatch4"}],
        temperature=0.2,
        user="interop",
    )
    session = raw.headers.get("x-session-id")
    completion = raw.parse()
    content = completion.choices[0].message.content or ""
    check("non-streaming !slowbatch4 states executed=4", "executed=4" in content, content)
    check("non-streaming finish_reason is stop", completion.choices[0].finish_reason == "stop")
    check("non-streaming usage adds up",
          completion.usage is not None
          and completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens,
          repr(completion.usage))
    check("the session id comes back", bool(session))

    # Streaming with usage.
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "!slowbatch4"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage, chunks = "", None, None, 0
    for chunk in stream:
        chunks += 1
        if chunk.choices:
            delta = chunk.choices[0].delta
            text += delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    check("streaming !slowbatch4 states executed=4", "executed=4" in text, text)
    check("streaming ends with finish_reason stop", finish == "stop", repr(finish))
    check("streaming usage arrives last", usage is not None and usage.total_tokens > 0, repr(usage))
    check("streaming sent several chunks", chunks >= 3, str(chunks))

    # Continuing the first session through X-Session-Id.
    follow = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "!batch2"}],
        extra_headers={"X-Session-Id": session},
    )
    check("X-Session-Id continues a session",
          "executed=2" in (follow.choices[0].message.content or ""),
          follow.choices[0].message.content)

    # A stateless conversation, sent back whole with each request the way
    # chat front ends do (streamed here, as they stream), goes on in the
    # session its last answer came from.
    def stream_text(messages):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, stream=True)
        text = "".join(chunk.choices[0].delta.content or ""
                       for chunk in raw.parse() if chunk.choices)
        return raw.headers.get("x-session-id"), text

    conversation = [{"role": "user", "content": "!batch2"}]
    first_session, answer = stream_text(conversation)
    conversation += [{"role": "assistant", "content": answer}, {"role": "user", "content": "!batch3"}]
    next_session, answer = stream_text(conversation)
    check("a stateless conversation continues its session",
          bool(first_session) and next_session == first_session and "executed=3" in answer,
          f"{first_session} then {next_session}: {answer}")

    # Refusals surface as the client's own exception types.
    try:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}],
        )
        check("client tools are refused", False, "no error")
    except openai.BadRequestError as error:
        check("client tools are refused with 400 tools_not_supported",
              error.status_code == 400 and error.code == "tools_not_supported", repr(error))
    bad = openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        check("a wrong key is refused", False, "no error")
    except openai.AuthenticationError as error:
        check("a wrong key is refused with 401", error.status_code == 401, repr(error))

    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
        return 1
    print("all OpenAI client checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
