-- slurm-dl job_submit shim (Lua 5.1, loaded by slurmctld from the directory of slurm.conf).
-- Written by `slurm-dl filter install`; holds no policy. It sends the job description as one
-- JSON line to the slurm-dl filter service over a Unix socket, then applies the field changes
-- the service returns, or rejects the job with the service's message. When the service is
-- down, slow or answers garbage, it follows the failure mode below and logs one line.

local SOCKET_PATH = "@SOCKET_PATH@"
local TIMEOUT_S = @TIMEOUT_S@
local FAILURE_MODE = "@FAILURE_MODE@"   -- "accept": job goes in unchanged; "reject": job is refused
local ADMIN_UIDS = { @ADMIN_UIDS@ }     -- may change anything after submission (root, SlurmUser)

local have_unix, unix = pcall(require, "socket.unix")
local have_socket, socket = pcall(require, "socket")
local have_json, cjson = pcall(require, "cjson")

-- Fields sent to the service (what the rules read).
local READ_FIELDS = {
    "account", "admin_comment", "array_inx", "comment", "cpus_per_tres", "mem_per_tres",
    "min_nodes", "max_nodes", "name", "partition", "req_switch", "wait4switch", "requeue",
    "time_limit", "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task",
    "user_id", "user_name", "qos", "num_tasks", "ntasks_per_node", "sockets_per_node", "cpus_per_task",
    "min_cpus", "pn_min_cpus", "min_mem_per_node", "min_mem_per_cpu", "shared",
}
-- Fields the service may change, and their Lua type.
local WRITABLE = {
    admin_comment = "string", tres_per_node = "string", tres_per_job = "string",
    partition = "string", time_limit = "number", min_nodes = "number", max_nodes = "number",
    req_switch = "number", wait4switch = "number", requeue = "number",
}

local function now()
    if have_socket and socket.gettime then return socket.gettime() end
    return os.time()
end

local function on_failure(why)
    slurm.log_info("slurm-dl filter: %s; failure mode %s", tostring(why), FAILURE_MODE)
    if FAILURE_MODE == "reject" then
        slurm.log_user("%s", "slurm-dl: the job filter is unavailable (" .. why .. "); try again shortly")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

local function ask(line)
    local conn = unix()
    local deadline = now() + TIMEOUT_S
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
    if not answer then return nil, "no answer within " .. TIMEOUT_S .. " s: " .. tostring(err) end
    return answer
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    if not (have_unix and have_json) then
        return on_failure("lua-socket or lua-cjson is missing")
    end
    local job = {}
    for _, k in ipairs(READ_FIELDS) do
        local v = job_desc[k]
        if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then job[k] = v end
    end
    job.has_script = job_desc.script ~= nil
    local ok, line = pcall(cjson.encode, { v = 1, submit_uid = submit_uid, job = job })
    if not ok then return on_failure("cannot encode the job: " .. tostring(line)) end
    local answer, err = ask(line .. "\n")
    if not answer then return on_failure(err) end
    local decoded, reply = pcall(cjson.decode, answer)
    if not decoded or type(reply) ~= "table" then return on_failure("unreadable answer") end
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
        return slurm.SUCCESS
    end
    return on_failure("answer without a known action")
end

-- What the filter decided at submission (GPU shape, nodes, switch wait, partition): a user who
-- changed it afterwards (`scontrol update JobId=N TresPerJob=...`) would skip its checks and keep
-- tags that no longer match. Admins may; users cancel and resubmit. (22.05 shows no message to
-- the user from here: the refusal and its reason go to slurmctld's log.)
local GUARDED = {
    "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task", "min_nodes", "max_nodes",
    "req_switch", "wait4switch", "partition",
}
local UNSET = { [4294967294] = true, [4294967295] = true }

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    for _, uid in ipairs(ADMIN_UIDS) do
        if modify_uid == uid then return slurm.SUCCESS end
    end
    for _, f in ipairs(GUARDED) do
        local v = job_desc[f]
        if v ~= nil and not (type(v) == "number" and UNSET[v]) then
            slurm.log_info("slurm-dl filter: uid %d may not change %s of job %s after submission (%s); "
                .. "cancel and resubmit", modify_uid, f, tostring(job_rec and job_rec.job_id), tostring(v))
            return slurm.ESLURM_ACCESS_DENIED
        end
    end
    return slurm.SUCCESS
end
