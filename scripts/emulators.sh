#!/usr/bin/env bash
# Starts and stops the local Kinesis (kinesalite) and DynamoDB (dynalite) servers that the
# integration tests, the demo and the benchmarks run against. Both listen on 127.0.0.1 only.
#
#   scripts/emulators.sh up     install (if needed) and start both, wait until they answer
#   scripts/emulators.sh down   stop exactly the processes that "up" started
#   scripts/emulators.sh env    print the environment variables that point the AWS SDK at them
#
# Ports: KINESUB_KINESIS_PORT (default 4567) and KINESUB_DYNAMODB_PORT (default 4568).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
testenv="$root/testenv"
kport=${KINESUB_KINESIS_PORT:-4567}
dport=${KINESUB_DYNAMODB_PORT:-4568}
# One directory of pid files and logs per pair of ports, so that servers started on other ports
# from the same checkout (a make demo beside a make test) are never stopped by this one's down.
run="$testenv/.run/$kport-$dport"

die() { echo "emulators: $*" >&2; exit 1; }

install() {
  command -v node >/dev/null || die "node is not installed (Node.js 18 or newer is needed)"
  command -v npm >/dev/null || die "npm is not installed"
  # node_modules is reinstalled whenever the lock file differs from the one it was installed
  # from (a stamp of its checksum): npm itself may touch its own copy without installing.
  local want stamp="$testenv/node_modules/.kinesub-lock-sum"
  want=$(cksum <"$testenv/package-lock.json")
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    (cd "$testenv" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
      die "npm ci failed in $testenv"
    echo "$want" >"$stamp"
  fi
}

# wait_ready NAME URL PIDFILE LOG: poll URL until it answers with any HTTP status.
wait_ready() {
  local name=$1 url=$2 pidfile=$3 log=$4 i
  for i in $(seq 1 200); do
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "emulators: $name exited; its log:" >&2
      cat "$log" >&2 || true
      exit 1
    fi
    if node -e 'require("http").get(process.argv[1], () => process.exit(0)).on("error", () => process.exit(1)).setTimeout(1000, () => process.exit(1))' "$url" 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  echo "emulators: $name did not answer at $url within 10s; its log:" >&2
  cat "$log" >&2 || true
  exit 1
}

port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

up() {
  install
  mkdir -p "$run"
  if [ -f "$run/kinesalite.pid" ] || [ -f "$run/dynalite.pid" ]; then
    down
  fi
  port_free "$kport" || die "port $kport is taken (set KINESUB_KINESIS_PORT)"
  port_free "$dport" || die "port $dport is taken (set KINESUB_DYNAMODB_PORT)"
  (cd "$testenv" && exec node kinesalite.js "$kport") >"$run/kinesalite.log" 2>&1 &
  echo $! >"$run/kinesalite.pid"
  (cd "$testenv" && exec node dynalite.js "$dport") >"$run/dynalite.log" 2>&1 &
  echo $! >"$run/dynalite.pid"
  wait_ready kinesalite "http://127.0.0.1:$kport/" "$run/kinesalite.pid" "$run/kinesalite.log"
  wait_ready dynalite "http://127.0.0.1:$dport/" "$run/dynalite.pid" "$run/dynalite.log"
  echo "emulators: kinesalite on 127.0.0.1:$kport, dynalite on 127.0.0.1:$dport"
}

stop_pid() {
  local pidfile=$1 pid i
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

down() {
  stop_pid "$run/kinesalite.pid"
  stop_pid "$run/dynalite.pid"
}

env_vars() {
  cat <<EOV
export AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:$kport
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$dport
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=local
export AWS_SECRET_ACCESS_KEY=local
EOV
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) env_vars ;;
  *) die "usage: $0 up|down|env" ;;
esac
