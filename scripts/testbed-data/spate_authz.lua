-- spate_authz.lua — the test bed's authorization service (experiment E3), run by a private
-- nginx (scripts/testbed up --authz). A decision point behind TLS with client certificates:
--
--   POST /authz   body = the request; answer "Permit subject=<client DN> key=<md5 of body>\n"
--                 with X-Cache: hit|miss. A response cache of exactly `cache` entries
--                 (lua-resty-lrucache, true LRU by entry count) keyed on the body: a miss
--                 spends `miss_cost_ms` of CPU (a chain of SHA-1 over the body, an iteration
--                 count calibrated once at worker start) and stores the result; a hit answers
--                 at once. With `leak_kb` > 0 every /authz request keeps that many KB in the
--                 worker for good (a memory slope for a soak).
--   GET  /stats   counters as JSON (requests, hits, misses, ...) from a shared dict
--   POST /reset   counters to zero and the cache emptied (tests; the leak is kept)
--
-- The LRU cache is per worker: nginx.conf runs exactly one worker process, so the cache
-- holds exactly `cache` entries (a shared dict evicts by memory, not by entry count).
local lrucache = require "resty.lrucache"

local ngx = ngx
local sha1_bin, md5 = ngx.sha1_bin, ngx.md5
local floor, fmt, srep, clock = math.floor, string.format, string.rep, os.clock

local _M = {}

local cfg          -- { cache = N, miss_cost_ms = X, leak_kb = K, run_dir = DIR }
local cache        -- the worker's LRU: md5(body) -> true
local miss_iters = 1
local iters_per_ms = 0
local leak, leak_n = {}, 0 -- never freed: --authz-leak
local stats = ngx.shared.authz_stats

function _M.init(c) -- init_by_lua: the master reads the bed's choices
    cfg = c
end

local function spin(h, n) -- n rounds of SHA-1 over the previous digest
    for _ = 1, n do h = sha1_bin(h) end
    return h
end

local function calibrate() -- SHA-1 rounds per ms of this worker's CPU time (os.clock)
    local n, h, t0 = 0, "spate calibration", clock()
    local dt = 0
    for _ = 1, 20000 do -- bounded: at most 20 000 * 1000 rounds
        h = spin(h, 1000)
        n = n + 1000
        dt = clock() - t0
        if dt >= 0.1 then break end
    end
    if dt <= 0 then dt = 1e-6 end
    return n / (dt * 1000)
end

local function write_file(path, text)
    local f = io.open(path, "w")
    if f then f:write(text); f:close() end
end

function _M.init_worker() -- init_worker_by_lua: the cache, the calibration, the PID file
    cache = assert(lrucache.new(cfg.cache))
    iters_per_ms = calibrate()
    miss_iters = math.max(1, floor(iters_per_ms * cfg.miss_cost_ms + 0.5))
    stats:set("miss_iterations", miss_iters)
    stats:set("iterations_per_ms", floor(iters_per_ms))
    stats:set("worker_pid", ngx.worker.pid())
    write_file(cfg.run_dir .. "/worker.pid", ngx.worker.pid() .. "\n")
    write_file(cfg.run_dir .. "/calibration", fmt(
        "iterations_per_ms=%d miss_iterations=%d miss_cost_ms=%s worker_pid=%d\n",
        floor(iters_per_ms), miss_iters, tostring(cfg.miss_cost_ms), ngx.worker.pid()))
    ngx.log(ngx.NOTICE, "spate authz: worker ", ngx.worker.pid(), " cache ", cfg.cache,
        " entries, miss = ", miss_iters, " SHA-1 rounds (", floor(iters_per_ms), "/ms, ",
        cfg.miss_cost_ms, " ms), leak ", cfg.leak_kb, " KB/request")
end

local function read_body()
    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    if body then return body end
    local file = ngx.req.get_body_file() -- a body larger than client_body_buffer_size
    if not file then return "" end
    local f = io.open(file, "rb")
    if not f then return "" end
    body = f:read("*a") or ""
    f:close()
    return body
end

local function reply(ctype, text) -- with a Content-Length: no chunked encoding to undo
    ngx.header["Content-Type"] = ctype
    ngx.header["Content-Length"] = #text
    ngx.print(text)
end

function _M.authz()
    if ngx.req.get_method() ~= "POST" then
        ngx.header["Allow"] = "POST"
        return ngx.exit(405)
    end
    local body = read_body()
    stats:incr("requests", 1, 0)
    local key = md5(body)
    local state
    if cache:get(key) then
        stats:incr("hits", 1, 0)
        state = "hit"
    else
        spin(sha1_bin(body), miss_iters) -- the decision's real cost
        cache:set(key, true)
        stats:incr("misses", 1, 0)
        state = "miss"
    end
    if cfg.leak_kb > 0 then
        leak_n = leak_n + 1
        -- a distinct string per request (LuaJIT interns equal strings)
        leak[leak_n] = srep("L", cfg.leak_kb * 1024 - 12) .. fmt("%12d", leak_n)
        stats:incr("leaked_kb", cfg.leak_kb, 0)
    end
    ngx.header["X-Cache"] = state
    reply("text/plain", "Permit subject=" .. (ngx.var.ssl_client_s_dn or "-") .. " key=" .. key .. "\n")
end

local COUNTERS = { "requests", "hits", "misses", "leaked_kb" }

function _M.stats()
    local parts = {}
    for _, k in ipairs(COUNTERS) do
        parts[#parts + 1] = fmt('"%s":%d', k, stats:get(k) or 0)
    end
    parts[#parts + 1] = fmt('"cache_capacity":%d', cfg.cache)
    parts[#parts + 1] = fmt('"cache_items":%d', cache and cache:count() or 0)
    parts[#parts + 1] = fmt('"miss_cost_ms":%s', tostring(cfg.miss_cost_ms))
    parts[#parts + 1] = fmt('"miss_iterations":%d', miss_iters)
    parts[#parts + 1] = fmt('"iterations_per_ms":%d', floor(iters_per_ms))
    parts[#parts + 1] = fmt('"leak_kb":%d', cfg.leak_kb)
    parts[#parts + 1] = fmt('"worker_pid":%d', ngx.worker.pid())
    reply("application/json", "{" .. table.concat(parts, ",") .. "}\n")
end

function _M.reset()
    if ngx.req.get_method() ~= "POST" then
        ngx.header["Allow"] = "POST"
        return ngx.exit(405)
    end
    for _, k in ipairs({ "requests", "hits", "misses" }) do stats:set(k, 0) end
    cache:flush_all()
    reply("text/plain", "reset\n")
end

return _M
