-- The seeds' plain Lua token bucket (the common blog recipe), kept as the baseline: float tokens
-- and the last refill time in a hash, the client's clock in nanoseconds, refill by elapsed
-- seconds times the rate, a fixed 60 s expiry. Not exact (doubles, %.14g when stored, client
-- clocks); shown for reference only.
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local wanted = tonumber(ARGV[4])
local st = redis.call('HMGET', KEYS[1], 'tokens', 'last')
local tokens = tonumber(st[1]) or capacity
local last = tonumber(st[2]) or now
tokens = math.min(capacity, tokens + (now - last) / 1e9 * rate)
local ok = 0
if tokens >= wanted then
  tokens = tokens - wanted
  ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'last', now)
redis.call('EXPIRE', KEYS[1], 60)
return ok
