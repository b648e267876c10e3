#!/bin/sh
# Make sure the tools the dashboard and graph tests drive are installed: a headless Chromium
# (Debian's chromium, plus chromium-driver for WebDriver clients) and Graphviz's `dot`.
# Installs the missing ones with apt-get (as root, or through sudo).  Exits non-zero with a hint
# when it cannot.
set -eu

missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v chromedriver >/dev/null 2>&1 || missing="$missing chromium-driver"
command -v dot >/dev/null 2>&1 || missing="$missing graphviz"
[ -z "$missing" ] && exit 0

echo "ensure-browser: missing:$missing" >&2
# shellcheck disable=SC2086 # one word per package
sh "$(dirname "$0")/apt-install.sh" ensure-browser $missing
for tool in chromium chromedriver dot; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "ensure-browser: installed, but \`$tool\` is still not on PATH" >&2
        exit 1
    fi
done
