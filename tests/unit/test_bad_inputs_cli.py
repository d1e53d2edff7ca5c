"""Bad input ends as one `error:` line naming the option, file or line, and a non-zero exit."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from slurm_dl.cli.main import app

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "site-configs" / "testbed.toml"
runner = CliRunner()


def one_error(result, *words: str) -> None:
    out = result.output.strip()
    assert result.exit_code != 0 and "Traceback" not in out, out
    assert out.startswith("error:") and len(out.splitlines()) == 1, out
    assert all(w in out for w in words), out


def test_explain_with_a_job_id_beyond_slurms_range(tmp_path) -> None:
    r = runner.invoke(
        app,
        [
            "explain",
            "99999999999999999999",
            "--config",
            str(CONFIG),
            "--db",
            f"sqlite:///{tmp_path / 'x.db'}",
            "--no-live",
        ],
    )
    one_error(r, "JOBID", "4294967293")


def test_non_utf8_params_file_names_the_line(tmp_path) -> None:
    from slurm_dl.dlsubmit.cli import app as dlsubmit_app

    bad = tmp_path / "params.txt"
    bad.write_bytes(b"lr=1\nlr=\xff\n")
    r = runner.invoke(
        dlsubmit_app,
        [
            "sweep",
            "--config",
            str(CONFIG),
            "--dry-run",
            "--params-file",
            str(bad),
            "--",
            "python",
            "x.py",
        ],
    )
    one_error(r, "--params-file", "line 2", "not UTF-8")


def test_filter_check_refuses_what_sbatch_refuses() -> None:
    for args, word in (
        (["-n", "0"], "-n"),
        (["--gpus-per-socket=2"], "--sockets-per-node"),
        (["-c", "0"], "-c"),
    ):
        one_error(
            runner.invoke(app, ["filter", "check", "--config", str(CONFIG), "--", *args]), word
        )
