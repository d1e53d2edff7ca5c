-- slurm-dl job_submit shim (Lua 5.1, loaded by slurmctld from the directory of slurm.conf).
-- Written by `slurm-dl filter install`; holds no policy. It sends the job description as one
-- JSON line to the slurm-dl filter service over a Unix socket, then applies the field changes
-- the service returns, or rejects the job with the service's message. When the service is
-- down, slow or answers garbage, it follows the failure mode below and logs one line.

local SOCKET_PATH = "@SOCKET_PATH@"
local TIMEOUT_S = @TIMEOUT_S@
local FAILURE_MODE = "@FAILURE_MODE@"   -- "accept": job goes in unchanged; "reject": job is refused
local ADMIN_UIDS = { @ADMIN_UIDS@ }     -- may change anything after submission (root, SlurmUser,
                                        -- [prioritizer] user: its GPU-type moves)
-- Circuit breaker: after BREAKER_FAILURES failed asks in a row the shim stops asking for
-- BREAKER_COOLDOWN_S seconds (each job then follows the failure mode at once instead of waiting
-- up to the timeout under slurmctld's job lock), then lets one job through as a probe.
local BREAKER_FAILURES = @BREAKER_FAILURES@
local BREAKER_COOLDOWN_S = @BREAKER_COOLDOWN_S@
-- Time-limit increases by users after submission: "class_max" refuses one past the tagged class's
-- maximum, "any" refuses every increase, "off" leaves them to Slurm (which allows a pending job's
-- owner to raise it up to the partition's limit).
local TIME_GUARD = "@TIME_GUARD@"
-- The site's own job_submit.lua, chained by `slurm-dl filter install` ("" when there was none):
-- it runs first, in its own environment; a rejection by either script stands. slurmctld re-reads
-- only this file, so after editing the site script touch this one.
local SITE_SCRIPT = "@SITE_SCRIPT@"
local CLASS_MAX_MIN = { @CLASS_MAX_MIN@ }
local PART_MAX_MIN = { @PART_MAX_MIN@ }   -- the site config's partition maxima (minutes)

local have_unix, unix = pcall(require, "socket.unix")
local have_socket, socket = pcall(require, "socket")
local have_json, cjson = pcall(require, "cjson")

-- Fields sent to the service (what the rules read).
local READ_FIELDS = {
    "account", "admin_comment", "array_inx", "comment", "cpus_per_tres", "mem_per_tres",
    "min_nodes", "max_nodes", "name", "partition", "req_switch", "wait4switch", "requeue",
    "time_limit", "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task",
    "user_id", "user_name", "qos", "num_tasks", "ntasks_per_node", "sockets_per_node", "cpus_per_task",
    "min_cpus", "pn_min_cpus", "min_mem_per_node", "min_mem_per_cpu", "shared", "default_account", "default_qos",
    "ntasks_per_tres", "het_job_offset", "features",
}
-- Fields the service may change, and their Lua type.
local WRITABLE = {
    admin_comment = "string", tres_per_node = "string", tres_per_job = "string",
    partition = "string", time_limit = "number", min_nodes = "number", max_nodes = "number",
    req_switch = "number", wait4switch = "number", requeue = "number", features = "string",
}

local function now()
    if have_socket and socket.gettime then return socket.gettime() end
    return os.time()
end

-- Health kept between calls: slurmctld keeps this chunk loaded until the file changes.
local breaker = { failures = 0, open_until = 0, skipped = 0 }
-- Submissions that got no answer since the last answered one (breaker skips included): the
-- count rides on the next request and shows in the service's metrics.
local unreported_failures = 0
-- A heterogeneous job's components reach this hook one after another under one lock; the ones
-- after the first get the class the filter gave the first (its tag rides on their requests).
local het_leader = nil   -- { uid = submit uid, tag = the first component's admin_comment }
local NO_VAL = 4294967294
local SCRIPT_HEAD = 65536   -- bytes of the batch script sent along (its directives and traps)

local function on_failure(why, quiet)
    unreported_failures = unreported_failures + 1
    if not quiet then
        slurm.log_info("slurm-dl filter: %s; failure mode %s", tostring(why), FAILURE_MODE)
    end
    if FAILURE_MODE == "reject" then
        slurm.log_user("%s", "slurm-dl: the job filter is unavailable (" .. why .. "); try again shortly")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

-- After a failure, until the breaker opens, asks wait a tenth of the timeout: a healthy service
-- answers in about a millisecond, and every wait here holds slurmctld's job lock. The breaker's
-- probe (one job per cool-down) waits the whole timeout: on a busy controller a service just
-- restarted may need tens of milliseconds, and a probe cut shorter would keep the breaker open,
-- every job going by the filter, for as long as the controller stays busy.
local SUSPECT_TIMEOUT_S = math.max(TIMEOUT_S / 10, 0.005)

local function ask(line)
    local conn = unix()
    local limit = TIMEOUT_S
    if breaker.failures > 0 and breaker.failures < BREAKER_FAILURES then limit = SUSPECT_TIMEOUT_S end
    local deadline = now() + limit
    local function left() local s = deadline - now(); if s < 0.001 then s = 0.001 end; return s end
    conn:settimeout(left())
    local ok, err = conn:connect(SOCKET_PATH)
    if not ok then conn:close(); return nil, "cannot connect to " .. SOCKET_PATH .. ": " .. tostring(err) end
    conn:settimeout(left())
    ok, err = conn:send(line)
    if not ok then conn:close(); return nil, "send failed: " .. tostring(err) end
    conn:settimeout(left())
    local answer
    answer, err = conn:receive("*l")
    conn:close()
    if not answer then return nil, "no answer within " .. limit .. " s: " .. tostring(err) end
    return answer
end

local function service_failed(why)
    breaker.failures = breaker.failures + 1
    if breaker.failures >= BREAKER_FAILURES then
        breaker.open_until = now() + BREAKER_COOLDOWN_S
        slurm.log_info("slurm-dl filter: %d failures in a row; not asking the service for %.1f s",
            breaker.failures, BREAKER_COOLDOWN_S)
    end
    return on_failure(why)
end

local function service_answered()
    if breaker.failures >= BREAKER_FAILURES then
        slurm.log_info("slurm-dl filter: the service answers again; %d job(s) went by it meanwhile",
            breaker.skipped)
    end
    breaker.failures, breaker.skipped = 0, 0
end

local function own_submit(job_desc, part_list, submit_uid)
    if not (have_unix and have_json) then
        return on_failure("lua-socket or lua-cjson is missing")
    end
    if breaker.open_until > 0 and now() < breaker.open_until then
        breaker.skipped = breaker.skipped + 1
        return on_failure("service skipped (circuit open)", true)
    end
    local job = {}
    for _, k in ipairs(READ_FIELDS) do
        local v = job_desc[k]
        if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then job[k] = v end
    end
    job.has_script = job_desc.script ~= nil
    -- The script's head: its #SBATCH --signal and whether it traps that signal (job_submit.lua
    -- shows no job's --signal itself).
    if type(job_desc.script) == "string" then job.script_head = string.sub(job_desc.script, 1, SCRIPT_HEAD) end
    local offset = job.het_job_offset
    local component = type(offset) == "number" and offset > 0 and offset < NO_VAL
    if not component then het_leader = nil end
    if component and het_leader ~= nil and het_leader.uid == submit_uid then
        job.het_leader_tag = het_leader.tag
    end
    local msg = { v = 1, submit_uid = submit_uid, job = job }
    local reporting = unreported_failures
    if reporting > 0 then
        msg.shim_failures = reporting
        msg.failure_mode = FAILURE_MODE
    end
    local ok, line = pcall(cjson.encode, msg)
    if not ok then  -- this job's own values: refused, never let through unchecked
        slurm.log_info("slurm-dl filter: cannot encode a job of uid %s: %s", tostring(submit_uid), tostring(line))
        slurm.log_user("%s", "slurm-dl: the job filter could not read this job's options; it was not submitted")
        return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
    end
    local answer, err = ask(line .. "\n")
    if not answer then return service_failed(err) end
    local decoded, reply = pcall(cjson.decode, answer)
    -- Only a service that cannot be reached or does not answer in time opens the breaker: an
    -- answer it could not make for one job (whatever that job holds) says nothing of the next.
    if not decoded or type(reply) ~= "table" then return on_failure("unreadable answer") end
    if reply.action == "reject" or reply.action == "accept" then
        service_answered()
        unreported_failures = unreported_failures - reporting  -- the service has counted them
    end
    if reply.action == "reject" then
        local msg = reply.message
        if type(msg) ~= "string" or msg == "" then msg = "slurm-dl: job rejected by the site filter" end
        slurm.log_user("%s", msg)
        local code = reply.code
        if type(code) == "string" then code = slurm[code] end
        if type(code) ~= "number" then code = slurm.ERROR end
        return code
    elseif reply.action == "accept" then
        if type(reply.set) == "table" then
            for k, v in pairs(reply.set) do
                if WRITABLE[k] ~= nil and type(v) == WRITABLE[k] then job_desc[k] = v end
            end
        end
        if type(reply.notices) == "table" then
            for _, n in ipairs(reply.notices) do
                if type(n) == "string" then slurm.log_user("%s", n) end
            end
        end
        if offset == 0 then het_leader = { uid = submit_uid, tag = job_desc.admin_comment } end
        return slurm.SUCCESS
    end
    local detail = ""
    if type(reply.message) == "string" and reply.message ~= "" then detail = ": " .. reply.message end
    if reply.message == "busy" then return service_failed("the service is busy") end
    return on_failure("answer without a known action" .. detail)
end

-- What the filter decided at submission (GPU shape, nodes, switch wait, partition, CPUs and
-- memory): a user who changed it afterwards (`scontrol update JobId=N TresPerJob=...`) would skip
-- its checks and keep tags that no longer match. Admins may; users cancel and resubmit. (22.05
-- shows no message to the user from here: the refusal and its reason go to slurmctld's log.)
local GUARDED = {
    "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task", "min_nodes", "max_nodes",
    "req_switch", "wait4switch", "partition", "num_tasks", "ntasks_per_node", "sockets_per_node",
    "cpus_per_task", "pn_min_cpus", "min_mem_per_node", "min_mem_per_cpu", "cpus_per_tres", "mem_per_tres",
    "account", "qos", "features",
}
local UNSET = { [4294967294] = true, [4294967295] = true, [65534] = true, [65535] = true }

local function is_set(v)
    return v ~= nil and not (type(v) == "number" and UNSET[v])
end

local function tag_value(admin_comment, key)
    if type(admin_comment) ~= "string" or admin_comment:sub(1, 5) ~= "sdl1:" then return nil end
    return admin_comment:match("[:;]" .. key .. "=([^;]+)")
end

local function hint(comment, key)
    if type(comment) ~= "string" then return nil end
    return comment:match("dl:" .. key .. "=([^%s,;]+)")
end

-- The most minutes a user may set: the smaller of the tagged class's and the partition's
-- maxima (the filter held the job to both at submission), and which one it is.
local function time_maximum(job_desc, job_rec, admin_comment)
    local most = CLASS_MAX_MIN[tag_value(admin_comment, "class") or ""]
    local what = "class maximum"
    local parts = job_rec.partition
    if type(parts) ~= "string" then parts = job_desc.partition end
    if type(parts) == "string" then
        for name in parts:gmatch("[^,]+") do
            local p = PART_MAX_MIN[name]
            if p ~= nil and (most == nil or p < most) then most, what = p, "partition " .. name .. " maximum" end
        end
    end
    return most, what
end

-- Why this change may not be made by a user (nil when it may).
local function refused(job_desc, job_rec)
    for _, f in ipairs(GUARDED) do
        if is_set(job_desc[f]) then return f, tostring(job_desc[f]), slurm.ESLURM_ACCESS_DENIED end
    end
    local shared = job_desc.shared
    if type(shared) == "number" and shared ~= 1 and not UNSET[shared] then
        return "shared", "exclusive", slurm.ESLURM_ACCESS_DENIED
    end
    local cpus = job_desc.min_cpus
    if is_set(cpus) and type(job_rec.min_cpus) == "number" and cpus > job_rec.min_cpus then
        return "min_cpus", tostring(cpus), slurm.ESLURM_ACCESS_DENIED
    end
    local admin_comment = job_rec.admin_comment
    local t = job_desc.time_limit
    if TIME_GUARD ~= "off" and type(t) == "number" and t ~= NO_VAL then
        local old = job_rec.time_limit
        if type(old) ~= "number" or t > old then
            local most, what = time_maximum(job_desc, job_rec, admin_comment)
            if TIME_GUARD == "any" or (most ~= nil and t > most) then
                return "time_limit", tostring(t) .. " min (" .. what .. " " .. tostring(most) .. ")",
                    slurm.ESLURM_INVALID_TIME_LIMIT
            end
        end
    end
    if is_set(job_desc.requeue) and job_desc.requeue == 0 and tag_value(admin_comment, "ckpt") == "1" then
        return "requeue", "0 (the job is checkpointable)", slurm.ESLURM_ACCESS_DENIED
    end
    if job_desc.comment ~= nil then
        for _, key in ipairs({ "class", "deadline", "ckpt", "signal" }) do
            if hint(job_desc.comment, key) ~= hint(job_rec.comment, key) then
                return "comment", "dl:" .. key .. " hint", slurm.ESLURM_ACCESS_DENIED
            end
        end
    end
    return nil
end

local function own_modify(job_desc, job_rec, part_list, modify_uid)
    for _, uid in ipairs(ADMIN_UIDS) do
        if modify_uid == uid then return slurm.SUCCESS end
    end
    local field, value, code = refused(job_desc, job_rec or {})
    if field ~= nil then
        slurm.log_info("slurm-dl filter: uid %d may not change %s of job %s after submission (%s); "
            .. "cancel and resubmit", modify_uid, field, tostring(job_rec and job_rec.job_id), value)
        return code or slurm.ESLURM_ACCESS_DENIED
    end
    return slurm.SUCCESS
end

-- Chaining the site's script: loaded once (into its own table, so its functions and globals do
-- not meet ours), called before our decision.
local site_env, site_failed = nil, nil

local function load_site()
    if site_env ~= nil or site_failed ~= nil then return site_env end
    local chunk, err = loadfile(SITE_SCRIPT)
    if chunk then
        local env = setmetatable({}, { __index = _G })
        setfenv(chunk, env)
        local ok, run_err = pcall(chunk)
        if ok then site_env = env; return env end
        err = run_err
    end
    site_failed = tostring(err)
    slurm.log_error("slurm-dl filter: cannot load the site script %s: %s", SITE_SCRIPT, site_failed)
    return nil
end

local function site_decides(name, ...)
    if SITE_SCRIPT == "" then return slurm.SUCCESS end
    local env = load_site()
    if env == nil then
        slurm.log_user("%s", "slurm-dl: the site's job submission rules could not be loaded; "
            .. "please tell the administrators")
        return slurm.ERROR
    end
    local f = rawget(env, name)
    if type(f) ~= "function" then return slurm.SUCCESS end
    local ok, rc = pcall(f, ...)
    if not ok then
        slurm.log_error("slurm-dl filter: the site script's %s failed: %s", name, tostring(rc))
        return slurm.ERROR
    end
    if rc == nil then return slurm.SUCCESS end
    return rc
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local rc = site_decides("slurm_job_submit", job_desc, part_list, submit_uid)
    if rc ~= slurm.SUCCESS then return rc end
    return own_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    local rc = site_decides("slurm_job_modify", job_desc, job_rec, part_list, modify_uid)
    if rc ~= slurm.SUCCESS then return rc end
    return own_modify(job_desc, job_rec, part_list, modify_uid)
end
