#!/usr/bin/env bash
# A three-broker Logbus cluster on this machine, without Docker: a standalone ZooKeeper
# (Debian's package, `make zookeeper`) and brokers 1..3 on ports 8081..8083.
# Logs and data go under $CLUSTER_DIR (./cluster-data). Ctrl-C stops everything cleanly.
set -euo pipefail

DIR=${CLUSTER_DIR:-./cluster-data}
ZK_PORT=${ZK_PORT:-2181}
HOST=${HOST:-127.0.0.1}
LOGBUS=${LOGBUS:-.venv/bin/logbus}
CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar
for jar in /usr/share/java/slf4j-log4j12.jar /usr/share/java/log4j-1.2.jar; do
  [ -e "$jar" ] && CLASSPATH=$CLASSPATH:$jar
done

mkdir -p "$DIR/zookeeper"
brokers=()
zookeeper=""
stop() {
  trap - EXIT INT TERM
  # Brokers first (SIGTERM: a clean stop that closes their sessions), ZooKeeper last.
  kill "${brokers[@]}" 2>/dev/null || true
  wait "${brokers[@]}" 2>/dev/null || true
  [ -n "$zookeeper" ] && kill "$zookeeper" 2>/dev/null || true
  wait
}
trap stop EXIT INT TERM

java -cp "$CLASSPATH" -Dzookeeper.admin.enableServer=false \
  org.apache.zookeeper.server.ZooKeeperServerMain "$ZK_PORT" "$DIR/zookeeper" \
  >"$DIR/zookeeper.log" 2>&1 &
zookeeper=$!

for id in 1 2 3; do
  "$LOGBUS" serve --broker-id "$id" --host "$HOST" --port "808$id" \
    --data-dir "$DIR/broker$id" --zookeeper "$HOST:$ZK_PORT/logbus" \
    >"$DIR/broker$id.log" 2>&1 &
  brokers+=($!)
done

echo "ZooKeeper on $HOST:$ZK_PORT; brokers 1..3 on http://$HOST:8081..8083 (logs in $DIR)"
echo "Ctrl-C stops them."
wait
