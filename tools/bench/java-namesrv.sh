#!/bin/sh
# Java RocketMQ NameServer for `run.py --server-cmd "tools/bench/java-namesrv.sh {port} {data_dir}"`.
# usage: java-namesrv.sh PORT DATA_DIR   with RMQ_LIB (the distribution's lib/ with its jars) and
# ROCKETMQ_HOME (its home, holding conf/logback_namesrv.xml) set. State and logs go to DATA_DIR.
# JAVA_HEAP (default 512m) is the maximum heap: the curve's 1M-topic step needs more (Java ships 4g).
# Java binds every interface: run the bench inside a loopback-only network namespace.
set -eu
: "${RMQ_LIB:?set RMQ_LIB to the RocketMQ lib/ directory}" "${ROCKETMQ_HOME:?set ROCKETMQ_HOME}"
export ROCKETMQ_HOME
printf 'listenPort=%s\nkvConfigPath=%s/kvConfig.json\n' "$1" "$2" > "$2/namesrv.properties"
# the reference JVM options of issue 4, plus what Java 17 needs for RocketMQ 4.9.x
exec java -server -Xms256m -Xmx"${JAVA_HEAP:-512m}" -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow \
  --add-exports java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
  --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
  --add-opens java.base/jdk.internal.misc=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED \
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED \
  --add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.net=ALL-UNNAMED \
  -Drmq.logdir="$2/logs" -Drocketmq.client.logRoot="$2/logs" -Duser.home="$2" \
  -cp "$RMQ_LIB/*" org.apache.rocketmq.namesrv.NamesrvStartup -c "$2/namesrv.properties"
