-- OpenAI Chat Completions, written as a Lua adapter.
--
-- The request already is OpenAI's shape, so it passes through. Stream
-- chunks are read here, without the standard decoder: every tool-call
-- entry becomes one flat fragment whose stream_index is the wire's `index`
-- (never nested under `function`, never filtered by name: continuation
-- pieces carry only arguments).

local M = { endpoint = "/chat/completions" }

function M.transform_request(raw)
  return raw
end

function M.build_headers(raw)
  local meta = json.decode(raw)
  local headers = { ["content-type"] = "application/json" }
  if meta and meta.api_key and meta.api_key ~= "" then
    headers["authorization"] = "Bearer " .. meta.api_key
  end
  return json.encode(headers)
end

local function text(value)
  if type(value) == "string" and value ~= "" then
    return value
  end
  return nil
end

local function arguments(value)
  if type(value) == "table" then
    return json.encode(value)
  end
  return text(value) or ""
end

local function usage(u)
  if type(u) ~= "table" then
    return nil
  end
  return {
    prompt_tokens = u.prompt_tokens or 0,
    completion_tokens = u.completion_tokens or 0,
    total_tokens = u.total_tokens or 0,
  }
end

-- The provider's error as the host's `error` output takes it: the object
-- the provider sent (its type or code tells the host whether trying again
-- may help), or its text as the message.
local function reported(chunk)
  local e = chunk.error
  if type(e) == "table" then
    return e
  end
  return { message = tostring(e) }
end

function M.transform_stream_chunk(raw)
  local chunk = json.decode(raw)
  if type(chunk) ~= "table" then
    -- Keep-alives and proxy banners: nothing to read.
    return "{}"
  end
  if chunk.error then
    return json.encode({ error = reported(chunk) })
  end
  local out = {}
  for _, choice in ipairs(chunk.choices or {}) do
    if (choice.index or 0) == 0 then
      local delta = choice.delta or {}
      out.content = (out.content or "") .. (text(delta.content) or "")
      out.reasoning_content = (out.reasoning_content or "")
        .. (text(delta.reasoning_content) or text(delta.reasoning) or "")
      for position, call in ipairs(delta.tool_calls or {}) do
        local fn = call["function"] or {}
        out.tool_calls = out.tool_calls or {}
        out.tool_calls[#out.tool_calls + 1] = {
          id = text(call.id),
          type = text(call.type),
          name = text(fn.name),
          raw_arguments = arguments(fn.arguments),
          stream_index = call.index or (position - 1),
        }
      end
      out.finish_reason = text(choice.finish_reason) or out.finish_reason
    end
  end
  out.usage = usage(chunk.usage)
  return json.encode(out)
end

function M.transform_response(raw)
  local body, err = json.decode(raw)
  if type(body) ~= "table" then
    error("response is not JSON: " .. tostring(err))
  end
  if body.error then
    return json.encode({ error = reported(body) })
  end
  local out = { usage = usage(body.usage) }
  local choice = (body.choices or {})[1]
  if choice then
    local message = choice.message or {}
    out.content = text(message.content)
    out.reasoning_content = text(message.reasoning_content) or text(message.reasoning)
    out.finish_reason = text(choice.finish_reason)
    for position, call in ipairs(message.tool_calls or {}) do
      local fn = call["function"] or {}
      out.tool_calls = out.tool_calls or {}
      out.tool_calls[#out.tool_calls + 1] = {
        id = text(call.id),
        type = text(call.type),
        name = text(fn.name),
        raw_arguments = arguments(fn.arguments),
        stream_index = position - 1,
      }
    end
  end
  return json.encode(out)
end

function M.transform_error(status, raw)
  local body = json.decode(raw)
  if type(body) == "table" then
    if type(body.error) == "table" and text(body.error.message) then
      return body.error.message
    end
    return text(body.error) or text(body.message) or text(body.detail) or ""
  end
  return ""
end

return M
