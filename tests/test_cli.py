"""The command line. The README's main job, short version: train LeNet-5 on 20,000 MNIST images for one epoch
on Spark, then reload the saved model with `sparkdl evaluate` and get the same accuracy. And a new user's
mistakes: every argument checked before Spark starts, one line per error, runs that never overwrite."""
import argparse
import json
import os
import subprocess
import sys

import pytest

import sparkdl
from sparkdl import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(args, cwd, timeout=900):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "sparkdl.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _run(args, cwd):
    out = _cli([*args, "--json"], cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mnist_cached):
    cwd = tmp_path_factory.mktemp("cli")
    result, stderr = _run(["train", "--model", "lenet5", "--dataset", "mnist", "--limit", "20000", "--epochs", "1",
                   "--batch-size", "128", "--lr", "0.003", "--warmup-epochs", "0", "--master", "local[2]",
                   "--output", str(cwd / "run"), "--no-progress"], cwd)
    return cwd, result, stderr


@pytest.mark.slow
def test_train_short_mnist_reaches_95_percent(trained):
    cwd, result, _ = trained
    assert result["test_accuracy"] >= 0.95
    assert result["epochs"] == 1
    assert result["samples_per_s"] > 0
    assert (cwd / "run" / "model" / "metadata.json").exists()
    assert (cwd / "run" / "checkpoints" / "latest").exists()
    assert any((cwd / "run" / "tensorboard").iterdir())


@pytest.mark.slow
def test_evaluate_reloaded_model_gives_same_accuracy(trained):
    cwd, result, _ = trained
    again, _ = _run(["evaluate", "--model", result["model_path"], "--dataset", "mnist", "--master", "local[2]"], cwd)
    assert again["test_accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-12)
    assert again["test_loss"] == pytest.approx(result["test_loss"], rel=1e-5)


@pytest.mark.slow
def test_training_log_has_no_spark_alarms(trained):
    _, _, stderr = trained
    assert "task of very large size" not in stderr
    assert "Traceback" not in stderr and " INFO " not in stderr


@pytest.mark.slow
def test_second_run_into_the_same_directory_refuses_before_spark(trained):
    cwd, _, _ = trained
    out = _cli(["train", "--model", "lenet5", "--output", str(cwd / "run"), "--epochs", "1"], cwd, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"sparkdl train: error: {cwd / 'run'} already holds a run; start a new one with --output {cwd / 'run'}-2, "
        "continue it with --resume, or replace it with --overwrite"]
    assert (cwd / "run" / "model" / "metadata.json").exists()  # untouched


@pytest.mark.slow
def test_resume_refuses_a_run_with_other_settings(trained):
    cwd, _, _ = trained
    out = _cli(["train", "--model", "lenet5", "--output", str(cwd / "run"), "--resume", "--limit", "20000",
                "--epochs", "2", "--batch-size", "128", "--lr", "0.003", "--warmup-epochs", "0"], cwd, timeout=300)
    assert out.returncode == 2
    assert "--epochs 1 there, 2 now" in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "argument --batch-size: expected an integer >= 1, got 0"),
    (["--batch-size", "x"], "argument --batch-size: expected an integer >= 1, got 'x'"),
    (["--epochs", "0"], "argument --epochs: expected an integer >= 1, got 0"),
    (["--lr", "0"], "argument --lr: expected a finite number > 0, got '0'"),
    (["--lr", "nan"], "argument --lr: expected a finite number > 0, got 'nan'"),
    (["--warmup-epochs", "-1"], "argument --warmup-epochs: expected a finite number >= 0, got '-1'"),
    (["--limit", "0"], "argument --limit: expected an integer >= 1, got 0"),
    (["--partitions", "0"], "argument --partitions: expected an integer >= 1, got 0"),
    (["--seed", "-1"], "argument --seed: expected an integer >= 0, got -1"),
    (["--master", "local[two]"], "argument --master: expected a Spark master URL"),
    (["--data-source", "/nonexistent/dir"], "argument --data-source: '/nonexistent/dir' is not a directory"),
    (["--resume", "--overwrite"], "argument --overwrite: not allowed with argument --resume"),
])
def test_bad_arguments_are_one_line_errors(capsys, args, message):
    with pytest.raises(SystemExit) as info:
        cli.build_parser().parse_args(["train", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sparkdl train: error: {message}") and err.endswith("(see `sparkdl train --help`)\n")
    assert len(err.splitlines()) == 1


def test_bad_argument_end_to_end_is_one_line_without_spark(tmp_path):
    out = _cli(["train", "--batch-size", "0"], tmp_path, timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == ["sparkdl train: error: argument --batch-size: expected an integer >= 1, got 0 "
                                       "(see `sparkdl train --help`)"]
    assert not (tmp_path / "runs").exists()


def test_help_shows_defaults_and_every_option_has_help(capsys):
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    expected = {"train": "--batch-size BATCH_SIZE global mini-batch size (default: 512)",
                "evaluate": "--batch-size BATCH_SIZE rows per forward pass (default: 1024)"}
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.option_strings)
        with pytest.raises(SystemExit):
            sub.parse_args(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert expected[name] in text, text


def test_version(tmp_path):
    out = _cli(["--version"], tmp_path, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == f"sparkdl {sparkdl.__version__}"


def test_evaluate_missing_model_is_one_line(tmp_path):
    out = _cli(["evaluate", "--model", str(tmp_path / "nothing")], tmp_path, timeout=300)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "not a model saved by `sparkdl train`" in out.stderr and "Traceback" not in out.stderr


def test_corrupt_model_file_is_one_line_error(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "metadata.json").write_text("{not json")
    out = _cli(["evaluate", "--model", str(tmp_path / "m")], tmp_path, timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("sparkdl evaluate: error: ") and len(out.stderr.strip().splitlines()) == 1


def _args(tmp_path, *extra):
    return cli.build_parser().parse_args(["train", "--output", str(tmp_path / "r"), *extra])


def test_run_directory_never_overwritten(tmp_path):
    out = cli.prepare_run_directory(_args(tmp_path))
    saved = json.loads((tmp_path / "r" / "run.json").read_text())
    assert saved["settings"]["batch_size"] == 512 and saved["sparkdl"] == sparkdl.__version__
    (tmp_path / "r" / "model").mkdir()
    (tmp_path / "r" / "notes.txt").write_text("mine")
    with pytest.raises(cli.UsageError, match="--overwrite"):
        cli.prepare_run_directory(_args(tmp_path))
    assert cli.prepare_run_directory(_args(tmp_path, "--overwrite", "--epochs", "3")) == out
    assert not (tmp_path / "r" / "model").exists()
    assert (tmp_path / "r" / "notes.txt").read_text() == "mine"  # only the run's own entries are removed
    assert json.loads((tmp_path / "r" / "run.json").read_text())["settings"]["epochs"] == 3


def test_overwrite_refuses_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "thesis.tex").write_text("x")
    with pytest.raises(cli.UsageError, match="not a sparkdl run"):
        cli.prepare_run_directory(_args(tmp_path, "--overwrite"))
    assert (tmp_path / "r" / "thesis.tex").exists()


def test_resume_only_the_same_run(tmp_path):
    with pytest.raises(cli.UsageError, match="holds no sparkdl run"):
        cli.prepare_run_directory(_args(tmp_path, "--resume"))
    cli.prepare_run_directory(_args(tmp_path, "--lr", "0.01"))
    with pytest.raises(cli.UsageError, match="no checkpoint yet"):
        cli.prepare_run_directory(_args(tmp_path, "--resume", "--lr", "0.01"))
    (tmp_path / "r" / "checkpoints").mkdir()
    (tmp_path / "r" / "checkpoints" / "latest").write_text("ckpt-1")
    with pytest.raises(cli.UsageError, match="--lr 0.01 there, 0.004 now"):
        cli.prepare_run_directory(_args(tmp_path, "--resume"))
    assert cli.prepare_run_directory(_args(tmp_path, "--resume", "--lr", "0.01", "--partitions", "3")) == \
        os.path.normpath(str(tmp_path / "r"))
