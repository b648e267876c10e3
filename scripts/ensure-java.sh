#!/bin/sh
# Make sure a Java 17+ runtime is available for Spark 4 (pyspark 4.3.0).
# If `java` is missing or older than 17, install openjdk-17-jre-headless with apt-get (as root, or
# through sudo).  Exits non-zero with a hint when it cannot.
set -eu

java_major() {
    java -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\)\(\.[0-9]*\)\{0,1\}.*/\1/p' | head -n 1
}

if command -v java >/dev/null 2>&1; then
    major=$(java_major)
    if [ -n "$major" ] && [ "$major" -ge 17 ]; then
        exit 0
    fi
    echo "ensure-java: found Java ${major:-of unknown version}; Spark 4 needs 17 or newer" >&2
else
    echo "ensure-java: no java on PATH; Spark 4 needs Java 17 or newer" >&2
fi

sh "$(dirname "$0")/apt-install.sh" ensure-java openjdk-17-jre-headless
major=$(java_major)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    echo "ensure-java: installed, but \`java\` on PATH is still not 17+ (check update-alternatives)" >&2
    exit 1
fi
