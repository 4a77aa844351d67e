-- Anthropic Messages, written as a Lua adapter.
--
-- Requests: the OpenAI-shaped body becomes a Messages body (system split
-- out, tool calls as tool_use blocks, tool results as tool_result blocks
-- with is_error). Stream: each SSE event's data carries its `type`; the
-- content block index is the stream_index.

local M = { endpoint = "/v1/messages" }

-- Text that may be a text block: Anthropic refuses one without
-- non-whitespace text, and models often write "\n\n" before their calls.
local function text(value)
  if type(value) == "string" and value:find("%S") then
    return value
  end
  return nil
end

-- A streamed piece of text: kept whatever it holds ("\n\n" between two
-- paragraphs is part of the reply), only an empty one is nothing.
local function piece(value)
  if type(value) == "string" and value ~= "" then
    return value
  end
  return nil
end

-- Call ids as Anthropic accepts them (^[a-zA-Z0-9_-]+$): a history made
-- with another provider may hold others (Kimi writes functions.ls:0).
-- Every other byte becomes "_", and an id that would then equal another
-- gets a suffix (_2, _3, ...), as the native codec does; the same on the
-- call and on its result. Returns the function that gives an id's wire id.
local function wire_ids(messages)
  local function accepted(id)
    return id ~= "" and not id:find("[^%w_-]")
  end
  local ids, taken, renamed = {}, {}, {}
  for _, message in ipairs(messages) do
    for _, call in ipairs(message.tool_calls or {}) do
      local id = tostring(call.id or "")
      ids[#ids + 1] = id
      if accepted(id) then
        taken[id] = true
      end
    end
  end
  for _, id in ipairs(ids) do
    if not accepted(id) and not renamed[id] then
      local base = id:gsub("[^%w_-]", "_")
      if base == "" then
        base = "call"
      end
      local sent, attempt = base, 0
      while taken[sent] do
        attempt = attempt + 1
        sent = base .. "_" .. (attempt + 1)
      end
      taken[sent] = true
      renamed[id] = sent
    end
  end
  return function(id)
    id = tostring(id or "")
    return renamed[id] or id
  end
end

-- What the native codec sends first when a history opens with the model's
-- turn (a chat UI's greeting): Anthropic refuses a first message that is
-- not the user's.
local OPENING_NOTE = "(start of conversation)"

-- A tool message from the OpenAI shape: failures are {"error": ...}.
local function tool_result(message, wire_id)
  local content = message.content or ""
  local decoded = json.decode(content)
  local failed = type(decoded) == "table" and decoded.error ~= nil and next(decoded, next(decoded)) == nil
  local block = { type = "tool_result", tool_use_id = wire_id(message.tool_call_id), content = content }
  if failed then
    block.content = type(decoded.error) == "string" and decoded.error or json.encode(decoded.error)
    block.is_error = true
  end
  return block
end

function M.transform_request(raw)
  local request = json.decode(raw)
  local wire_id = wire_ids(request.messages or {})
  local system = {}
  local messages = {}
  local function push(role, block)
    local last = messages[#messages]
    if last and last.role == role then
      last.content[#last.content + 1] = block
    else
      messages[#messages + 1] = { role = role, content = { block } }
    end
  end
  for _, message in ipairs(request.messages or {}) do
    if message.role == "system" then
      system[#system + 1] = message.content
    elseif message.role == "user" then
      if text(message.content) then
        push("user", { type = "text", text = message.content })
      end
    elseif message.role == "assistant" then
      if text(message.content) then
        push("assistant", { type = "text", text = message.content })
      end
      for _, call in ipairs(message.tool_calls or {}) do
        local input = json.decode(call["function"].arguments or "{}")
        if type(input) ~= "table" then
          input = {}
        end
        push("assistant", { type = "tool_use", id = wire_id(call.id), name = call["function"].name, input = input })
      end
    elseif message.role == "tool" then
      push("user", tool_result(message, wire_id))
    end
  end
  if messages[1] and messages[1].role == "assistant" then
    table.insert(messages, 1, { role = "user", content = { { type = "text", text = OPENING_NOTE } } })
  end
  local body = {
    model = request.model,
    max_tokens = request.max_tokens,
    messages = messages,
    stream = request.stream,
    temperature = request.temperature,
  }
  if #system > 0 then
    body.system = table.concat(system, "\n\n")
  end
  if request.tools then
    body.tools = {}
    for _, tool in ipairs(request.tools) do
      local fn = tool["function"]
      body.tools[#body.tools + 1] = {
        name = fn.name,
        description = fn.description,
        input_schema = fn.parameters,
      }
    end
  end
  return json.encode(body)
end

function M.build_headers(raw)
  local meta = json.decode(raw)
  local headers = {
    ["content-type"] = "application/json",
    ["anthropic-version"] = "2023-06-01",
  }
  if meta and text(meta.api_key) then
    headers["x-api-key"] = meta.api_key
    -- Set so that no bearer header is added on top.
    headers["authorization"] = ""
  end
  return json.encode(headers)
end

-- The provider's error as the host's `error` output takes it: the object
-- the provider sent (its type or code tells the host whether trying again
-- may help), or its text as the message.
local function reported(event)
  local e = event.error
  if type(e) == "table" then
    return e
  end
  return { message = tostring(e) }
end

function M.transform_stream_chunk(raw)
  local event = json.decode(raw)
  if type(event) ~= "table" then
    return "{}"
  end
  local kind = event.type
  local out = {}
  if kind == "message_start" then
    local u = (event.message or {}).usage
    if u then
      out.usage = {
        prompt_tokens = (u.input_tokens or 0) + (u.cache_read_input_tokens or 0)
          + (u.cache_creation_input_tokens or 0),
        completion_tokens = u.output_tokens or 0,
      }
    end
  elseif kind == "content_block_start" then
    local block = event.content_block or {}
    if block.type == "tool_use" then
      out.tool_calls = {
        { id = block.id, type = "function", name = block.name, raw_arguments = "", stream_index = event.index },
      }
    elseif block.type == "text" then
      out.content = piece(block.text)
    elseif block.type == "thinking" then
      out.reasoning_content = piece(block.thinking)
    end
  elseif kind == "content_block_delta" then
    local delta = event.delta or {}
    if delta.type == "text_delta" then
      out.content = piece(delta.text)
    elseif delta.type == "thinking_delta" then
      out.reasoning_content = piece(delta.thinking)
    elseif delta.type == "input_json_delta" then
      out.tool_calls = {
        { raw_arguments = delta.partial_json or "", stream_index = event.index },
      }
    end
  elseif kind == "message_delta" then
    out.finish_reason = text((event.delta or {}).stop_reason)
    local u = event.usage
    if u then
      out.usage = { completion_tokens = u.output_tokens or 0 }
    end
  elseif kind == "message_stop" then
    out.done = true
  elseif kind == "error" then
    return json.encode({ error = reported(event) })
  end
  return json.encode(out)
end

function M.transform_response(raw)
  local body, err = json.decode(raw)
  if type(body) ~= "table" then
    error("response is not JSON: " .. tostring(err))
  end
  if body.type == "error" then
    return json.encode({ error = reported(body) })
  end
  local out = { finish_reason = text(body.stop_reason) }
  -- A message cut at a limit: an empty input is a cut one, left blank so
  -- the call is marked truncated instead of run with no arguments.
  local cut = body.stop_reason == "max_tokens" or body.stop_reason == "model_context_window_exceeded"
  local content, reasoning = {}, {}
  for position, block in ipairs(body.content or {}) do
    if block.type == "text" then
      content[#content + 1] = block.text
    elseif block.type == "thinking" then
      reasoning[#reasoning + 1] = block.thinking
    elseif block.type == "tool_use" then
      out.tool_calls = out.tool_calls or {}
      out.tool_calls[#out.tool_calls + 1] = {
        id = block.id,
        type = "function",
        name = block.name,
        raw_arguments = (cut and next(block.input or {}) == nil) and "" or json.encode(block.input or {}),
        stream_index = position - 1,
      }
    end
  end
  out.content = text(table.concat(content))
  out.reasoning_content = text(table.concat(reasoning))
  local u = body.usage
  if u then
    out.usage = {
      prompt_tokens = (u.input_tokens or 0) + (u.cache_read_input_tokens or 0)
        + (u.cache_creation_input_tokens or 0),
      completion_tokens = u.output_tokens or 0,
    }
  end
  return json.encode(out)
end

function M.transform_error(status, raw)
  local body = json.decode(raw)
  if type(body) == "table" and type(body.error) == "table" then
    return body.error.message or ""
  end
  return ""
end

return M
