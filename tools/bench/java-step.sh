#!/bin/sh
# Java's NameServer for a curve step: `scale.py --curve --compare 'java=tools/bench/java-step.sh {compat} {topics} {port} {data_dir}'`.
# usage: java-step.sh COMPAT TOPICS PORT DATA_DIR   with RMQ_HOME_498 and RMQ_HOME_533 set (RocketMQ
# 4.9.8's and 5.3.3's homes, each with lib/ and conf/logback_namesrv.xml: the reference rig's).
# Picks the generation by COMPAT and the heap by TOPICS: 512 MiB, 4 GiB (Java's own start script's)
# from 1M topics, which 512 MiB cannot hold. Runs java-namesrv.sh (Java binds every interface: run
# the curve inside a loopback-only network namespace).
set -eu
case "$1" in
  4.9.8) home="${RMQ_HOME_498:?set RMQ_HOME_498 to RocketMQ 4.9.8 home}" ;;
  5.3.3) home="${RMQ_HOME_533:?set RMQ_HOME_533 to RocketMQ 5.3.3 home}" ;;
  *) echo "java-step.sh: unknown generation $1" >&2; exit 2 ;;
esac
heap=512m
[ "$2" -ge 1000000 ] && heap=4g
RMQ_LIB="$home/lib" ROCKETMQ_HOME="$home" JAVA_HEAP="$heap" exec "$(dirname "$0")/java-namesrv.sh" "$3" "$4"
