-- slurm-dl's cli_filter (cli_filter/lua, Lua 5.1). It runs inside sbatch and
-- salloc on the submit host and holds no policy: it tells the job_submit
-- filter the job's own --signal, which job_submit.lua cannot read (Slurm 22.05
-- to 26.05 give it no warn_signal/warn_time/warn_flags). sbatch's final
-- options, the command line over the script's #SBATCH lines as Slurm takes
-- them, go into the job's comment as dl:signal=VALUE (e.g.
-- dl:signal=B:USR2@60), replacing any dl:signal= already there. A job without
-- --signal is left as it is.
--
-- Install: save this file as cli_filter.lua next to slurm.conf on every host
-- users submit from, and add CliFilterPlugins=cli_filter/lua to that
-- slurm.conf.

local function effective_signal(options)
    local value = options["signal"]
    -- [{R|B}:]NAME[@SECONDS], @60 left out; unset: "0" (22.05), "0@0" (24.11)
    if type(value) ~= "string" then return nil end
    local name = value:match("^[RB]*:?(%w+)@?%d*$")
    if name == nil or name == "0" then return nil end
    return value
end

local function without_signal_hint(comment)
    local out = comment:gsub("dl:signal=[^%s,;]*", "")
    out = out:gsub(";signal=[^%s,;]*", "")
    out = out:gsub("%s+$", ""):gsub("^%s+", "")
    return out
end

function slurm_cli_setup_defaults(options, early)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
    local kind = options["type"]
    if kind ~= "sbatch" and kind ~= "salloc" then return slurm.SUCCESS end
    local value = effective_signal(options)
    if value == nil then return slurm.SUCCESS end
    local comment = without_signal_hint(options["comment"] or "")
    if comment ~= "" then comment = comment .. " " end
    options["comment"] = comment .. "dl:signal=" .. value
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
    return slurm.SUCCESS
end
