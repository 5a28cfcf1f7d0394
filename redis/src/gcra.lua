-- tollgate-redis: tollgate::gcra on the server, exact in Lua doubles.
--
-- Representation (all numbers are exact integers below 2^53; see src/script.rs):
--   t  = server microseconds since the origin (2020-01-01T00:00:00Z)
--   the quota earns `a` units every `b` microseconds, exactly (a / b = 1000 * mul / div, reduced)
--   n  = floor(t / b): the base, a whole number of `b` periods; r = t - n * b
--   ef = floor(r * a / b), ec = ceil(r * a / b): units earned since the base (gcra's
--        earned_floor / earned_ceil minus n * a)
--   the key holds "<tag> <n> <z>": the gcra state is n * a + z, written relative to the base of
--   the decision that wrote it; no key (or another quota's tag) is a full bucket.
-- KEYS[1]: the bucket. ARGV: mode ('acquire' | 'lease' | 'echo'), tag, a, b, burst units,
-- scale, cost (tokens), lease maximum (tokens), origin (us), test time (us, '' = TIME).
local mode = ARGV[1]
local function fmt(x) return string.format('%.0f', x) end
if mode == 'echo' then
  local out = {}
  for i = 3, #ARGV do out[#out + 1] = fmt(tonumber(ARGV[i])) end
  return out
end
local tag = ARGV[2]
local a = tonumber(ARGV[3])
local b = tonumber(ARGV[4])
local bu = tonumber(ARGV[5])
local scale = tonumber(ARGV[6])
local cost = tonumber(ARGV[7])
local lmax = tonumber(ARGV[8])
local origin = tonumber(ARGV[9])
local fixed = ARGV[10] ~= ''
local now
if fixed then
  now = tonumber(ARGV[10])
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
local t = now - origin
if t < 0 or t >= 9007199254740992 then
  return redis.error_reply('tollgate: server clock outside 2020..2255')
end
-- floor(x / y) for exact integers x, y < 2^53 (the division may round; correct it).
local function fdiv(x, y)
  local q = math.floor(x / y)
  local m = x - q * y
  if m < 0 then q = q - 1 elseif m >= y then q = q + 1 end
  return q
end
local n = fdiv(t, b)
local r = t - n * b
local ra = r * a
local ef = fdiv(ra, b)
local ec = ef
if ef * b < ra then ec = ef + 1 end
local prev = redis.call('GET', KEYS[1])
local z = nil
if prev then
  local ptag, sn, sz = string.match(prev, '^(%S+) (%d+) (%d+)$')
  if not ptag then
    return redis.error_reply('tollgate: the key holds a value that is not a tollgate state')
  end
  if ptag == tag then
    local d = n - tonumber(sn)
    local pz = tonumber(sz)
    if d >= 0 then
      local da = d * a
      if da < pz then z = pz - da end
    else
      -- The clock stepped back past a base: the state moves up (exact while below 2^53; above,
      -- it is far beyond ef + bu and only ever refused).
      z = pz - d * a
    end
  end
end
if z ~= nil and z <= ef then z = nil end
local take = 0
if mode == 'acquire' then
  if z == nil or z + cost * scale <= ef + bu then take = cost end
else
  local avail = bu
  if z ~= nil then avail = math.min(bu, ef + bu - z) end
  local whole = -1
  if avail >= 0 then whole = fdiv(avail, scale) end
  if whole >= cost then take = math.max(cost, math.min(whole, lmax)) end
end
if cost == 0 then
  -- A read (for a snapshot): admitted, nothing written.
  return {'1', fmt(t), prev or '', '', '0'}
end
if take == 0 then
  return {'0', fmt(t), prev or '', '', '0'}
end
local base = ec
if z ~= nil and z > ec then base = z end
local nz = base + take * scale
local v = tag .. ' ' .. fmt(n) .. ' ' .. fmt(nz)
if fixed then
  redis.call('SET', KEYS[1], v)
else
  -- Expire (rounded up, plus a margin for the double division) once the bucket is full again.
  local ms = math.floor((nz * b / a - r) / 1000) + 2
  redis.call('SET', KEYS[1], v, 'PX', fmt(ms))
end
return {'1', fmt(t), prev or '', fmt(nz), fmt(take)}
