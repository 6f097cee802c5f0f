#!/usr/bin/env bash
# N `fathom serve` replicas behind nginx on loopback: the deployment shape of
# docs/DEPLOYMENT.md at the size of one machine.
#
#   scripts/replicas.sh N --model DIR [--port 8080] [--replica-port 8081] [--dir RUN_DIR]
#                         [--fathom BIN] [-- extra `fathom serve` flags]
#
# Replica i (0-based) listens on 127.0.0.1:(replica-port + i); nginx on 127.0.0.1:port sends
# each request to the replica with the fewest active connections (least_conn). Health
# checks are nginx's own, passive ones (open-source nginx has no active checks): a replica
# that refuses a connection or times out is out of the pool for fail_timeout (5 s), and a
# request that could not be sent to it at all is tried on the next replica. A request
# already sent is never re-sent (POST is not idempotent: a completion would be generated
# twice), so requests in flight on a replica that dies fail with 502 (whole) or a stream
# that ends without `data: [DONE]` (streamed). Every response names the replica that served
# it in `X-Fathom-Upstream`.
#
# Runs in the foreground until SIGINT / SIGTERM, then drains: each replica finishes its
# in-flight requests (fathom serve's SIGTERM), then nginx quits. RUN_DIR (default: a new
# directory under /tmp) holds nginx.conf, the logs (one per replica, nginx's access log
# with the upstream of each request) and replicas.env, written once everything answers:
#   FRONT_PORT=8080  REPLICA_PORTS="8081 8082"  REPLICA_PIDS="..."  NGINX_PID=...
# (tests/deploy/replica_failover_test.py reads it to kill one replica under load).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '5,7p' "$0" >&2; exit 2; }
die() { echo "replicas.sh: $*" >&2; exit 1; }

[ $# -ge 1 ] || usage
n="$1"; shift
[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number of replicas, got '$n'"
model="" port=8080 replica_port=8081 dir="" fathom=build/fathom
serve_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="${2:?--model needs DIR}"; shift 2 ;;
    --port) port="${2:?--port needs a number}"; shift 2 ;;
    --replica-port) replica_port="${2:?--replica-port needs a number}"; shift 2 ;;
    --dir) dir="${2:?--dir needs a path}"; shift 2 ;;
    --fathom) fathom="${2:?--fathom needs a path}"; shift 2 ;;
    --) shift; serve_flags=("$@"); break ;;
    *) die "unknown flag '$1'" ;;
  esac
done
[ -n "$model" ] || die "--model DIR is required"
[ -f "$model/config.json" ] || die "--model: no config.json in '$model'"
[ -x "$fathom" ] || die "no fathom binary at '$fathom' (build it: cmake --build build --target fathom)"
for p in "$port" "$replica_port"; do
  [[ "$p" =~ ^[0-9]+$ ]] && [ "$p" -ge 1 ] && [ $((p + n)) -le 65535 ] || die "bad port '$p'"
done
nginx_bin="$(command -v nginx || true)"
[ -n "$nginx_bin" ] || nginx_bin=/usr/sbin/nginx
[ -x "$nginx_bin" ] || die "nginx is not installed (Debian: apt-get install nginx)"
[ -n "$dir" ] || dir="$(mktemp -d /tmp/fathom-replicas.XXXXXX)"
mkdir -p "$dir/logs" "$dir/temp"
dir="$(cd "$dir" && pwd)"
rm -f "$dir/replicas.env"

pids=() ports=() nginx_pid=""
stop() {
  trap - EXIT INT TERM
  # Drain: replicas first (each finishes what it has accepted), then the balancer.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  [ -n "$nginx_pid" ] && { kill -QUIT "$nginx_pid" 2> /dev/null || true; wait "$nginx_pid" 2> /dev/null || true; }
  rm -f "$dir/replicas.env"
}
trap stop EXIT
trap 'exit 0' INT TERM

for ((i = 0; i < n; i++)); do
  p=$((replica_port + i))
  "$fathom" serve --model "$model" --host 127.0.0.1 --port "$p" "${serve_flags[@]}" \
    > "$dir/logs/replica-$i.log" 2>&1 &
  pids+=("$!"); ports+=("$p")
done

upstreams=""
for p in "${ports[@]}"; do upstreams+="    server 127.0.0.1:$p max_fails=1 fail_timeout=5s;"$'\n'; done
user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user $(id -un);"   # workers keep the run dir's owner
cat > "$dir/nginx.conf" << EOF
# Written by scripts/replicas.sh; see docs/DEPLOYMENT.md.
$user_line
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/logs/nginx-error.log warn;
events { worker_connections 4096; }
http {
  log_format upstream '\$remote_addr "\$request" \$status upstream=\$upstream_addr '
                      'upstream_status=\$upstream_status time=\$request_time';
  access_log $dir/logs/nginx-access.log upstream;
  client_body_temp_path $dir/temp/body;
  proxy_temp_path $dir/temp/proxy;
  fastcgi_temp_path $dir/temp/fastcgi;
  uwsgi_temp_path $dir/temp/uwsgi;
  scgi_temp_path $dir/temp/scgi;
  client_max_body_size 16m;
  upstream fathom {
    least_conn;
$upstreams    keepalive 64;
  }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://fathom;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      # Server-sent events pass through as they are generated.
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
      # Retried on another replica only when the request never reached this one
      # (connection refused or reset before sending): nginx does not re-send a POST
      # without non_idempotent, which is what we want.
      proxy_next_upstream error timeout;
      proxy_next_upstream_tries 0;
      proxy_connect_timeout 2s;
      add_header X-Fathom-Upstream \$upstream_addr always;
      # The replica died or timed out with the request on it: an OpenAI-style error, not
      # nginx's HTML page, so that clients show what happened.
      error_page 502 504 = @replica_failed;
    }
    location @replica_failed {
      default_type application/json;
      add_header X-Fathom-Upstream \$upstream_addr always;
      return 502 '{"error":{"message":"the replica serving this request (\$upstream_addr) failed before it finished; a completion is not retried on another replica (it is not idempotent): send it again","type":"server_error","param":null,"code":"replica_failed"}}';
    }
  }
}
EOF
"$nginx_bin" -t -q -p "$dir" -c "$dir/nginx.conf" 2> "$dir/logs/nginx-check.log" \
  || { cat "$dir/logs/nginx-check.log" >&2; die "nginx rejected $dir/nginx.conf"; }
"$nginx_bin" -p "$dir" -c "$dir/nginx.conf" 2>> "$dir/logs/nginx-error.log" &
nginx_pid=$!

health() { /usr/bin/python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2> /dev/null; }
deadline=$((SECONDS + 120))
for i in "${!ports[@]}"; do
  until health "${ports[$i]}"; do
    kill -0 "${pids[$i]}" 2> /dev/null || { tail -5 "$dir/logs/replica-$i.log" >&2; die "replica $i exited (log: $dir/logs/replica-$i.log)"; }
    [ $SECONDS -lt $deadline ] || die "replica $i did not answer /health in 120 s"
    sleep 0.2
  done
done
until health "$port"; do
  kill -0 "$nginx_pid" 2> /dev/null || { tail -5 "$dir/logs/nginx-error.log" >&2; die "nginx exited"; }
  [ $SECONDS -lt $deadline ] || die "nginx did not answer on port $port"
  sleep 0.2
done
cat > "$dir/replicas.env.tmp" << EOF
FRONT_PORT=$port
REPLICA_PORTS="${ports[*]}"
REPLICA_PIDS="${pids[*]}"
NGINX_PID=$nginx_pid
EOF
mv "$dir/replicas.env.tmp" "$dir/replicas.env"
echo "replicas.sh: ready: http://127.0.0.1:$port -> $n replicas on ports ${ports[*]} (run dir $dir)"
wait "$nginx_pid"
