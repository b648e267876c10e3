#!/bin/sh
# The light install, checked for real: build the wheel, install it WITHOUT extras into a fresh
# virtual environment (a plain venv: no system site-packages), and check that pytimely imports,
# runs a dataflow, prints its version, loads no optional package, and that Spark names its extra.
# Prints the size of the environment's site-packages; with --extras, installs pytimely[spark,plot]
# into a second fresh venv and prints its size too.
#   sh scripts/check-light-install.sh [--extras]        (make check-install)
set -eu
PY=${PY:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir "$work/src"
cp -r "$here/pyproject.toml" "$here/setup.py" "$here/README.md" "$here/pytimely" "$work/src/"
find "$work/src/pytimely" -name __pycache__ -prune -exec rm -rf {} +
find "$work/src/pytimely" -name '*.so' -exec rm -f {} +   # the wheel compiles its own
"$PY" -m pip wheel -q --no-deps -w "$work/dist" "$work/src" >/dev/null
wheel=$(ls "$work"/dist/pytimely-*.whl)

site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

"$PY" -m venv "$work/core"
"$work/core/bin/pip" install -q "$wheel"
cd "$work"   # not a source tree: the installed package is the one imported
"$work/core/bin/python" - <<'PYCODE'
import sys
import pytimely as pt
assert pt.__file__.find("site-packages") > 0, pt.__file__
out = pt.example(lambda s: s.to_stream(range(4)).map(lambda x: x * x).capture()).extract()
assert out == [(0, [0, 1, 4, 9])], out
loaded = [m for m in ("pyspark", "pandas", "matplotlib", "tqdm") if m in sys.modules]
assert not loaded, loaded
try:
    import pytimely.spark  # noqa: F401
except ImportError as exc:
    assert "pip install 'pytimely[spark]'" in str(exc), exc
else:
    raise AssertionError("pytimely.spark imported without pyspark")
PYCODE
"$work/core/bin/pytimely" --version
"$work/core/bin/pip" list --format=freeze | sed 's/^/  /'
echo "without extras: $(du -sh "$(site "$work/core")" | cut -f1) site-packages"

if [ "${1:-}" = "--extras" ]; then
    "$PY" -m venv "$work/full"
    "$work/full/bin/pip" install -q "$wheel[spark,plot]"
    "$work/full/bin/python" -c "import pytimely.spark, pytimely.nexmark.latency"
    echo "with [spark,plot]: $(du -sh "$(site "$work/full")" | cut -f1) site-packages"
fi
echo "light install: ok"
