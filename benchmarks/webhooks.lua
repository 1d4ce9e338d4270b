-- wrk: POST pre-signed, unique EspoCRM webhooks (one per line of the file in WEBHOOKS_FILE:
-- "signature<TAB>legacy signature<TAB>body"), each thread its own share, none sent twice while
-- the file lasts. Each thread writes the event id of every new event acknowledged (a 200 with
-- "duplicate":false) to ACKED_PREFIX<thread>.txt; at the end, one line of JSON with the rest.
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  local path = os.getenv("WEBHOOKS_FILE")
  local count = tonumber(os.getenv("WRK_THREADS"))
  requests = {}
  local n = 0
  for line in io.lines(path) do
    if n % count == id then
      local current, legacy, body = line:match("^([^\t]*)\t([^\t]*)\t(.*)$")
      table.insert(requests, wrk.format("POST", "/webhooks/espocrm", {
        ["Content-Type"] = "application/json",
        ["Signature"] = current,
        ["X-Signature"] = legacy,
      }, body))
    end
    n = n + 1
  end
  index = 0
  wrapped = false
  acked = io.open(os.getenv("ACKED_PREFIX") .. id .. ".txt", "w")
  acked:setvbuf("line")  -- written as they come: nothing left in a buffer at the end
end

function request()
  index = index + 1
  if index > #requests then
    index = 1  -- the file ran out: repeats are counted duplicates, not new rows
    wrapped = true
  end
  return requests[index]
end

function response(status, headers, body)
  if status == 200 and body:find('"duplicate":false', 1, true) then
    acked:write(body:match('"event":"event:(%d+)"'), "\n")
  end
end

function done(summary, latency, requests)
  local any_wrapped = false
  for _, thread in ipairs(threads) do
    if thread:get("wrapped") then any_wrapped = true end
  end
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "non_2xx": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "timeout": %d, "p50_us": %d, "p99_us": %d, "wrapped": %s}\n',
    summary.requests, summary.duration, summary.errors.status, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), tostring(any_wrapped)))
end
