"""What a long-running reader of Slurm reads again: sprio's text, the switch tree."""

from slurm_dl.slurm.cli_backend import SprioMemo, parse_sprio

TEXT = "101|5000\n102|0\n  103|-7  \nnot a line\n"


def test_parse_sprio_reads_job_ids_and_site_factors_and_skips_other_lines() -> None:
    assert parse_sprio(TEXT) == {101: 5000, 102: 0, 103: -7}


def test_memo_gives_the_same_answer_and_a_dict_the_caller_may_change() -> None:
    memo = SprioMemo()
    first = memo.parse(TEXT)
    first[101] = 1  # the caller's copy
    assert memo.parse(str(TEXT)) == {101: 5000, 102: 0, 103: -7}
    assert memo.parse("101|6000\n") == {101: 6000}  # a changed text is read again
    assert memo.parse("") == {}


def test_switch_tree_is_reused_for_its_ttl_and_read_each_time_without_one(monkeypatch) -> None:
    import subprocess
    import time as real_time

    from slurm_dl.slurm.cli_backend import CliBackend

    calls = []
    text = "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"

    def run(self, argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, text, "")

    monkeypatch.setattr(CliBackend, "_run", run)
    clock = [1000.0]
    monkeypatch.setattr(real_time, "monotonic", lambda: clock[0])
    cached = CliBackend(topology_ttl_s=60.0)
    first = cached.topology()
    clock[0] += 59.0
    assert cached.topology() is first and len(calls) == 1
    clock[0] += 2.0
    assert cached.topology() == first and len(calls) == 2  # read again after a minute
    fresh = CliBackend()
    fresh.topology()
    fresh.topology()
    assert len(calls) == 4
