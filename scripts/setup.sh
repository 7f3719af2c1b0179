#!/usr/bin/env bash
# Sets up a fresh machine for kprio: Java 17 and Maven, one editable install of everything (every extra), then the
# Java artifacts resolved once into ~/.cache/kprio (Apache Kafka for the embedded broker, Spark's
# Kafka connector for the native reader, Apicurio Registry built for the embedded schema registry) and
# the class-data archive a local Spark driver JVM maps to start in about 4 s instead of 6.5 (about 25 s
# to build, once); later runs use the cache.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
    echo "kprio setup: java not found, installing Debian's openjdk-17-jre-headless" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless
fi
if ! command -v mvn >/dev/null 2>&1; then
    echo "kprio setup: mvn not found, installing Debian's maven" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven
fi

python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[all,browser,test]'
# kprio's own bytecode, once (an editable install compiles nothing, and where PYTHONDONTWRITEBYTECODE is set no
# process writes it): each of the hundreds of Python processes a drain, the daemon and the tests start would
# otherwise compile the same sources again.
python3 -m compileall -q -j 0 kprio_core spark_jobs orchestration tests >/dev/null
python3 -m orchestration.services.jars
# The embedded schema registry (Apicurio Registry, with basic auth) built into a runnable application: 10-50 s once
# Maven has its jars (about 210 MB the first time).
python3 -m orchestration.services.registry_build
# Not fatal: without the archive a local Spark session starts as it would anyway, only slower.
python3 -m spark_jobs.write_class_archive || echo "kprio setup: no class-data archive for the Spark driver (sessions start without one)" >&2
