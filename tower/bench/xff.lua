-- wrk script: every request comes "through a trusted proxy" from one of 10,000 clients,
-- named in X-Forwarded-For (198.18.0.0/15, the benchmarking range), cycling.
local n = 0
request = function()
  n = n + 1
  local i = n % 10000
  local xff = string.format("198.18.%d.%d", math.floor(i / 256), i % 256)
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = xff })
end
