"""Fixtures shared by the Python suite: the programs under test.

`make test` builds them once, as the release does (static, -trimpath), and
names them in PDR_BIN and PDR_EXPORTFIXTURE, so that the suite runs the
shipped build and adds no compilation of its own. Run alone (plain pytest),
the suite builds each once per session instead.
"""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _program(tmp_path_factory, env_name, package, name):
    given = os.environ.get(env_name)
    if given:
        return given
    if shutil.which("go") is None:
        pytest.skip(f"go is not on PATH and {env_name} is not set")
    out = tmp_path_factory.mktemp("bin") / name
    subprocess.run(["go", "build", "-o", str(out), package], cwd=ROOT, check=True, timeout=900)
    return str(out)


@pytest.fixture(scope="session")
def pdrouter_bin(tmp_path_factory):
    """The pdrouter binary."""
    return _program(tmp_path_factory, "PDR_BIN", "./cmd/pdrouter", "pdrouter")


@pytest.fixture(scope="session")
def exportfixture_bin(tmp_path_factory):
    """replay/internal/exportfixture: writes an export of generated decisions."""
    return _program(tmp_path_factory, "PDR_EXPORTFIXTURE", "./replay/internal/exportfixture", "exportfixture")
