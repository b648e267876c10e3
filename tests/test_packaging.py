"""The light install: the core distribution requires numpy and pyarrow only, ``import pytimely``
loads no optional dependency, and a feature whose extra is missing names the extra to install.

The full check in a fresh virtual environment (no system site-packages) is
``scripts/check-light-install.sh`` (``make check-install``); these tests check the same promises
in seconds, from the built wheel's metadata and from subprocesses that hide the optional
packages.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import pytimely

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONAL = ("pyspark", "pandas", "matplotlib", "tqdm")


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _hiding(modules: tuple[str, ...]) -> str:
    """Code that makes ``modules`` unimportable in this process, as if not installed
    (``sys.modules[name] = None`` makes ``import`` raise and ``find_spec`` return None)."""
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


@pytest.fixture(scope="module")
def wheel_metadata(tmp_path_factory) -> email.message.Message:
    """The METADATA of a wheel built from this checkout (sources copied out first, so the
    build leaves nothing in the tree)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src)
    shutil.copytree(
        os.path.join(ROOT, "pytimely"),
        src / "pytimely",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),  # the wheel compiles its own
    )
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = dist.glob("pytimely-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert not [n for n in names if n.startswith(("bench/", "tests/", "examples/"))]
        # The optional extension is built where a compiler is (this machine has one).
        assert [n for n in names if n.startswith("pytimely/_speedups.") and n.endswith(".so")]
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(zf.read(meta))


def _requirements(meta: email.message.Message) -> dict[str | None, list[str]]:
    """``Requires-Dist`` by extra (None: the core), each as ``name[spec]`` without the marker."""
    out: dict[str | None, list[str]] = {}
    for req in meta.get_all("Requires-Dist") or []:
        spec, _, marker = req.partition(";")
        extra = marker.split("extra ==")[1].strip().strip("'\"") if "extra ==" in marker else None
        out.setdefault(extra, []).append(spec.strip().replace(" ", ""))
    return out


def test_core_requires_numpy_and_pyarrow_only(wheel_metadata):
    reqs = _requirements(wheel_metadata)
    assert sorted(r.split(">")[0].split("=")[0] for r in reqs[None]) == ["numpy", "pyarrow"]
    assert wheel_metadata["Version"] == pytimely.__version__


def test_extras_bring_spark_as_a_range_plots_and_tools(wheel_metadata):
    reqs = _requirements(wheel_metadata)
    (pyspark,) = [r for r in reqs["spark"] if r.startswith("pyspark")]
    assert "==" not in pyspark and "<" in pyspark and ">=" in pyspark  # a range, never a pin
    assert any(r.startswith("pandas") for r in reqs["spark"])
    assert any(r.startswith("matplotlib") for r in reqs["plot"])
    for tool in ("pytest", "pytest-timeout", "hypothesis", "ruff", "mypy"):
        assert any(r.split(">")[0] == tool for r in reqs["dev"]), tool
    assert any(r.startswith("pytimely[") for r in reqs["all"])


def test_import_pytimely_loads_no_optional_dependency():
    done = _python(
        "import sys, pytimely, pytimely.capture, pytimely.cli\n"
        f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_core_dataflow_runs_without_the_optional_packages():
    done = _python(
        _hiding(OPTIONAL)
        + (
            "import pytimely as pt\n"
            "print(pt.example(lambda s: s.to_stream(range(4)).map(lambda x: x * x).capture())"
            ".extract())"
        )
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(0, [0, 1, 4, 9])]"


def test_spark_without_its_extra_names_the_extra():
    done = _python(
        _hiding(("pyspark",))
        + (
            "try:\n"
            "    import pytimely.spark\n"
            "except ImportError as exc:\n"
            "    print(type(exc).__name__, exc)\n"
        )
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingExtraError pytimely.spark needs pyspark")
    assert "pip install 'pytimely[spark]'" in done.stdout


def test_plot_without_its_extra_names_the_extra(tmp_path):
    done = _python(
        _hiding(("matplotlib",))
        + (
            "from pytimely.nexmark import latency\n"
            "try:\n"
            f"    latency.plot([], {str(tmp_path / 'x.png')!r})\n"
            "except ImportError as exc:\n"
            "    print(exc)\n"
        )
    )
    assert done.returncode == 0, done.stderr
    assert "needs matplotlib" in done.stdout
    assert "pip install 'pytimely[plot]'" in done.stdout


def test_demo_command_without_spark_says_which_extra():
    done = _python(
        _hiding(("pyspark",)) + ("from pytimely.cli import main\nsys.exit(main(['demo']))\n")
    )
    assert done.returncode == 2
    assert "pip install 'pytimely[spark]'" in done.stderr


@pytest.mark.parametrize("module", ["pytimely.cli", "pytimely"])
def test_version_flag_prints_the_package_version(module):
    done = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout.startswith(f"pytimely {pytimely.__version__} (exchange: ")
