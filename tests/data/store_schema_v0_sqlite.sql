-- The prioritizer store's tables as slurm-dl created them before schema versions (SQLite),
-- captured from a database made by that release: the starting point of the upgrade test.
CREATE TABLE sdl_ledger (
	id INTEGER NOT NULL, 
	data VARCHAR NOT NULL, 
	saved_at FLOAT NOT NULL, 
	cycle INTEGER NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE sdl_site_factor (
	job_id INTEGER NOT NULL, 
	value INTEGER NOT NULL, 
	pushed_at FLOAT NOT NULL, 
	PRIMARY KEY (job_id)
);
CREATE TABLE sdl_preemption (
	id INTEGER NOT NULL, 
	victim_job_id INTEGER NOT NULL, 
	need_job_id INTEGER NOT NULL, 
	state VARCHAR NOT NULL, 
	signalled_at FLOAT NOT NULL, 
	restarts_at_signal INTEGER NOT NULL, 
	updated_at FLOAT NOT NULL, 
	reason VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_sdl_preemption_victim_job_id ON sdl_preemption (victim_job_id);
CREATE INDEX ix_sdl_preemption_need_job_id ON sdl_preemption (need_job_id);
CREATE TABLE sdl_decision (
	id INTEGER NOT NULL, 
	at FLOAT NOT NULL, 
	job_id INTEGER NOT NULL, 
	kind VARCHAR NOT NULL, 
	value INTEGER, 
	reason VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_sdl_decision_job_id ON sdl_decision (job_id);
CREATE TABLE sdl_explanations (
	id INTEGER NOT NULL, 
	at FLOAT NOT NULL, 
	data VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE sdl_job_utilisation (
	job_id INTEGER NOT NULL, 
	samples INTEGER NOT NULL, 
	util_sum FLOAT NOT NULL, 
	peak_util_percent FLOAT NOT NULL, 
	peak_gpu_mem_bytes INTEGER NOT NULL, 
	first_sample_at FLOAT, 
	last_sample_at FLOAT, 
	last_busy_at FLOAT, 
	idle_since FLOAT, 
	verdict VARCHAR NOT NULL, 
	warned_at FLOAT, 
	action VARCHAR, 
	action_at FLOAT, 
	updated_at FLOAT NOT NULL, 
	gpu_seen VARCHAR NOT NULL, 
	PRIMARY KEY (job_id)
);
CREATE INDEX ix_sdl_job_utilisation_updated_at ON sdl_job_utilisation (updated_at);
