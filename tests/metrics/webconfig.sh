#!/usr/bin/env bash
# `below record --listen --web-config-file` against a real Prometheus
# (Debian's package) and curl, on this host with the plain read backend:
#  - web configs promtool rejects, below refuses to start with, naming the
#    reason; the ones it accepts, below serves;
#  - TLS with basic auth (bcrypt hash from htpasswd): no, wrong or unknown
#    credentials get 401 and no series; plain HTTP gets nothing; the
#    configured headers are sent; Prometheus scrapes it (up == 1);
#  - 300 idle and slowloris clients from 300 addresses, reconnecting when
#    closed: every Prometheus scrape in the window still succeeds;
#  - certificates rotated on disk are served without a restart;
#  - the web config switched to client certificates (RequireAndVerifyClientCert):
#    Prometheus with its certificate scrapes, without one it cannot; a
#    certificate from another CA is refused; with client_allowed_sans, one
#    from the same CA with another SAN is refused too;
#  - a web config made invalid while running refuses connections until fixed.
# Runs on the host (root); a step of tests/metrics/run.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"

install_pkgs "${PKGS_METRICS[@]}" python3
build_release
BELOW=$BELOW_BIN

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT


# ---- certificates, made now ------------------------------------------------------
pki=$tmp/pki
mkdir -p "$pki"
ca() { # ca NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$pki/$1.key" -out "$pki/$1.crt" -subj "/CN=$1" 2>/dev/null
}
leaf() { # leaf NAME CA SAN EKU
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$2.crt" -CAkey "$pki/$2.key" -CAcreateserial -days 2 \
    -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$3" "$4") -out "$pki/$1.crt" 2>/dev/null
}
ca ca
ca rogue-ca
leaf server-a ca "IP:127.0.0.1,DNS:localhost" serverAuth
leaf server-b ca "IP:127.0.0.1,DNS:localhost" serverAuth
leaf prometheus ca "DNS:prometheus.test" clientAuth
leaf intruder ca "DNS:intruder.test" clientAuth
leaf rogue rogue-ca "DNS:prometheus.test" clientAuth
# The server's files, rotated later by copying server-b over them.
cp "$pki/server-a.crt" "$tmp/server.crt"
cp "$pki/server-a.key" "$tmp/server.key"
fingerprint() { openssl x509 -noout -fingerprint -sha256 -in "$1"; }

PASS=correct-horse-$$
HASH=$(htpasswd -nbBC 10 prom "$PASS" | cut -d: -f2)
TLS="tls_server_config:
  cert_file: server.crt
  key_file: $tmp/server.key"
cat > "$tmp/web-basic.yml" <<YML
$TLS
basic_auth_users:
  prom: '$HASH'
http_server_config:
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    Strict-Transport-Security: max-age=31536000
YML
cat > "$tmp/web-mtls.yml" <<YML
$TLS
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: pki/ca.crt
  min_version: TLS13
YML
# Debian 12's promtool (2.42) predates client_allowed_sans: not checked by it.
{ cat "$tmp/web-mtls.yml"; echo "  client_allowed_sans: [prometheus.test]"; } > "$tmp/web-sans.yml"
# Top-level cgroups only: this test is about the transport, and a small
# body keeps a scrape well inside Prometheus' 1 s timeout on a busy host.
printf 'log_dir = "%s/log"\nstore_dir = "%s/store"\n[metrics]\nmax_depth = 1\n' "$tmp" "$tmp" > "$tmp/below.conf"

# ---- bad configs: promtool and below agree ----------------------------------------
log "bad web configs: promtool rejects them, record refuses to start and says why"
bad() { # bad NAME REASON-IN-BELOW'S-ERROR  (file text on stdin)
  local f=$tmp/bad-$1.yml out rc=0
  cat > "$f"
  if promtool check web-config "$f" >/dev/null 2>&1; then die "promtool accepts bad-$1.yml"; fi
  out=$(timeout 20 "$BELOW" --config "$tmp/below.conf" --cgroup-backend read record --count 1 \
    --listen 127.0.0.1:0 --web-config-file "$f" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || die "record started with bad-$1.yml"
  grep -qF -- "$2" <<<"$out" || { printf '%s\n' "$out" >&2; die "record's error for bad-$1.yml does not say: $2"; }
  log "  bad-$1.yml: $(grep -o 'Invalid web config.*' <<<"$out" | head -n 1)"
}
# shellcheck disable=SC2016 # backquotes are the error's own
bad unknown-key 'unknown field `tls_server_confg`' <<<"tls_server_confg: {}"
bad missing-cert 'failed to read cert_file' <<YML
tls_server_config:
  cert_file: nowhere.crt
  key_file: server.key
YML
bad key-mismatch 'do not make a key pair' <<YML
tls_server_config:
  cert_file: pki/server-a.crt
  key_file: pki/server-b.key
YML
bad plain-password 'has no valid bcrypt hash' <<<"basic_auth_users: {prom: $PASS}"
bad client-auth 'invalid client_auth_type' <<YML
$TLS
  client_auth_type: RequireSomething
YML
bad ca-without-auth 'client_auth_type is NoClientCert' <<YML
$TLS
  client_ca_file: pki/ca.crt
YML
bad header 'X-Frame-Options must be one of' <<YML
http_server_config:
  headers:
    X-Frame-Options: allow-from-anywhere
YML
bad header-name 'can not be configured' <<YML
http_server_config:
  headers:
    Set-Cookie: a=b
YML
bad tls-version 'unknown TLS version' <<YML
$TLS
  min_version: TLS1.2
YML
# The config key, and the flag without --listen.
{ printf 'web_config_file = "%s"\n' "$tmp/bad-header.yml"; cat "$tmp/below.conf"; } > "$tmp/below-web.conf"
out=$("$BELOW" --config "$tmp/below-web.conf" --cgroup-backend read record --count 1 --listen 127.0.0.1:0 2>&1) &&
  die "record started with web_config_file = bad-header.yml"
grep -qF 'X-Frame-Options must be one of' <<<"$out" || die "web_config_file: no reason given: $out"
out=$("$BELOW" --config "$tmp/below.conf" --cgroup-backend read record --count 1 \
  --web-config-file "$tmp/web-basic.yml" 2>&1) && die "record took --web-config-file without --listen"
grep -qF 'needs --listen' <<<"$out" || die "--web-config-file without --listen: $out"
for f in web-basic web-mtls; do
  promtool check web-config "$tmp/$f.yml" >/dev/null || die "promtool rejects $f.yml"
done

# ---- TLS and basic auth ------------------------------------------------------------
port=$(free_port)
cp "$tmp/web-basic.yml" "$tmp/web.yml"
"$BELOW" --config "$tmp/below.conf" --cgroup-backend read record -i 1 \
  --listen "127.0.0.1:$port" --web-config-file "$tmp/web.yml" 2> "$tmp/record.log" &
pids+=($!)
url=https://127.0.0.1:$port/metrics
scrape() { curl -sS --cacert "$pki/ca.crt" -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' "$@" "$url" 2>> "$tmp/curl.err" || true; }
code_is() { [ "$(scrape "${@:2}")" = "$1" ]; } # code_is HTTP-CODE CURL-ARGS…
wait_for 30 code_is 200 -u "prom:$PASS" || { cat "$tmp/record.log"; die "no TLS scrape with the password"; }
grep -q '^below_cgroup_cpu_usage_seconds_total{cgroup="/"}' "$tmp/body" || die "the authorised scrape has no series"
for h in 'x-frame-options: deny' 'x-content-type-options: nosniff' 'strict-transport-security: max-age=31536000'; do
  grep -qi "^$h" "$tmp/headers" || die "header missing: $h"
done
for cred in "" "-u prom:wrong" "-u nobody:$PASS" "-u prom:"; do
  # shellcheck disable=SC2086 # cred is zero or two words
  code=$(scrape $cred)
  [ "$code" = 401 ] || die "credentials '${cred:-none}': HTTP $code, not 401"
  ! grep -q below_ "$tmp/body" || die "credentials '${cred:-none}': series in a 401"
  grep -qi '^www-authenticate: basic' "$tmp/headers" || die "401 without WWW-Authenticate"
  grep -qi '^x-frame-options: deny' "$tmp/headers" || die "401 without the configured headers"
done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/metrics" || true)
[ "$code" = 000 ] || die "plain HTTP got an answer: $code"
log "TLS + basic auth: 200 with the password; none, wrong, unknown user, empty: 401 without series; plain HTTP: nothing"

# ---- Prometheus ------------------------------------------------------------------
pport=$(free_port)
printf '%s\n' "$PASS" > "$tmp/password"
cat > "$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: basic
    scheme: https
    basic_auth: {username: prom, password_file: $tmp/password}
    tls_config: {ca_file: $pki/ca.crt}
    static_configs: [{targets: ["127.0.0.1:$port"]}]
  - job_name: mtls
    scheme: https
    tls_config: {ca_file: $pki/ca.crt, cert_file: $pki/prometheus.crt, key_file: $pki/prometheus.key}
    static_configs: [{targets: ["127.0.0.1:$port"]}]
YML
promtool check config "$tmp/prometheus.yml" >&2
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$pport" 2> "$tmp/prometheus.log" &
pids+=($!)
api=http://127.0.0.1:$pport/api/v1
query() { # query PROMQL → the first result's value, or nothing
  curl -sf "$api/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
up_is() { [ "$(query "up{job=\"$1\"}")" = "$2" ]; }
wait_for 60 up_is basic 1 || { tail -20 "$tmp/prometheus.log"; die "Prometheus does not scrape over TLS with basic auth"; }
wait_for 10 up_is mtls 0 || die "Prometheus without the password scrapes"
log "Prometheus: job basic (TLS, basic auth) up; job mtls (no password) down"

# ---- idle and slow clients ---------------------------------------------------------
IDLERS=300 SCRAPES=6
log "$IDLERS idle and slowloris clients from $IDLERS addresses while curl scrapes $SCRAPES times"
t0=$(date +%s)
# At most 60 s; stopped as soon as the scrapes are done.
python3 tests/metrics/idlers.py 127.0.0.1 "$port" "$IDLERS" 60 > "$tmp/idlers.out" &
flood=$!
sleep 2
ok=0 slowest=0
for _ in $(seq "$SCRAPES"); do
  t=$(date +%s%N)
  : > "$tmp/curl.err"
  if [ "$(scrape -u "prom:$PASS")" = 200 ]; then ok=$((ok + 1)); else log "  a scrape failed: $(cat "$tmp/curl.err")"; fi
  ms=$((($(date +%s%N) - t) / 1000000)); [ "$ms" -le "$slowest" ] || slowest=$ms
  sleep 0.5
done
# Prometheus scrapes once a second: give it 6 s of the flood at least.
while [ $(($(date +%s) - t0)) -lt 9 ]; do sleep 0.5; done
kill -TERM "$flood"
wait "$flood"
cat "$tmp/idlers.out" >&2
# Its scrapes from the flood's third second to its end.
at=$(date +%s)
range=$((at - t0 - 2))
prom() { # prom FUNCTION → FUNCTION(up{job="basic"}[range]) at the flood's end
  curl -sf "$api/query" --data-urlencode "query=$1(up{job=\"basic\"}[${range}s])" --data-urlencode "time=$at" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)'
}
n=$(prom count_over_time)
good=$(prom sum_over_time)
log "during the flood: curl $ok of $SCRAPES scrapes (slowest $slowest ms); Prometheus $good of $n scrapes up"
[ "$ok" = "$SCRAPES" ] || die "scrapes failed while idle clients were connected"
{ [ "$n" -ge 4 ] && [ "$good" = "$n" ]; } || die "Prometheus scrapes failed while idle clients were connected"
grep -q ' 300 connections from 300 addresses' "$tmp/idlers.out" || die "the idlers did not hold their connections"

# ---- certificates rotated without a restart ----------------------------------------------
served() { openssl s_client -connect "127.0.0.1:$port" -CAfile "$pki/ca.crt" </dev/null 2>/dev/null |
  openssl x509 -noout -fingerprint -sha256; }
serving() { [ "$(served)" = "$(fingerprint "$pki/$1.crt")" ]; }
serving server-a || die "not serving server-a's certificate"
cp "$pki/server-b.key" "$tmp/server.key.new"; cp "$pki/server-b.crt" "$tmp/server.crt.new"
mv "$tmp/server.key.new" "$tmp/server.key"; mv "$tmp/server.crt.new" "$tmp/server.crt"
wait_for 5 serving server-b || die "the rotated certificate is not served"
[ "$(scrape -u "prom:$PASS")" = 200 ] || die "no scrape after rotating the certificate"
log "certificate rotated on disk: served from the next connection, no restart"

# ---- client certificates ---------------------------------------------------------
cp "$tmp/web-mtls.yml" "$tmp/web.yml"
mtls() { scrape --cert "$pki/$1.crt" --key "$pki/$1.key"; }
mtls_is() { [ "$(mtls "$2")" = "$1" ]; } # mtls_is HTTP-CODE CLIENT
wait_for 5 mtls_is 200 prometheus || die "the client certificate is refused"
[ "$(mtls intruder)" = 200 ] || die "a certificate from the CA is refused"
[ "$(mtls rogue)" = 000 ] || die "a certificate from another CA is accepted"
[ "$(scrape -u "prom:$PASS")" = 000 ] || die "served without a client certificate"
wait_for 30 up_is mtls 1 || { tail -20 "$tmp/prometheus.log"; die "Prometheus with its client certificate does not scrape"; }
wait_for 10 up_is basic 0 || die "Prometheus without a client certificate still scrapes"
log "client certificates: Prometheus with its certificate up, without one down; another CA's, none: refused"
cp "$tmp/web-sans.yml" "$tmp/web.yml"
wait_for 5 mtls_is 000 intruder || die "client_allowed_sans: a certificate with another SAN is accepted"
[ "$(mtls prometheus)" = 200 ] || die "client_allowed_sans: the allowed SAN is refused"
sleep 2
up_is mtls 1 || die "Prometheus (SAN prometheus.test) does not scrape with client_allowed_sans"
log "client_allowed_sans [prometheus.test]: Prometheus' certificate served, the CA's intruder.test refused"

# ---- a config broken while running ---------------------------------------------------
printf 'tls_server_config:\n  cert_file: missing.crt\n' > "$tmp/web.yml"
wait_for 5 mtls_is 000 prometheus || die "served with a broken web config"
grep -q 'refusing connections until the web config is fixed:.*missing.crt' "$tmp/record.log" || die "no log line for the broken web config"
cp "$tmp/web-sans.yml" "$tmp/web.yml"
wait_for 5 mtls_is 200 prometheus || die "not served again after fixing the web config"
log "web config broken while running: connections refused (and logged) until fixed"
log "passed"
