#!/usr/bin/env bash
# Sets up a fresh machine for kprio: Java 17 for Spark, then one editable install of everything.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
    echo "kprio setup: java not found, installing Debian's openjdk-17-jre-headless" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless
fi

python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[browser,test]'
