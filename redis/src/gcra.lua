-- tollgate-redis: tollgate::gcra on the server, exact in Lua doubles.
--
-- Representation (all numbers are exact integers below 2^53; see src/script.rs):
--   t  = server microseconds since the origin (2020-01-01T00:00:00Z)
--   the quota earns `a` units every `b` microseconds, exactly (a / b = 1000 * mul / div, reduced)
--   n  = floor(t / b): the base, a whole number of `b` periods; r = t - n * b
--   ef = floor(r * a / b), ec = ceil(r * a / b): units earned since the base (gcra's
--        earned_floor / earned_ceil minus n * a)
--   the key holds "<tag> <n> <z>": the gcra state is n * a + z, written relative to the base of
--   the decision that wrote it; no key is a full bucket. A state under another quota's tag
--   (tag = "a.b.scale.burst_units") is converted as tollgate::gcra::rescale does (see
--   `convert` below), and the reply's `prev` is then the converted state, in this
--   quota's tag and relative to the current base.
--   A policy of several quotas (mode 'multi') keeps one triple per quota in the key, in the
--   policy's order, separated by spaces: "<tag1> <n1> <z1> <tag2> <n2> <z2> ...". It admits
--   only if every quota holds the cost, and then writes every quota's new state at once.
-- KEYS[1]: the bucket. ARGV: mode ('acquire' | 'lease' | 'echo'), tag, a, b, burst units,
-- scale, cost (tokens), then optionally the lease maximum (tokens; mode 'lease' only) and a test
-- time (Unix us; absent = TIME). Mode 'multi': ARGV = 'multi', N, cost, test time ('' = TIME),
-- then per quota: tag, a, b, burst units, scale. The origin is ORIGIN below. The test time is
-- honoured only where the client prepends `local TEST_CLOCK = true` (src/script.rs: its feature
-- `test-support`); the production script always reads TIME.
-- Trust: the quota is the client's (its arguments), so a client that may run commands on the
-- server can set any key's limit; what the script guards against is a value it did not write
-- (any length: refused before any pattern matching) and a cost that is not a whole number of
-- tokens, which could otherwise credit a bucket.
-- Numbers are read with `s + 0` (one conversion; `tonumber` converts twice). A decision on one
-- quota replies one string, "<status> <sec> <usec> <taken> <n> <z'> <prev>": the server's time
-- as sec * 10^6 + usec Unix us (TIME's own strings), the tokens taken, the written base and
-- state ('-' when nothing was written) and the stored state it found in this quota's tag ('' for
-- none); a policy replies an array (see below); a malformed value {'bad', t, reason}.
local mode = ARGV[1]
-- Integers below 2^53 formatted exactly (never tostring, whose %.14g rounds).
local sf = string.format
if mode == 'echo' then
  local out = {}
  for i = 3, #ARGV do out[#out + 1] = sf('%.0f', tonumber(ARGV[i])) end
  return out
end
-- The quota being decided: the one quota, or each of a policy's in turn (the functions below
-- read these as upvalues).
local tag, a, b, bu, scale, cost, testnow
-- Mode 'keys': several keys, each with its own policy and cost, all or nothing (see below).
local keys = mode == 'keys'
local multi = mode == 'multi' or keys
if keys then
  -- Each key's cost is checked in the loop below.
  cost = 0
  testnow = ARGV[2]
elseif multi then
  cost = ARGV[3] + 0
  testnow = ARGV[4]
else
  tag = ARGV[2]
  a = ARGV[3] + 0
  b = ARGV[4] + 0
  bu = ARGV[5] + 0
  scale = ARGV[6] + 0
  cost = ARGV[7] + 0
  testnow = ARGV[9]
end
-- 2020-01-01T00:00:00Z in Unix microseconds: the model's clock origin (src/script.rs).
local ORIGIN = 1577836800000000
if not (cost >= 0 and cost < 9007199254740992 and cost == math.floor(cost)) then
  return redis.error_reply('tollgate: the cost is not a whole number of tokens')
end
local fixed = TEST_CLOCK and testnow ~= nil and testnow ~= ''
local now, sec, usec
if fixed then
  sec, usec = '0', testnow
  now = testnow + 0
else
  local tm = redis.call('TIME')
  sec, usec = tm[1], tm[2]
  now = sec * 1000000 + usec
end
local t = now - ORIGIN
if t < 0 or t >= 9007199254740992 then
  return redis.error_reply('tollgate: server clock outside 2020..2255')
end
-- The current quota's base at t (see the header), set by `base_at`.
local n, r, ef, ec
-- floor(x / y) for exact integers x, y < 2^53 (the division may round; correct it).
local function fdiv(x, y)
  local q = math.floor(x / y)
  local m = x - q * y
  if m < 0 then q = q - 1 elseif m >= y then q = q + 1 end
  return q
end
-- The current quota's base at t: n = floor(t / b), r = t - n b, and ef = floor(r a / b), ec =
-- ceil(r a / b), exactly.
local function base_at()
  n = fdiv(t, b)
  r = t - n * b
  local ra = r * a
  ef = fdiv(ra, b)
  ec = ef
  if ef * b < ra then ec = ef + 1 end
end
-- The farthest the server's clock may step back (a failover to a host whose clock is behind)
-- before a stored state reads as dated beyond the quota's horizon, i.e. malformed: one day.
local STEP_BACK = 86400000000
local P51 = 2251799813685248
local P52 = 4503599627370496
local P53 = 9007199254740992
-- A debt beyond any state (the clock stepped back by weeks): "never". The client reads n * a +
-- 2^63 as tollgate's largest state, which the model refuses until past the horizon.
local NEVER = 9223372036854775808
if not multi then base_at() end
-- A value this script did not write is that key's fault alone: reply 'bad' (the client refuses
-- the key and reports it), write nothing. pcall: a hash or a list under the key is WRONGTYPE.
local prev = redis.pcall('GET', KEYS[1])
if type(prev) == 'table' then
  return {'bad', sf('%.0f', t), tostring(prev.err or prev.ok or 'not a string')}
end
-- At most four triples of a 67-byte tag and two 16-digit numbers: longer is not the script's,
-- and is refused before any pattern runs over it (`triples`' unanchored match takes time
-- quadratic in the length: tens of kilobytes would block the server for seconds).
if prev and #prev > 512 then
  return {'bad', sf('%.0f', t), 'a value of ' .. #prev .. ' bytes'}
end
-- The hot path: one quota (`acquire` or `lease`), and no state or a state under this quota's tag that
-- passes `load`'s checks (inlined below).
local ptag, sn, sz, psn, pz
local hot = false
if not multi then
  if prev then
    ptag, sn, sz = string.match(prev, '^(%S+) (%d+) (%d+)$')
    if ptag == tag then psn, pz = sn + 0, sz + 0 end
    hot = psn ~= nil and psn < P53 and pz < P53 and pz <= a + bu and psn * b <= t + STEP_BACK
  else
    hot = true
  end
end
-- Everything beyond the hot path, built only off it: each function a script defines is a new
-- closure (with its upvalues) on every call.
local L
-- Mode 'keys' builds them only for a key off its own hot path (see there).
local function helpers()
  return (function()
    -- An upper bound, as an integer, on a positive real X whose double v was computed from exact
    -- non-negative integers by at most three correctly rounded operations (+, *, /; no
    -- subtraction): v >= X (1 - 2^-53)^3, so the rounded v (1 + 2^-48) >= X (1 - 2^-53)^4
    -- (1 + 2^-48) > X, and its ceiling is an integer >= ceil(X), above it by at most about
    -- 2^-47 X + 1 (a debt above 2^52 units: its wait is at most 2^-47 of itself longer). Capped
    -- at NEVER. Doubles at or above 2^53 are integers, printed exactly by '%.0f'.
    local function bound_up(v)
      return math.min(NEVER, math.ceil(v * (1 + 2 ^ -48)))
    end
    -- ceil(x / y) for exact integers x >= 0, y >= 1 with x < 2^53.
    local function cdiv(x, y)
      local q = fdiv(x, y)
      if q * y < x then q = q + 1 end
      return q
    end
    -- floor(x * p / q) (up = false) or ceil (up = true) for exact integers 0 <= x < q, 1 <= p, q <=
    -- 2^51: the result is below p. Exact when x * p < 2^53 (then the product is exact: a product of
    -- integers below 2^53 rounds to a double >= 2^53 otherwise, so the test is exact too).
    -- Otherwise bounded: the real value v = x * p / q < p <= 2^51, and the double v' =
    -- fl(fl(x * p) / q) = v (1 + e1)(1 + e2) with |e1|, |e2| <= 2^-53, so |v' - v| < 2^51 * 2^-52
    -- (1 + 2^-54) < 1: floor(v' - 1) <= v, so it is at most floor(v) (and at least floor(v) - 2),
    -- and ceil(v' + 1) >= v, so it is at least ceil(v) (and at most ceil(v) + 2). v' - 1 and
    -- v' + 1 are exact: v' < 2^52, where doubles are spaced at most 1/2 apart.
    local function mulfrac(x, p, q, up)
      local xp = x * p
      if xp < P53 then
        if up then return cdiv(xp, q) end
        return fdiv(xp, q)
      end
      local v = xp / q
      if up then return math.ceil(v + 1) end
      return math.max(0, math.floor(v - 1))
    end
    -- Converts `u` units of a bucket with scale `s1` into units of this quota (scale `scale`),
    -- rounded toward fewer tokens: down for a balance (up = false; the result is capped at `bu`),
    -- up for a debt (up = true; nil when the result would reach 2^52, for the caller to bound).
    -- 0 <= u < 2^53. Whole tokens convert exactly, the fraction of a token by `mulfrac`; equal
    -- scales are exact.
    local function rescale_units(u, s1, up)
      if s1 == scale then
        if not up then return math.min(u, bu) end
        return u
      end
      local q = fdiv(u, s1)
      local rem = u - q * s1
      if not up and q >= bu / scale then return bu end
      -- q * scale: below bu <= 2^51 for a balance; for a debt exact below 2^52 (a product at or
      -- above 2^52 rounds to a double >= 2^52).
      local whole = q * scale
      if whole >= P52 then return nil end
      local v = whole + mulfrac(rem, scale, s1, up)
      if not up then return math.min(v, bu) end
      return v
    end
    -- A decimal integer below 2^53 (larger strings round to a double >= 2^53, so the test is
    -- exact), or nil.
    local function int53(s)
      local x = tonumber(s)
      if x and x < P53 then return x end
      return nil
    end
    -- The state "<ptag> <sn> <sz>" written under another quota, as tollgate::gcra::rescale(state,
    -- now, old, this quota) relative to this quota's current base n: nil if the value is not a
    -- state the script can have written. Every step rounds toward fewer tokens (a larger state).
    local function convert(ptag, sn, sz)
      local sa, sb, ss, sbu = string.match(ptag, '^(%d+)%.(%d+)%.(%d+)%.(%d+)$')
      if not sa then return nil end
      local a1, b1, s1, bu1 = int53(sa), int53(sb), int53(ss), int53(sbu)
      local n1, z1 = int53(sn), int53(sz)
      if not (a1 and b1 and s1 and bu1 and n1 and z1) then return nil end
      if a1 < 1 or b1 < 1 or s1 < 1 or a1 > P51 or bu1 > P51 then return nil end
      -- (a1 + 1) * b1 <= 2^53, as a1 * b1 < 2^53 (exact by the rounding argument of `int53`) and
      -- b1 <= 2^53 - a1 * b1 (exact).
      local ab = a1 * b1
      if ab >= P53 or b1 > P53 - ab then return nil end
      -- burst_units + 2 a1 <= 2^51 (all exact: below 3 * 2^51); burst_units a positive multiple of
      -- the scale; the base a time below 2^53 us; z within what the script writes.
      if bu1 + 2 * a1 > P51 or bu1 < s1 or fdiv(bu1, s1) * s1 ~= bu1 then return nil end
      if n1 * b1 >= P53 or z1 > a1 + bu1 then return nil end
      -- Dated beyond the horizon: a base later than the server's time plus a step back.
      if n1 * b1 > t + STEP_BACK then return nil end
      -- The old quota at t: its base n1t, units earned since (floor), and the stored state w
      -- relative to n1t: z1 - (n1t - n1) * a1.
      local n1t = fdiv(t, b1)
      local r1 = t - n1t * b1
      local ef1 = fdiv(r1 * a1, b1)
      local d = n1t - n1
      local w
      if d >= 0 then
        -- d * a1 > z1: the state is below the base, a full bucket (the product is not needed).
        if d > fdiv(z1, a1) then w = -1 else w = z1 - d * a1 end
      else
        -- The clock stepped back past the writer's base: the state lies d periods ahead.
        local da = -d * a1
        if da >= P52 then return NEVER end
        w = z1 + da
      end
      -- The old balance at t, in old units: ef1 + bu1 - w, capped at bu1 (a full bucket).
      if w <= ef1 then w = ef1 end
      local b1units = ef1 + bu1 - w
      if b1units >= 0 then
        -- Carried over in units (fractions of a token kept), capped at this burst, rounded down;
        -- the state that holds them here, with earned rounded up (as gcra::rescale).
        return ec + bu - rescale_units(b1units, s1, false)
      end
      -- In debt (the clock stepped back): the debt converted (rounded up), or the state that is
      -- empty again when the old one is, whichever is later. The old bucket is empty again at
      -- the first instant its earned units reach w - bu1 (relative to n1t): x = k * a1 + m units
      -- after the base, i.e. k * b1 + m * b1 / a1 us, rounded up to the whole microsecond (the
      -- server clock's resolution: tokens come back at most 1 us later than the model's).
      local debt = -b1units
      local by_tokens = rescale_units(debt, s1, true)
      if by_tokens == nil then
        -- ec + bu + debt * scale / s1 >= 2^52: bounded from above (all three integers exact).
        by_tokens = bound_up(debt * scale / s1 + (ec + bu))
      else
        by_tokens = ec + bu + by_tokens
      end
      local x = w - bu1
      local k = fdiv(x, a1)
      local kb = k * b1
      if kb >= P51 then return NEVER end
      local due = kb + cdiv((x - k * a1) * b1, a1)
      if due >= P51 then return NEVER end
      -- Microseconds from this quota's base n to the due instant (below 2^51 + 2^52), and the
      -- units this quota earns by then, rounded up: m * a + ceil(rho * a / b).
      local delta = due - r1 + r
      local m = fdiv(delta, b)
      local ma = m * a
      local by_time = cdiv((delta - m * b) * a, b) + bu
      if ma >= P52 then
        by_time = bound_up(ma + by_time)
      else
        by_time = ma + by_time
      end
      return math.max(by_tokens, by_time)
    end
    -- The current quota's state from a stored triple: true, z (nil: full) and the state as the
    -- reply shows it (`raw` if given, the triple as stored under this tag, else converted); or
    -- false and why the value is malformed.
    local function load(ptag, sn, sz, raw)
      local z, shown
      if ptag ~= tag then
        z = convert(ptag, sn, sz)
        if z == nil then
          return false, 'a state under tag ' .. ptag .. ' out of range'
        end
        shown = tag .. ' ' .. sf('%.0f', n) .. ' ' .. sf('%.0f', z)
      else
        shown = raw or (ptag .. ' ' .. sn .. ' ' .. sz)
        local psn, pz = int53(sn), int53(sz)
        -- What this script writes: a base no later than the server's time plus a step back, and a
        -- state at most one period and a burst above it.
        if not (psn and pz) or pz > a + bu or psn * b > t + STEP_BACK then
          return false, "a state out of range or dated beyond the quota's horizon"
        end
        local d = n - psn
        if d >= 0 then
          local da = d * a
          if da < pz then z = pz - da end
        else
          -- The clock stepped back past a base: the state moves up (exact while below 2^53; above,
          -- it is far beyond ef + bu and only ever refused).
          z = pz - d * a
        end
      end
      if z ~= nil and z <= ef then z = nil end
      return true, z, shown
    end
    -- The triples of a stored value (1 to 4 of them, exactly: nothing else in the string), or nil.
    local function triples(v)
      local out = {}
      for ptag, sn, sz in string.gmatch(v, '(%S+) (%d+) (%d+)') do
        out[#out + 1] = {ptag, sn, sz}
      end
      if #out < 1 or #out > 4 then return nil end
      local parts = {}
      for i = 1, #out do parts[i] = table.concat(out[i], ' ') end
      if table.concat(parts, ' ') ~= v then return nil end
      return out
    end
    -- The stored triple for the current quota, the i-th of the policy: the i-th if it has this
    -- tag, else the first with this tag, else the i-th (converted), else none (a new quota: full).
    local function pick(stored, i)
      if stored[i] and stored[i][1] == tag then return stored[i] end
      for j = 1, #stored do
        if stored[j][1] == tag then return stored[j] end
      end
      return stored[i]
    end
    return {load = load, triples = triples, pick = pick}
  end)()
end
if not hot and not keys then L = helpers() end
-- Mode 'keys': KEYS[1..K], ARGV = 'keys', test time ('' = TIME), P, then P policies (each: N,
-- then N quotas' five arguments each), then per key: cost, flag, and the number of its policy
-- (1 to P). Every key is decided at the one reading t, as mode 'multi' decides its key;
-- admitted only if every key with a cost above 0 holds its cost, and then every such key is
-- written (one SET each), else nothing is. A key with cost 0 is read. A key's
-- flag (ARGV after its cost) adds 1 if it is decided alone (written if it holds its cost,
-- whatever the others, and left out of the call's verdict) and 2 if it is only checked (it
-- must hold its cost, and is never written). Reply:
-- {status, t, then per key: its own verdict ('1' holds the cost or cost 0, '0' refused), prev_1
-- .. prev_N (as mode 'multi'), next_1 .. next_N ('' when not written)}; a malformed value
-- {'bad', t, reason, k}. Every key is read before any is written, so a key named twice would be
-- decided twice on one state: the caller names each key once (`decide_keys` refuses repeats).
if keys then
  -- x formatted as '%.0f' formats it; by '%d' (through a C long, cheaper) where that prints the
  -- same: a positive whole number below 2^53.
  local function int(x)
    if x > 0 and x < P53 and x % 1 == 0 then return sf('%d', x) end
    return sf('%.0f', x)
  end
  -- Each policy's quotas, read and based at t once for all the keys under it. Entry: tag, a,
  -- b, bu, scale, n, r, ef, ec, and n formatted. Policy p's quotas are entries pfirst[p] ..
  -- pfirst[p] + pcount[p] - 1 of `pq`.
  local pfirst, pcount, pq = {}, {}, {}
  local np = ARGV[3] + 0
  local pos = 4
  for pi = 1, np do
    local nq = ARGV[pos] + 0
    pos = pos + 1
    pfirst[pi] = #pq + 1
    for _ = 1, nq do
      tag, a, b = ARGV[pos], ARGV[pos + 1] + 0, ARGV[pos + 2] + 0
      bu, scale = ARGV[pos + 3] + 0, ARGV[pos + 4] + 0
      pos = pos + 5
      base_at()
      pq[#pq + 1] = {tag, a, b, bu, scale, n, r, ef, ec, sf('%.0f', n)}
    end
    pcount[pi] = #pq + 1 - pfirst[pi]
  end
  -- The current quota from an entry (the upvalues `load` and `convert` read).
  local function use(c)
    tag, a, b, bu, scale = c[1], c[2], c[3], c[4], c[5]
    n, r, ef, ec = c[6], c[7], c[8], c[9]
  end
  local admit = true
  local nk = #KEYS
  -- From three keys on, every key read by MGET, 1000 keys a command (unpack fails past 8000
  -- values), instead of one GET per key: nothing is written before the loop below has read
  -- every value, so each is the one its GET would return there. MGET reads a key holding
  -- another type as absent, as it reads an absent key; if EXISTS counts any of those keys,
  -- each of them is read again by GET in its turn, which then replies as it would have. One or
  -- two keys are read by GET (`probe`): MGET and EXISTS would be as many commands.
  local vals, absent = {}, {}
  for s = 1, (nk > 2 and nk or 0), 1000 do
    local e = math.min(nk, s + 999)
    local got = redis.call('MGET', unpack(KEYS, s, e))
    for k = s, e do
      local v = got[k - s + 1]
      vals[k] = v
      if not v then absent[#absent + 1] = KEYS[k] end
    end
  end
  local probe = nk <= 2
  for s = 1, #absent, 1000 do
    if redis.call('EXISTS', unpack(absent, s, math.min(#absent, s + 999))) > 0 then
      probe = true
      break
    end
  end
  -- Per key: its cost, whether it holds it, its flags, and its quotas' slots first .. first +
  -- count - 1. Per slot: the quota (a `pq` entry), the state z at t (false: full) and
  -- the stored state as the reply shows it. Flat arrays: no table per key.
  local kcost, kholds, kalone, kcheck, kfirst, kcount = {}, {}, {}, {}, {}, {}
  local qe, qz, qshown = {}, {}, {}
  local j = 1
  for k = 1, nk do
    local cost_k = ARGV[pos] + 0
    if not (cost_k >= 0 and cost_k < P53 and cost_k == math.floor(cost_k)) then
      return redis.error_reply('tollgate: the cost is not a whole number of tokens')
    end
    local flag = ARGV[pos + 1] + 0
    local pi = ARGV[pos + 2] + 0
    pos = pos + 3
    local nq, q0 = pcount[pi], pfirst[pi]
    if nq == nil then
      return redis.error_reply('tollgate: a key names no policy of the call')
    end
    local v = vals[k]
    if probe and not v then v = redis.pcall('GET', KEYS[k]) end
    if type(v) == 'table' then
      return {'bad', sf('%.0f', t), tostring(v.err or v.ok or 'not a string'), sf('%d', k)}
    end
    if v and #v > 512 then
      return {'bad', sf('%.0f', t), 'a value of ' .. #v .. ' bytes', sf('%d', k)}
    end
    local holds = true
    local first = j
    -- The hot path: no state, or 1 to 4 triples under the policy's tags in its order, each in
    -- range (the one-quota hot path's checks), read in place. Such a value is exactly what
    -- `triples` splits into these triples and `pick` takes in order, and each triple is what
    -- `load` reads under its own tag, so the result is the slow path's; anything else takes
    -- the slow path below.
    local fast = nq >= 1 and nq <= 4
    if fast then
      local vp = 1
      for i = 1, nq do
        local c = pq[q0 + i - 1]
        use(c)
        local z, sh = nil, ''
        if v then
          local ft, sn, sz
          if nq == 1 then
            ft, sn, sz = string.match(v, '^(%S+) (%d+) (%d+)$')
            sh = v
          else
            local _, e
            _, e, sh, ft, sn, sz = string.find(v, '^((%S+) (%d+) (%d+))', vp)
            -- The triple ends the value (the last) or is followed by one space (the others).
            if e and (i < nq and string.byte(v, e + 1) == 32 or i == nq and e == #v) then
              vp = e + 2
            else
              ft = nil
            end
          end
          if ft == nil or ft ~= tag then
            fast = false
            break
          end
          local psn, pz = sn + 0, sz + 0
          if not (psn < P53 and pz < P53 and pz <= a + bu and psn * b <= t + STEP_BACK) then
            fast = false
            break
          end
          local d = n - psn
          if d >= 0 then
            local da = d * a
            if da < pz then z = pz - da end
          else
            z = pz - d * a
          end
          if z ~= nil and z <= ef then z = nil end
        end
        if z ~= nil and z + cost_k * scale > ef + bu then holds = false end
        qe[j], qz[j], qshown[j] = c, z or false, sh
        j = j + 1
      end
    end
    if not fast then
      if not L then L = helpers() end
      local stored = {}
      if v then
        stored = L.triples(v)
        if stored == nil then
          return {'bad', sf('%.0f', t), 'not "<tag> <base> <state>" triples', sf('%d', k)}
        end
      end
      holds, j = true, first
      for i = 1, nq do
        local c = pq[q0 + i - 1]
        use(c)
        local ok, z, sh = true, nil, ''
        local tr = L.pick(stored, i)
        if tr then ok, z, sh = L.load(tr[1], tr[2], tr[3], nil) end
        if not ok then return {'bad', sf('%.0f', t), z, sf('%d', k)} end
        if z ~= nil and z + cost_k * scale > ef + bu then holds = false end
        qe[j], qz[j], qshown[j] = c, z or false, sh
        j = j + 1
      end
    end
    if cost_k == 0 then holds = true end
    local alone = flag % 2 == 1
    if not holds and not alone then admit = false end
    kcost[k], kholds[k], kalone[k], kcheck[k] = cost_k, holds, alone, flag >= 2
    kfirst[k], kcount[k] = first, j - first
  end
  local out = {'0', sf('%.0f', t)}
  if admit then out[1] = '1' end
  local o = 2
  local parts = {}
  for k = 1, nk do
    local cost_k, holds, first, count = kcost[k], kholds[k], kfirst[k], kcount[k]
    o = o + 1
    out[o] = holds and '1' or '0'
    for x = first, first + count - 1 do
      o = o + 1
      out[o] = qshown[x]
    end
    local write = admit
    if kalone[k] then write = holds end
    if kcheck[k] then write = false end
    if write and cost_k > 0 then
      local ms = 0
      for i = 1, count do
        local c, z = qe[first + i - 1], qz[first + i - 1]
        local base = c[9]
        if z and z > base then base = z end
        local nz = base + cost_k * c[5]
        local nzs = int(nz)
        parts[i] = c[1] .. ' ' .. c[10] .. ' ' .. nzs
        o = o + 1
        out[o] = nzs
        -- The key expires once every quota's bucket is full again.
        local m = math.floor((nz * c[3] / c[2] - c[7]) / 1000) + 2
        if m > ms then ms = m end
      end
      local value = table.concat(parts, ' ', 1, count)
      if fixed then
        redis.call('SET', KEYS[k], value)
      else
        redis.call('SET', KEYS[k], value, 'PX', int(ms))
      end
    else
      for _ = 1, count do
        o = o + 1
        out[o] = ''
      end
    end
  end
  return out
end
if multi then
  local stored = {}
  if prev then
    stored = L.triples(prev)
    if stored == nil then return {'bad', sf('%.0f', t), 'not "<tag> <base> <state>" triples'} end
  end
  local nq = tonumber(ARGV[2])
  local admit = true
  local quotas, shown = {}, {}
  for i = 1, nq do
    local o = 4 + 5 * (i - 1)
    tag, a, b = ARGV[o + 1], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
    bu, scale = tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5])
    base_at()
    local ok, z, sh = true, nil, ''
    local tr = L.pick(stored, i)
    if tr then ok, z, sh = L.load(tr[1], tr[2], tr[3], nil) end
    if not ok then return {'bad', sf('%.0f', t), z} end
    if z ~= nil and z + cost * scale > ef + bu then admit = false end
    quotas[i] = {tag, a, b, scale, n, r, ec, z}
    shown[i] = sh
  end
  local out = {'0', sf('%.0f', t)}
  -- A cost of 0 is a read: admitted whatever the states.
  if admit or cost == 0 then out[1] = '1' end
  for i = 1, nq do out[2 + i] = shown[i] end
  if cost == 0 or not admit then
    -- A read (admitted, for a snapshot) or a refusal: nothing written.
    for i = 1, nq do out[2 + nq + i] = '' end
    out[3 + 2 * nq] = '0'
    return out
  end
  local parts, ms = {}, 0
  for i = 1, nq do
    local q = quotas[i]
    local base = q[7]
    if q[8] ~= nil and q[8] > base then base = q[8] end
    local nz = base + cost * q[4]
    parts[i] = q[1] .. ' ' .. sf('%.0f', q[5]) .. ' ' .. sf('%.0f', nz)
    out[2 + nq + i] = sf('%.0f', nz)
    -- The key expires once every quota's bucket is full again.
    local m = math.floor((nz * q[3] / q[2] - q[6]) / 1000) + 2
    if m > ms then ms = m end
  end
  local v = table.concat(parts, ' ')
  if fixed then
    redis.call('SET', KEYS[1], v)
  else
    redis.call('SET', KEYS[1], v, 'PX', sf('%.0f', ms))
  end
  out[3 + 2 * nq] = sf('%.0f', cost)
  return out
end
local shown = prev or ''
local z = nil
if prev then
  if hot then
    -- `load` inlined for a state under this quota's tag (checked above).
    local d = n - psn
    if d >= 0 then
      local da = d * a
      if da < pz then z = pz - da end
    else
      -- The clock stepped back past a base: the state moves up (exact while below 2^53; above,
      -- it is far beyond ef + bu and only ever refused).
      z = pz - d * a
    end
    if z ~= nil and z <= ef then z = nil end
  else
    local raw = prev
    if not ptag then
      -- A policy's value (several triples) read under one quota: the triple `pick` chooses.
      local stored = L.triples(prev)
      if stored == nil then return {'bad', sf('%.0f', t), 'not "<tag> <base> <state>"'} end
      local tr = L.pick(stored, 1)
      ptag, sn, sz, raw = tr[1], tr[2], tr[3], nil
    end
    local ok
    ok, z, shown = L.load(ptag, sn, sz, raw)
    if not ok then return {'bad', sf('%.0f', t), z} end
  end
end
local take = 0
if mode == 'acquire' then
  if z == nil or z + cost * scale <= ef + bu then take = cost end
else
  local lmax = ARGV[8] + 0
  local avail = bu
  if z ~= nil then avail = math.min(bu, ef + bu - z) end
  local whole = -1
  if avail >= 0 then whole = fdiv(avail, scale) end
  if whole >= cost then take = math.max(cost, math.min(whole, lmax)) end
end
-- The reply is one string (see the header), built by concatenation of strings the script
-- already holds: TIME's fields, the cost's argument and the value it stores.
if cost == 0 then
  -- A read (for a snapshot): admitted, nothing written.
  return '1 ' .. sec .. ' ' .. usec .. ' 0 - - ' .. shown
end
if take == 0 then
  return '0 ' .. sec .. ' ' .. usec .. ' 0 - - ' .. shown
end
local base = ec
if z ~= nil and z > ec then base = z end
local nz = base + take * scale
-- '%d' formats through a C long: exact for these integers (below 2^53), and cheaper than '%.0f'.
-- An admission leaves nz at most ef + bu + a lease, below 2^53 (see the header).
local st = sf('%d %d', n, nz)
if fixed then
  redis.call('SET', KEYS[1], tag .. ' ' .. st)
else
  -- Expire (rounded up, plus a margin for the double division) once the bucket is full again.
  local ms = math.floor((nz * b / a - r) / 1000) + 2
  redis.call('PSETEX', KEYS[1], sf('%d', ms), tag .. ' ' .. st)
end
local took = ARGV[7]
if take ~= cost then took = sf('%d', take) end
return '1 ' .. sec .. ' ' .. usec .. ' ' .. took .. ' ' .. st .. ' ' .. shown
