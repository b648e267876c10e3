#!/bin/sh
# Install Debian packages with apt-get, as root or through sudo: `apt-install.sh WHO PKG...`.
# WHO prefixes the messages (the script that asks).  Exits non-zero with a hint when it cannot
# (no apt-get, neither root nor sudo).  The ensure-*.sh scripts call it for what is missing.
set -eu

who=$1
shift
if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: no apt-get here; install $* and put them on PATH" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "$who: not root and no sudo; run: apt-get install -y $*" >&2
    exit 1
fi
echo "$who: installing $* ..." >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
