"""The ``coda`` command line never passes silently or on stale state.

Each test here failed on the CLI before the fix it covers (CHANGELOG, "Fixed"): Ctrl-C exiting 1
instead of 130, ``verify`` checking an old build of an edited spec, an empty folder building
nothing with exit 0, folder scans reading ``.venv``/``.git``, ``--prune`` deleting builds of
another config or file, ``bench``/``tune`` asking for a GPU before looking at their targets, and
the smaller ones (``--print-dir``, ``-o FILE``, ``-j 0``, ``--version``, ``verify --format``).

Ctrl-C is sent as a real SIGINT to a real ``python -m coda_spec.cli`` process. The process is
made to wait on a FIFO named as its spec file: it blocks reading the spec, and the test knows it
got there when the FIFO's write end opens (a non-blocking open succeeds only once a reader has
it open); a process whose signal a torch thread took is woken by closing the FIFO. No GPU and
no compiler are needed (the compile case below
waits for the "compiling" line instead, and needs the [build] extra).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from coda_spec import artifact, cli
from coda_spec.errors import EXIT_INTERRUPTED, EXIT_INVALID_SPEC, EXIT_NO_GPU, EXIT_OK
from tests.conftest import ROOT, needs_build

F8 = ROOT / "specs" / "f8_scale.yaml"


def _run(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


def _env() -> dict:
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )


def _as_from_a_terminal() -> None:
    """The child's SIGINT as a shell gives it (a test session may have left it ignored, and an
    ignored signal is inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _popen(cmd, cwd):
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )


# -- Ctrl-C ------------------------------------------------------------------------------------


def _wait_for_reader(fifo: Path, proc, timeout: float = 120.0) -> int:
    """Open ``fifo``'s write end once ``proc`` has it open for reading; return the fd."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"coda exited {proc.returncode} before reading the spec: {out}{err}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("coda never opened its spec file")


@pytest.mark.parametrize("command", ["check", "build", "verify", "bench", "tune"])
def test_ctrl_c_exits_130_from_every_command(command, tmp_path):
    """A SIGINT while the command waits (reading its spec from a FIFO) exits 130, says
    'interrupted', and prints no traceback and no click 'Aborted!'."""
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    extra = {"verify": ["--allow-no-gpu"], "build": ["-o", str(tmp_path / "out")]}
    cmd = [sys.executable, "-m", "coda_spec.cli", command, str(fifo), *extra.get(command, [])]
    proc = _popen(cmd, tmp_path)
    fd = _wait_for_reader(fifo, proc)
    proc.send_signal(signal.SIGINT)
    try:
        # A process with threads (torch's) may take the signal on another thread: the main one
        # then stays in read() until the FIFO ends, and raises at its next bytecode.
        out, err = proc.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        os.close(fd)
        fd = None
        out, err = proc.communicate(timeout=60)
    finally:
        if fd is not None:
            os.close(fd)
    assert proc.returncode == EXIT_INTERRUPTED, out + err
    assert "interrupted" in err
    assert "Traceback" not in err and "Aborted!" not in err, err


@needs_build
def test_ctrl_c_during_compile_exits_130_and_leaves_no_build(tmp_path):
    """A SIGINT while the compile workers run: exit 130, the workers stopped, nothing left under
    the build root (no .tmp-, no .failed, no build directory)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "coda_spec.cli", "build", str(F8), "-o", str(out), "-j", "1"]
    proc = _popen(cmd, ROOT)
    for line in proc.stdout:  # the marker: the workers are being started
        if ": compiling " in line:
            break
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, rest + err
    assert "Traceback" not in err and "Aborted!" not in err, err
    assert list(out.iterdir()) == []


# -- stale builds ------------------------------------------------------------------------------


def _fake_build(out: Path, spec: Path) -> Path:
    """``out/<name>-<hash>`` with a manifest as coda build writes it (nothing compiled), and
    ``out/<name>-latest`` pointing at it."""
    from coda_spec.check.frontend import check_file
    from tests.test_verify_cpu import fake_manifest

    checked = check_file(spec)
    d = out / f"{checked.spec.name}-000000000000"
    d.mkdir(parents=True)
    shutil.copy(spec, d / "spec.yaml")
    artifact.write_manifest(d, fake_manifest(checked))
    (out / f"{checked.spec.name}-latest").symlink_to(d.name)
    return d


def _edited(tmp_path: Path) -> Path:
    spec = tmp_path / "f8.yaml"
    spec.write_text(F8.read_text())
    _fake_build(tmp_path / "build", spec)
    spec.write_text(F8.read_text().replace("0.08838834764831845, as: y", "0.125, as: y"))
    return spec


def test_verify_refuses_a_build_older_than_its_spec(tmp_path, monkeypatch):
    spec = _edited(tmp_path)
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _run("verify", "--allow-no-gpu", "-o", tmp_path / "build", spec)
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert "coda build" in res.output and "differs" in res.output
    assert "REFERENCE ONLY" not in res.output  # nothing was checked in its place


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_bench_and_tune_refuse_a_build_older_than_its_spec(command, tmp_path, monkeypatch):
    spec = _edited(tmp_path)
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = _run(command, "--builds", tmp_path / "build", spec)
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert "coda build" in res.output and "differs" in res.output


def test_a_current_build_is_still_verified(tmp_path, monkeypatch):
    spec = tmp_path / "f8.yaml"
    spec.write_text(F8.read_text())
    _fake_build(tmp_path / "build", spec)
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _run("verify", "--allow-no-gpu", "--builds", tmp_path / "build", spec)
    assert res.exit_code == EXIT_OK, res.output


# -- targets -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "build", "verify", "bench", "tune"])
def test_an_empty_folder_is_an_error_naming_it(command, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = _run(command, empty)
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert f"{empty}" in res.output and "error" in res.output


def _tree(root: Path) -> None:
    """One spec at the top; a broken YAML file in each folder a scan must skip."""
    (root / "ok.yaml").write_text(F8.read_text())
    bad = "coda: 1\nname: [\n"
    for sub in (".git", ".venv", "venv", "env", "node_modules", "lib/site-packages", "drafts"):
        (root / sub).mkdir(parents=True)
        (root / sub / "x.yaml").write_text(bad)
    (root / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / "drafts" / "wip.yaml").write_text(bad)


def test_folder_scans_skip_hidden_folders_and_virtual_environments(tmp_path):
    _tree(tmp_path)
    res = _run("check", tmp_path, "--exclude", "drafts")
    assert res.exit_code == EXIT_OK, res.output
    assert "1 spec(s): 1 valid" in res.output
    res = _run("check", tmp_path)  # without --exclude, drafts/ is scanned
    assert res.exit_code == EXIT_INVALID_SPEC
    assert "drafts" in res.output and ".venv" not in res.output and ".git" not in res.output


def test_exclude_takes_globs_and_repeats(tmp_path):
    _tree(tmp_path)
    res = _run("check", tmp_path, "--exclude", "drafts/x.yaml", "--exclude", "*wip*")
    assert res.exit_code == EXIT_OK, res.output
    res = _run("build", tmp_path, "--exclude", "drafts", "--exclude", "ok.yaml")
    assert res.exit_code == EXIT_INVALID_SPEC, res.output  # nothing left: an error
    assert "no spec files" in res.output


# -- prune -------------------------------------------------------------------------------------


def _lower(*args, out: Path):
    return _run("build", "--stop-after", "lower", "-o", out, *args)


def _builds(out: Path) -> list[str]:
    return sorted(d.name for d in out.iterdir() if d.is_dir() and not d.is_symlink())


def test_prune_keeps_builds_of_another_config(tmp_path):
    out = tmp_path / "out"
    assert _lower(F8, "--config", "auto", out=out).exit_code == 0
    auto = _builds(out)
    res = _lower(F8, "--prune", out=out)
    assert res.exit_code == 0, res.output
    assert set(auto) < set(_builds(out)), res.output  # the auto build is still there
    assert "pruned" not in res.output


def test_prune_keeps_builds_of_another_file_with_the_same_name(tmp_path):
    out = tmp_path / "out"
    other = tmp_path / "other.yaml"
    other.write_text(F8.read_text().replace("D: 4096", "D: 2048"))
    assert _lower(other, out=out).exit_code == 0
    first = _builds(out)
    assert _lower(F8, "--prune", out=out).exit_code == 0
    assert set(first) < set(_builds(out))
    # a rebuild of the same file and config at other content is pruned
    other.write_text(F8.read_text().replace("D: 4096", "D: 1024"))
    res = _lower(other, "--prune", out=out)
    assert res.exit_code == 0, res.output
    assert f"pruned {out / first[0]}" in res.output
    assert len(_builds(out)) == 2


def test_two_files_with_one_name_in_one_build_are_refused(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(F8.read_text().replace("D: 4096", "D: 2048"))
    res = _lower(F8, other, out=tmp_path / "out")
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert f"{other}:2:7: error: name: " in res.output
    assert "f8_scale-latest" in res.output


# -- bench and tune check their targets before the GPU -----------------------------------------


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_a_typo_in_a_target_is_reported_without_a_gpu(command, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _run(command, tmp_path / "specs" / "f8_scael.yaml")
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert "f8_scael.yaml" in res.output


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_good_targets_without_a_gpu_still_exit_4(command, tmp_path, monkeypatch):
    spec = tmp_path / "f8.yaml"
    spec.write_text(F8.read_text())
    _fake_build(tmp_path / "build", spec)
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _run(command, "--builds", tmp_path / "build", spec)
    assert res.exit_code == EXIT_NO_GPU, res.output


# -- the smaller ones --------------------------------------------------------------------------


def test_print_dir_prints_only_the_directory(tmp_path):
    res = CliRunner().invoke(
        cli.main,
        ["build", "--print-dir", "--stop-after", "lower", "-o", str(tmp_path), str(F8)],
    )
    assert res.exit_code == 0, res.output
    (line,) = res.stdout.splitlines()
    assert Path(line).parent == tmp_path and Path(line).name.startswith("f8_scale-")


def test_out_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    res = _lower(F8, out=f)
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert "internal error" not in res.output
    assert f"{f}" in res.output and "not a directory" in res.output


@pytest.mark.parametrize("jobs", ["0", "-1"])
def test_jobs_must_be_positive(jobs, tmp_path):
    res = _lower(F8, "-j", jobs, out=tmp_path)
    assert res.exit_code == 2, res.output
    assert "-j" in res.output and not list(tmp_path.iterdir())


def test_verify_format_has_help():
    res = _run("verify", "--help")
    flat = " ".join(res.output.split())
    assert "--format [text|json] text" in flat and "JUnit" in flat


def test_version_names_the_stack():
    res = _run("--version")
    assert res.exit_code == 0
    for dist in ("quack-kernels", "nvidia-cutlass-dsl", "torch", "triton"):
        assert dist in res.output, res.output


def test_help_texts_quote_the_exit_code_table():
    from coda_spec.errors import EXIT_CODES

    for command in ("check", "build", "verify", "bench", "tune"):
        flat = " ".join(_run(command, "--help").output.split())
        shown = [e for e in EXIT_CODES if f"{e.code} {e.short}" in flat]
        assert shown, f"coda {command} --help names no row of EXIT_CODES"


def test_every_command_takes_builds_as_the_build_root():
    for command in ("build", "verify", "bench", "tune"):
        assert "--builds" in _run(command, "--help").output, command


def test_plot_writes_into_out(tmp_path):
    pytest.importorskip("matplotlib")
    from tests.test_bench_cpu import _results

    _, path = _results(tmp_path)
    res = _run("bench", "--plot", path, "--out", tmp_path / "charts")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "charts" / "rmsnorm_chain.png").is_file()
    assert not (tmp_path / "rmsnorm_chain.png").exists()


def test_bench_liger_without_the_catalogue_says_where_before_the_gpu(tmp_path, monkeypatch):
    from coda_spec.bench import baselines as B

    spec = tmp_path / "f8.yaml"
    spec.write_text(F8.read_text())
    _fake_build(tmp_path / "build", spec)
    monkeypatch.delitem(sys.modules, B.CATALOGUE, raising=False)
    monkeypatch.setenv(B.CATALOGUE_ENV, str(tmp_path / "nowhere"))
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _run("bench", "--baselines", "liger", "--builds", tmp_path / "build", spec)
    assert res.exit_code == 1, res.output
    assert "benchmarks/baselines/" in res.output and "source checkout" in res.output


@pytest.mark.parametrize("force", [False, True], ids=["cached", "force"])
def test_force_replaces_a_complete_build(tmp_path, force):
    """``coda build --force`` publishes the build it made; without it, a complete build of the
    same content already there (a concurrent one) is kept. (--force used to build and then throw
    its result away, keeping the old directory.)"""
    from coda_spec.artifact import builddir

    final, tmp = tmp_path / "f2-0123456789ab", tmp_path / "f2.tmp-1"
    for d, text in ((final, "old"), (tmp, "new")):
        d.mkdir()
        (d / "manifest.json").write_text(text)
    builddir.publish(tmp, final, replace=force)
    assert (final / "manifest.json").read_text() == ("new" if force else "old")
    assert sorted(p.name for p in tmp_path.iterdir()) == [final.name]


def test_primitives_says_where_each_lowers():
    """``coda primitives`` gives, per primitive, where it lowers (issue 22 item 3): the same
    fact docs/spec-language.md's "Lowers in:" lines give (``Primitive.lowers_in``)."""
    got = CliRunner().invoke(cli.main, ["primitives"])
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    where = {
        lines[i].split()[1]: lines[i + 2].strip()
        for i in range(0, len(lines), 3)
        if lines[i + 2].strip().startswith("lowers in: ")
    }
    assert len(where) == len(lines) // 3
    assert (
        where["onehot"] == "lowers in: GEMM epilogues (not in packed_pair kernels) and host steps"
    )
    assert where["prepass"] == "lowers in: GEMM epilogues"  # it needs the row before the pass
    assert where["reduce_col"] == "lowers in: GEMM epilogues and host steps"
