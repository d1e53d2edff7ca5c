"""sprio's text, read once per distinct text: what the prioritizer reads every cycle."""

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
